package mysql

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/budgetd/budgetd/internal/groupcommit"
	"github.com/budgetd/budgetd/internal/ledger"
)

// Group commit (docs/mysql.md "Group commit"): with the decision cache on,
// single-bucket Fillups go through a batcher (internal/groupcommit). A call
// whose bucket has no decision of this Store at the database goes at once,
// alone, and is decided as without group commit (decide). The calls that
// arrive for a bucket while its decision is at the database queue; the next
// batch takes all of them (up to groupMax) and decides them one after
// another, in arrival order, at one instant, on the cached view of the
// bucket (decideCached), and sends one multi-statement write that
// compare-and-sets the row once and writes every decision's history,
// idempotency record and events. Each caller is answered after its commit.
// When the batch cannot be decided or kept so (a miss, a decision that
// fails or writes nothing, a conflict, a duplicate Idempotency-Key), every
// caller decides again on its own, as a cache miss does (decide).

// groupSlots is how many batches the batcher has at the database at once:
// the pool's connections.
const groupSlots = 64

// groupMax is the most decisions one batch holds.
const groupMax = 128

// WithGroupCommit turns group commit on (the default) or off. It works with
// the decision cache only: with the cache off every Fillup is decided alone.
func WithGroupCommit(on bool) Option { return func(s *Store) { s.groupOff = !on } }

// groupCall is one single-bucket Fillup in the batcher and, once its batch
// has run, its answer: nil (fn's outcome stands), errMiss (decide again
// alone) or the error of the call.
type groupCall struct {
	ctx      context.Context
	deadline time.Time
	ref      ledger.BucketRef
	fn       func(v *view) error
	idem     ledger.Idempotency
	err      error
}

// bucketRule lets one bucket's calls go in a batch, and none while a batch
// of that bucket is at the database: the calls that arrive meanwhile queue,
// and the next batch takes them all. The batcher calls it under its lock.
type bucketRule struct {
	busy   map[ledger.BucketRef]bool // buckets with a batch at the database
	chosen bool                      // in this pass, a bucket was admitted:
	ref    ledger.BucketRef          // this one
}

// Pass begins a choice: no bucket yet.
func (r *bucketRule) Pass() { r.chosen = false }

// Admit lets c go when it is of the bucket this pass chose, or when no
// bucket is chosen yet and c's has no batch at the database (then c's is
// chosen).
func (r *bucketRule) Admit(c *groupCall) bool {
	if r.chosen {
		return c.ref == r.ref
	}
	if r.busy[c.ref] {
		return false
	}
	r.busy[c.ref], r.chosen, r.ref = true, true, c.ref
	return true
}

// Returned: c's batch is back from the database.
func (r *bucketRule) Returned(c *groupCall) { delete(r.busy, c.ref) }

// groupStats counts the batcher's batches and the calls in them.
type groupStats struct {
	batches, calls, grouped atomic.Int64
}

// GroupCommitStats returns how many batches the group commit sent, how many
// calls they held, and how many of those calls were decided in a batch of
// several and kept (zeros when it is off).
func (s *Store) GroupCommitStats() (batches, calls, grouped int64) {
	return s.group.batches.Load(), s.group.calls.Load(), s.group.grouped.Load()
}

// decideGrouped decides fn, a single-bucket Fillup's decision on ref,
// through the batcher; without it (group commit or the cache off) as
// decide does.
func (s *Store) decideGrouped(ctx context.Context, ref ledger.BucketRef, fn func(v *view) error, idem ledger.Idempotency) error {
	refs := []ledger.BucketRef{ref}
	if s.batcher == nil {
		return s.decide(ctx, refs, fn, withIdem(idem))
	}
	c := &groupCall{ctx: ctx, ref: ref, fn: fn, idem: idem}
	c.deadline, _ = ctx.Deadline()
	if err := s.batcher.Do(ctx, c.deadline, c); err != nil {
		// Still queued (then never sent), or in a batch at the database
		// (the outcome is unknown).
		return classify(err)
	}
	if errors.Is(c.err, errMiss) {
		return s.decide(ctx, refs, fn, withIdem(idem))
	}
	return c.err
}

// runGroup decides a batch of calls of one bucket (bucketRule): one alone
// as decide does; several on the cache in one write, or, when that cannot
// be, each answered errMiss to decide again on its own.
func (s *Store) runGroup(batch []*groupCall) {
	live := batch[:0:0]
	for _, c := range batch {
		switch {
		case c.ctx.Err() != nil:
			c.err = classify(c.ctx.Err())
		case !c.deadline.IsZero() && !time.Now().Before(c.deadline):
			c.err = classify(context.DeadlineExceeded)
		default:
			live = append(live, c)
		}
	}
	if len(live) == 0 {
		return
	}
	s.group.batches.Add(1)
	s.group.calls.Add(int64(len(live)))
	refs := []ledger.BucketRef{live[0].ref}
	if len(live) == 1 {
		c := live[0]
		c.err = s.decide(c.ctx, refs, c.fn, withIdem(c.idem))
		return
	}
	// The batch serves many callers, so no one caller's cancellation stops
	// it: it runs until the latest of their deadlines.
	ctx, cancel := context.WithoutCancel(live[0].ctx), context.CancelFunc(func() {})
	if last, ok := latestDeadline(live); ok {
		ctx, cancel = context.WithDeadline(ctx, last)
	}
	defer cancel()
	err := func() error {
		unlock, err := s.cache.lock(ctx, refs)
		if err != nil {
			return classify(err)
		}
		defer unlock()
		fns := make([]func(v *view) error, len(live))
		for i, c := range live {
			fns[i] = c.fn
		}
		return s.decideCached(ctx, refs, fns...)
	}()
	if err == nil {
		s.group.grouped.Add(int64(len(live)))
	}
	for _, c := range live {
		c.err = err
	}
}

// latestDeadline is the latest deadline of the calls, false when one has
// none.
func latestDeadline(calls []*groupCall) (time.Time, bool) {
	var last time.Time
	for _, c := range calls {
		if c.deadline.IsZero() {
			return time.Time{}, false
		}
		if c.deadline.After(last) {
			last = c.deadline
		}
	}
	return last, true
}

// newBatcher returns the group commit's batcher, nil when it is off.
func (s *Store) newBatcher() *groupcommit.Batcher[*groupCall] {
	if s.groupOff || s.cache == nil {
		return nil
	}
	return groupcommit.New(groupSlots, groupMax, s.runGroup, &bucketRule{busy: map[ledger.BucketRef]bool{}})
}

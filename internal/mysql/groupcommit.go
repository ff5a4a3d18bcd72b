package mysql

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/budgetd/budgetd/internal/groupcommit"
	"github.com/budgetd/budgetd/internal/ledger"
)

// Group commit (docs/mysql.md "Group commit"): with the decision cache on,
// single-bucket Fillups go through a batcher (internal/groupcommit) with
// one batch at the database at a time (groupSlots). A call that finds no
// batch out goes at once, alone, and is decided as without group commit
// (decide). The calls that arrive meanwhile queue, whatever their buckets;
// the next batch takes them (up to groupMax, none of a bucket that has a
// batch at the database: batchRule, which matters with more than one slot)
// and decides them at one instant, each bucket's calls one after another in
// arrival order on that bucket's view (decideBatch): the cached
// view, a bucket it has no entry of presumed new, or one read of all of
// them when that cannot be decided or kept. It then sends one
// multi-statement write that compare-and-sets each row once, in primary-key
// order, and writes every decision's history, idempotency record and
// events, in one transaction. Each caller is answered after its
// commit. When the batch cannot be decided or kept so (a decision that
// fails, a conflict on any row, a duplicate Idempotency-Key), every caller
// decides again on its own, as a cache miss does (decide).

// groupSlots is how many batches the batcher has at the database at once.
// One, so that the calls that arrive meanwhile queue and go together: with
// as many as the pool's connections, 64 callers on 64 buckets would each go
// alone, and with 4 a batch held 10 calls where with one it holds 32, at
// half the database's and two thirds of the store's CPU per call
// (docs/mysql.md "Group commit": why one batch at a time).
const groupSlots = 1

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

// batchRule lets calls of any buckets go in one batch, but none of a bucket
// that has a batch at the database: those wait for it to return, so that a
// bucket's decisions follow each other's rows. The batcher calls it under
// its lock.
type batchRule struct {
	busy map[ledger.BucketRef]bool // buckets with a batch at the database
	pass map[ledger.BucketRef]bool // of them, the ones this pass admitted
}

func newBatchRule() *batchRule {
	return &batchRule{busy: map[ledger.BucketRef]bool{}, pass: map[ledger.BucketRef]bool{}}
}

// Pass begins a choice: no bucket admitted yet.
func (r *batchRule) Pass() { clear(r.pass) }

// Admit lets c go when its bucket was admitted in this pass, or has no
// batch at the database (then its bucket is at the database from here on).
func (r *batchRule) Admit(c *groupCall) bool {
	if r.pass[c.ref] {
		return true
	}
	if r.busy[c.ref] {
		return false
	}
	r.busy[c.ref], r.pass[c.ref] = true, true
	return true
}

// Returned: c's batch is back from the database.
func (r *batchRule) Returned(c *groupCall) { delete(r.busy, c.ref) }

// groupStats counts the batcher's batches and the calls in them.
type groupStats struct {
	batches, calls, grouped atomic.Int64
	// mixed counts the kept batches of several buckets, buckets the
	// buckets in them, read the kept batches decided on a read.
	mixed, buckets, read atomic.Int64
}

// GroupCommitStats returns how many batches the group commit sent, how many
// calls they held, and how many of those calls were decided in a batch of
// several and kept (zeros when it is off).
func (s *Store) GroupCommitStats() (batches, calls, grouped int64) {
	return s.group.batches.Load(), s.group.calls.Load(), s.group.grouped.Load()
}

// GroupCommitBuckets returns how many kept batches held calls of several
// buckets, how many buckets those held in all, and how many kept batches of
// several calls were decided on a read rather than the cache.
func (s *Store) GroupCommitBuckets() (mixed, buckets, read int64) {
	return s.group.mixed.Load(), s.group.buckets.Load(), s.group.read.Load()
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
	// ctx ends at that deadline itself: the batcher needs no timer of its
	// own for it.
	if err := s.batcher.Do(ctx, time.Time{}, c); err != nil {
		// Still queued (then never sent), or in a batch at the database
		// (the outcome is unknown).
		return classify(err)
	}
	if errors.Is(c.err, errMiss) {
		return s.decide(ctx, refs, fn, withIdem(idem))
	}
	return c.err
}

// runGroup decides a batch of calls (batchRule): one alone as decide does;
// several in one write (decideBatch), or, when that cannot be, each
// answered errMiss to decide again on its own.
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
	if len(live) == 1 {
		c := live[0]
		c.err = s.decide(c.ctx, []ledger.BucketRef{c.ref}, c.fn, withIdem(c.idem))
		return
	}
	// A call with the Idempotency-Key of an earlier call of the batch is a
	// replay of that call or a refusal, which changes nothing: it is
	// answered alone once the batch is written (the batch's record is there
	// then), and the batch goes on without it.
	live = sameKeyAlone(live)
	// The batch serves many callers, so no one caller's cancellation stops
	// it: it runs until the latest of their deadlines.
	ctx, cancel := context.WithoutCancel(live[0].ctx), context.CancelFunc(func() {})
	if last, ok := latestDeadline(live); ok {
		ctx, cancel = context.WithDeadline(ctx, last)
	}
	defer cancel()
	for {
		read, nrefs, err := s.runBatch(ctx, live)
		var miss *limitMissing
		if errors.As(err, &miss) {
			// The read found a limit missing: its calls are answered alone
			// (ErrLimitNotFound, which changes nothing), the others decided
			// again without them.
			live = slices.DeleteFunc(live, func(c *groupCall) bool {
				if c.ref.Limit == miss.name {
					c.err = errMiss
					return true
				}
				return false
			})
			if len(live) > 0 {
				continue
			}
			return
		}
		if err == nil {
			s.group.grouped.Add(int64(len(live)))
			if nrefs > 1 {
				s.group.mixed.Add(1)
				s.group.buckets.Add(int64(nrefs))
			}
			if read {
				s.group.read.Add(1)
			}
		}
		for _, c := range live {
			c.err = err
		}
		return
	}
}

// sameKeyAlone answers errMiss to each call with the Idempotency-Key of an
// earlier call of calls and returns the others.
func sameKeyAlone(calls []*groupCall) []*groupCall {
	var seen map[ledger.Idempotency]bool
	return slices.DeleteFunc(calls, func(c *groupCall) bool {
		if c.idem.Key == "" {
			return false
		}
		k := ledger.Idempotency{Scope: c.idem.Scope, Key: c.idem.Key}
		if seen[k] {
			c.err = errMiss
			return true
		}
		if seen == nil {
			seen = map[ledger.Idempotency]bool{}
		}
		seen[k] = true
		return false
	})
}

// runBatch decides the calls as one batch (decideBatch) under the
// in-process stripes of their buckets, and returns whether it was decided
// on a read and how many buckets it held.
func (s *Store) runBatch(ctx context.Context, calls []*groupCall) (read bool, nrefs int, err error) {
	// The batch's buckets in order of their first call, and each call's.
	var refs []ledger.BucketRef
	at := make([]int, len(calls))
	fns := make([]func(v *view) error, len(calls))
	for j, c := range calls {
		i := slices.Index(refs, c.ref)
		if i < 0 {
			i, refs = len(refs), append(refs, c.ref)
		}
		at[j], fns[j] = i, c.fn
	}
	unlock, err := s.cache.lock(ctx, refs)
	if err != nil {
		return false, len(refs), classify(err)
	}
	defer unlock()
	read, err = s.decideBatch(ctx, refs, at, fns)
	return read, len(refs), err
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

// decideBatch makes the decisions fns of a batch, fns[j] on bucket at[j] of
// refs, and writes them in one transaction: with one round trip on the
// cached rows, a bucket the cache has no entry of presumed new (viewOf);
// otherwise (a bucket suspect or cooling, a presumption that fails, or
// denials alone, which must be of the rows as they are) on one read of them
// all (two; read reports it). It returns errMiss when the callers must
// decide again alone: a decision failed, a read found a limit missing, or
// the write found a row changed, a limit's terms or the clock estimate off,
// or an Idempotency-Key's record there.
func (s *Store) decideBatch(ctx context.Context, refs []ledger.BucketRef, at []int, fns []func(v *view) error) (read bool, err error) {
	if v, clock, presumed, ok := s.cache.viewOf(refs, true); ok {
		v.guard = !s.at(v, clock)
		err := s.writeBatch(ctx, nil, v, at, fns)
		if !errors.Is(err, errEmpty) && !(presumed && errors.Is(err, errMiss)) {
			return false, err
		}
		// Denials alone, without entries (a bucket at its capacity): they
		// must be of the rows as they are. Or a bucket presumed new was not
		// (another instance wrote it, or this one long ago): the batch is
		// decided on one read.
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return true, classify(err)
	}
	defer conn.Close()
	v, err := s.read(ctx, conn, refs, false)
	var miss *limitMissing
	switch {
	case errors.Is(err, ledger.ErrUnavailable), errors.As(err, &miss):
		return true, err // a missing limit: runGroup answers its calls alone
	case err != nil:
		return true, errMiss // a spec that does not decode, say: each call's own answer
	}
	return true, s.writeBatch(ctx, conn, v, at, fns)
}

// writeBatch decides fns on v (decideEach) and sends what they changed
// (send).
func (s *Store) writeBatch(ctx context.Context, conn *sql.Conn, v *view, at []int, fns []func(v *view) error) error {
	if err := v.decideEach(at, fns); err != nil {
		return err
	}
	return s.send(ctx, conn, v)
}

// decideEach makes the decisions fns on v, in order, fns[j] on bucket at[j]
// of v as a view of that bucket alone (each decision of a single-bucket
// Fillup reads and changes its bucket as bucket 0): each on the bucket as
// the one before on it left it, with the terms that state gives, as the
// next decision alone would see the row. It returns errMiss when one fails
// (perhaps an answer to stale terms: decide on a read).
func (v *view) decideEach(at []int, fns []func(v *view) error) error {
	seen := make([]bool, len(v.buckets))
	for j, fn := range fns {
		i := at[j]
		if seen[i] {
			v.terms(i)
		}
		seen[i] = true
		one := v.of(i)
		if err := fn(one); err != nil {
			return errMiss
		}
		v.holds = append(v.holds, one.holds...)
		v.idems = append(v.idems, one.idems...)
		for _, e := range one.events {
			e.i = i
			v.events = append(v.events, e)
		}
	}
	return nil
}

// of returns a view of bucket i of v alone, at v's instant, sharing its
// rows: what a decision changes of the bucket (state, history entries) is
// changed in v; the holds, idempotency records and events it adds are its
// own, for the caller to move to v.
func (v *view) of(i int) *view {
	return &view{now: v.now, limits: v.limits[i : i+1 : i+1], base: v.base[i : i+1 : i+1], buckets: v.buckets[i : i+1 : i+1],
		dirty: v.dirty[i : i+1 : i+1], entries: v.entries[i : i+1 : i+1], cached: v.cached, guard: v.guard}
}

// newBatcher returns the group commit's batcher, nil when it is off.
func (s *Store) newBatcher() *groupcommit.Batcher[*groupCall] {
	if s.groupOff || s.cache == nil {
		return nil
	}
	return groupcommit.New(s.groupSlots, groupMax, s.runGroup, newBatchRule())
}

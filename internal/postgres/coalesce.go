package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/budgetd/budgetd/internal/ledger"
)

// maxBatch is the most Fillups one budgetd_fillup_seq call decides.
const maxBatch = 256

// coalescer queues the concurrent single-bucket Fillups of one bucket so that
// one call decides all that are waiting (see migrations/0003_fillup_seq.sql).
// While a bucket's batch is at the database, the next callers queue; when it
// returns, everything queued goes as the next batch. An idle bucket's call
// goes at once, as a batch of one, through budgetd_fillup: coalescing adds no
// round trip and no wait of its own.
type coalescer struct {
	mu     sync.Mutex
	queues map[ledger.BucketRef]*fillQueue
}

// fillQueue is the calls of one bucket waiting for the running batch.
type fillQueue struct {
	calls []*fillCall
}

// fillCall is one queued Fillup and, once done is closed, its answer.
type fillCall struct {
	ctx  context.Context
	cost string
	done chan struct{}
	out  ledger.FillupOutcome
	err  error
}

// fillupCoalesced charges one bucket through its queue. The first caller of
// an idle bucket runs its own call at once, in its own goroutine; callers that
// arrive meanwhile queue, and a goroutine started when it returns sends them.
func (s *Store) fillupCoalesced(ctx context.Context, it ledger.Charge) (ledger.FillupOutcome, error) {
	c := &fillCall{ctx: ctx, cost: it.Cost.String(), done: make(chan struct{})}
	co := &s.co
	co.mu.Lock()
	q, running := co.queues[it.Bucket]
	if !running {
		q = &fillQueue{}
		co.queues[it.Bucket] = q
		co.mu.Unlock()
		s.runBatch(it.Bucket, []*fillCall{c})
		s.drainQueue(it.Bucket, q, true)
		return c.out, c.err
	}
	q.calls = append(q.calls, c)
	co.mu.Unlock()
	select {
	case <-c.done:
		return c.out, c.err
	case <-ctx.Done():
		// The batch may still charge it: the outcome is unknown, as for a
		// direct call cancelled while its statement runs.
		return ledger.FillupOutcome{}, fmt.Errorf("postgres fillup: %w", ctx.Err())
	}
}

// drainQueue sends ref's queued calls as batches until none are left, then
// forgets the queue. With handOff, a caller whose own call is done starts a
// goroutine for the queued calls instead of sending them itself.
func (s *Store) drainQueue(ref ledger.BucketRef, q *fillQueue, handOff bool) {
	co := &s.co
	for {
		co.mu.Lock()
		if len(q.calls) == 0 {
			delete(co.queues, ref)
			co.mu.Unlock()
			return
		}
		if handOff {
			co.mu.Unlock()
			go s.drainQueue(ref, q, false)
			return
		}
		batch := q.calls[:min(len(q.calls), maxBatch)]
		q.calls = q.calls[len(batch):]
		co.mu.Unlock()
		s.runBatch(ref, batch)
	}
}

// runBatch decides batch, skipping calls whose caller has given up, and
// answers each call. A failed batch fails every call in it.
func (s *Store) runBatch(ref ledger.BucketRef, batch []*fillCall) {
	live := batch[:0:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.err = fmt.Errorf("postgres fillup: %w", err)
			close(c.done)
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	s.stats.batches.Add(1)
	s.stats.batched.Add(uint64(len(live)))
	// The batch serves many callers, so no one caller's context bounds it;
	// s.do applies the store's timeout.
	ctx := context.WithoutCancel(live[0].ctx)
	if len(live) == 1 {
		c := live[0]
		c.out, c.err = s.fillupOne(ctx, []string{ref.Limit}, []string{ref.Key}, []string{c.cost}, ledger.Idempotency{})
		close(c.done)
		return
	}
	costs := make([]string, len(live))
	for i, c := range live {
		costs[i] = c.cost
	}
	var docs []json.RawMessage
	err := s.queryJSON(ctx, "fillup", &docs, "SELECT budgetd_fillup_seq($1, $2, $3, $4)", ref.Limit, ref.Key, costs, s.nowArg())
	if err == nil && len(docs) != len(live) {
		err = fmt.Errorf("postgres fillup: %d answers for %d calls: %w", len(docs), len(live), ledger.ErrUnavailable)
	}
	for i, c := range live {
		if err != nil {
			c.err = err
		} else {
			c.out, c.err = decodeFillup(docs[i])
		}
		close(c.done)
	}
}

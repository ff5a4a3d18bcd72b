package postgres

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shopspring/decimal"
)

// maxBatch is the most Fillups one budgetd_fillup_batch call decides.
const maxBatch = 256

// coalescer queues the concurrent single-bucket Fillups of one bucket so that
// one call decides all that are waiting (see migrations/0004_fillup_batch.sql).
// While a bucket's batch is at the database, the next callers queue; when it
// returns, everything queued goes as the next batch, in arrival order. An
// idle bucket's call goes at once, as a batch of one: coalescing adds no
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
	idem ledger.Idempotency
	done chan struct{}
	out  ledger.FillupOutcome
	err  error
}

func newFillCall(ctx context.Context, cost decimal.Decimal, idem ledger.Idempotency) *fillCall {
	return &fillCall{ctx: ctx, cost: cost.String(), idem: idem, done: make(chan struct{})}
}

// fillupSingle charges one bucket: through its queue when coalescing is on,
// otherwise as a batch of one.
func (s *Store) fillupSingle(ctx context.Context, it ledger.Charge, idem ledger.Idempotency) (ledger.FillupOutcome, error) {
	c := newFillCall(ctx, it.Cost, idem)
	if !s.cfg.coalesce {
		s.runBatch(it.Bucket, []*fillCall{c})
		return c.out, c.err
	}
	co := &s.co
	co.mu.Lock()
	q, running := co.queues[it.Bucket]
	if !running {
		// The first caller of an idle bucket runs its own call at once;
		// callers that arrive meanwhile queue, and a goroutine started when
		// it returns sends them.
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

// batchRow is one row of budgetd_fillup_batch: an answer in columns, an
// idempotent replay (doc) or a refusal of that one call (errCode).
type batchRow struct {
	fits                  *bool
	level                 *string
	updatedUS             *int64
	amounts               []string
	expires               []int64
	nowUS                 *int64
	capacity, leakAmount  *string
	leakPerUS             *int64
	history               *bool
	createdUS, limUpdated *int64
	doc                   []byte
	errCode, errMsg       *string
}

// runBatch decides batch, skipping calls whose caller has given up, and
// answers each call. A failed batch fails every call in it: it is one
// statement, so none of it was charged (or, when the connection broke after
// sending it, the outcome is unknown to all of them alike).
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
	costs := make([]string, len(live))
	scopes := make([]*string, len(live))
	idems := make([]*string, len(live))
	hashes := make([]*string, len(live))
	for i, c := range live {
		costs[i] = c.cost
		if c.idem.Key != "" {
			scopes[i], idems[i], hashes[i] = &c.idem.Scope, &c.idem.Key, &c.idem.Hash
		}
	}
	// A batch of one is bounded by its caller's context; a larger one serves
	// many callers, so no one caller's context bounds it (s.do applies the
	// store's timeout).
	ctx := live[0].ctx
	if len(live) > 1 {
		ctx = context.WithoutCancel(ctx)
	}
	var got []batchRow
	err := s.do(ctx, "fillup", func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, "SELECT * FROM budgetd_fillup_batch($1, $2, $3, $4, $5, $6, $7)",
			ref.Limit, ref.Key, costs, s.nowArg(), scopes, idems, hashes)
		if err != nil {
			return err
		}
		got = got[:0]
		var r batchRow
		_, err = pgx.ForEachRow(rows, []any{&r.fits, &r.level, &r.updatedUS, &r.amounts, &r.expires, &r.nowUS,
			&r.capacity, &r.leakAmount, &r.leakPerUS, &r.history, &r.createdUS, &r.limUpdated, &r.doc, &r.errCode, &r.errMsg},
			func() error {
				got = append(got, r)
				r = batchRow{} // nothing of the next row may land in this one's pointers
				return nil
			})
		return err
	})
	if err == nil && len(got) != len(live) {
		err = fmt.Errorf("postgres fillup: %d answers for %d calls: %w", len(got), len(live), ledger.ErrUnavailable)
	}
	for i, c := range live {
		if err != nil {
			c.err = err
		} else {
			c.out, c.err = s.decodeBatchRow(ctx, ref.Limit, &got[i])
		}
		close(c.done)
	}
}

// decodeBatchRow turns one row of budgetd_fillup_batch into a call's answer.
func (s *Store) decodeBatchRow(ctx context.Context, limit string, r *batchRow) (ledger.FillupOutcome, error) {
	switch {
	case r.errCode != nil:
		msg := ""
		if r.errMsg != nil {
			msg = *r.errMsg
		}
		return ledger.FillupOutcome{}, s.fail(ctx, "fillup", &pgconn.PgError{Severity: "ERROR", Code: *r.errCode, Message: msg})
	case r.doc != nil:
		return decodeFillup(r.doc)
	}
	if r.fits == nil || r.level == nil || r.nowUS == nil || r.capacity == nil || r.leakAmount == nil ||
		r.leakPerUS == nil || r.history == nil || r.createdUS == nil || r.limUpdated == nil || len(r.amounts) != len(r.expires) {
		return ledger.FillupOutcome{}, fmt.Errorf("postgres fillup: incomplete answer row: %w", ledger.ErrUnavailable)
	}
	level, err1 := decimal.NewFromString(*r.level)
	capacity, err2 := decimal.NewFromString(*r.capacity)
	leak, err3 := decimal.NewFromString(*r.leakAmount)
	if err1 != nil || err2 != nil || err3 != nil {
		return ledger.FillupOutcome{}, fmt.Errorf("postgres fillup: decoding %q %q %q: %w", *r.level, *r.capacity, *r.leakAmount, ledger.ErrUnavailable)
	}
	var st bucket.State // never written: the zero State, as stateDoc.state
	if r.updatedUS != nil || !level.IsZero() || len(r.amounts) > 0 {
		st = bucket.State{Level: level, Holds: make([]bucket.Hold, len(r.amounts))}
		if r.updatedUS != nil {
			st.Updated = fromUS(*r.updatedUS)
		}
		for i, a := range r.amounts {
			amount, err := decimal.NewFromString(a)
			if err != nil {
				return ledger.FillupOutcome{}, fmt.Errorf("postgres fillup: decoding hold %q: %w", a, ledger.ErrUnavailable)
			}
			st.Holds[i] = bucket.Hold{Amount: amount, ExpiresAt: fromUS(r.expires[i])}
		}
	}
	snap := ledger.Snapshot{
		Limit: ledger.Limit{
			Name:       limit,
			Capacity:   capacity,
			LeakAmount: leak,
			LeakPer:    time.Duration(*r.leakPerUS) * time.Microsecond,
			History:    *r.history,
			CreatedAt:  fromUS(*r.createdUS),
			UpdatedAt:  fromUS(*r.limUpdated),
		},
		State: st,
		Now:   fromUS(*r.nowUS),
	}
	return ledger.FillupOutcome{Accepted: *r.fits, Items: []ledger.ItemOutcome{{Fits: *r.fits, Snapshot: snap}}}, nil
}

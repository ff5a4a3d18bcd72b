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

// maxBatch is the most Fillups one database call decides.
const maxBatch = 256

// coalescer queues single-bucket Fillups and sends what queued as one
// database call: one round trip, one transaction and one commit flush for
// many callers (see migrations/0004_fillup_batch.sql). A call queues when a
// call of its bucket is at the database (it would wait for that row's lock
// anyway: a hot bucket) or when every connection the store may use is busy.
// Whoever's batch returns sends the next one: every queued call whose bucket
// is not at the database, in arrival order, the calls of one bucket decided
// one after another under one lock of its row. A call that finds a connection
// free and its bucket idle goes at once, as a batch of one: coalescing adds
// no round trip and no wait of its own.
type coalescer struct {
	mu       sync.Mutex
	slots    int // calls to the database at once; the pool's size
	inFlight int
	busy     map[ledger.BucketRef]int // calls of a bucket at the database
	queue    []*fillCall
}

// fillCall is one queued Fillup and, once done is closed, its answer.
type fillCall struct {
	ctx  context.Context
	ref  ledger.BucketRef
	cost string
	idem ledger.Idempotency
	done chan struct{}
	out  ledger.FillupOutcome
	err  error
}

func newFillCall(ctx context.Context, ref ledger.BucketRef, cost decimal.Decimal, idem ledger.Idempotency) *fillCall {
	return &fillCall{ctx: ctx, ref: ref, cost: cost.String(), idem: idem, done: make(chan struct{})}
}

// fillupSingle charges one bucket: through the queue when coalescing is on,
// otherwise as a batch of one.
func (s *Store) fillupSingle(ctx context.Context, it ledger.Charge, idem ledger.Idempotency) (ledger.FillupOutcome, error) {
	c := newFillCall(ctx, it.Bucket, it.Cost, idem)
	if !s.cfg.coalesce {
		s.runBatch([]*fillCall{c})
		return c.out, c.err
	}
	co := &s.co
	co.mu.Lock()
	if co.inFlight < co.slots && co.busy[c.ref] == 0 {
		co.inFlight++
		co.busy[c.ref]++
		co.mu.Unlock()
		batch := []*fillCall{c}
		s.runBatch(batch)
		// Send what queued meanwhile, in a goroutine: this caller has its
		// answer.
		s.sendNext(batch, true)
		return c.out, c.err
	}
	co.queue = append(co.queue, c)
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

// sendNext is called with the batch that just returned, by the holder of its
// connection slot: it sends the next batches until nothing it may send is
// queued, then gives the slot up. With handOff, a goroutine does the sending.
func (s *Store) sendNext(done []*fillCall, handOff bool) {
	co := &s.co
	for {
		co.mu.Lock()
		for _, c := range done {
			if co.busy[c.ref]--; co.busy[c.ref] == 0 {
				delete(co.busy, c.ref)
			}
		}
		next := co.take()
		if len(next) == 0 {
			co.inFlight--
			co.mu.Unlock()
			return
		}
		co.mu.Unlock()
		if handOff {
			go func() {
				s.runBatch(next)
				s.sendNext(next, false)
			}()
			return
		}
		s.runBatch(next)
		done = next
	}
}

// take removes from the queue and returns, in arrival order, up to maxBatch
// calls whose bucket is not at the database, and marks their buckets busy.
// A call left in the queue holds back the later calls with its
// Idempotency-Key, so that a key is always decided by its first call. The
// caller holds co.mu.
func (co *coalescer) take() []*fillCall {
	var batch []*fillCall
	var blocked map[[2]string]bool
	rest := co.queue[:0]
	for i, c := range co.queue {
		k := [2]string{c.idem.Scope, c.idem.Key}
		if len(batch) == maxBatch {
			rest = append(rest, co.queue[i:]...)
			break
		}
		if co.busy[c.ref] > 0 || c.idem.Key != "" && blocked[k] {
			if c.idem.Key != "" {
				if blocked == nil {
					blocked = map[[2]string]bool{}
				}
				blocked[k] = true
			}
			rest = append(rest, c)
			continue
		}
		batch = append(batch, c)
	}
	clear(co.queue[len(rest):])
	co.queue = rest
	if len(co.queue) == 0 {
		co.queue = nil // let the backing array go
	}
	for _, c := range batch {
		co.busy[c.ref]++
	}
	return batch
}

// batchRow is one row of budgetd_fillup_batch(es): an answer in columns, an
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
	seen                  bool
}

// runBatch decides batch in arrival order and answers each call. The calls
// of different buckets interact only through their Idempotency-Keys (a key
// is decided by its first call; a later call with it replays or is refused),
// while one database call decides bucket after bucket in lock order, not in
// arrival order. So a batch is cut before a call whose key an earlier call of
// another bucket in it carries, and the parts go one after another.
func (s *Store) runBatch(batch []*fillCall) {
	for len(batch) > 0 {
		n := len(batch)
		var seen map[[2]string]ledger.BucketRef
		for i, c := range batch {
			if c.idem.Key == "" {
				continue
			}
			k := [2]string{c.idem.Scope, c.idem.Key}
			if ref, ok := seen[k]; ok && ref != c.ref {
				n = i
				break
			}
			if seen == nil {
				seen = map[[2]string]ledger.BucketRef{}
			}
			seen[k] = c.ref
		}
		s.runPart(batch[:n])
		batch = batch[n:]
	}
}

// runPart decides batch, skipping calls whose caller has given up, and
// answers each call. The calls of one bucket go as one budgetd_fillup_batch
// call, of several buckets as one budgetd_fillup_batches call. A failed
// batch fails every call in it: it is one statement, so none of it was
// charged (or, when the connection broke after sending it, the outcome is
// unknown to all of them alike).
func (s *Store) runPart(batch []*fillCall) {
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
	oneBucket := true
	limits := make([]string, len(live))
	keys := make([]string, len(live))
	costs := make([]string, len(live))
	scopes := make([]*string, len(live))
	idems := make([]*string, len(live))
	hashes := make([]*string, len(live))
	for i, c := range live {
		limits[i], keys[i], costs[i] = c.ref.Limit, c.ref.Key, c.cost
		oneBucket = oneBucket && c.ref == live[0].ref
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
	got := make([]batchRow, len(live))
	err := s.do(ctx, "fillup", func(ctx context.Context) error {
		var rows pgx.Rows
		var err error
		if oneBucket {
			rows, err = s.pool.Query(ctx, "SELECT 0, * FROM budgetd_fillup_batch($1, $2, $3, $4, $5, $6, $7) WITH ORDINALITY",
				live[0].ref.Limit, live[0].ref.Key, costs, s.nowArg(), scopes, idems, hashes)
		} else {
			rows, err = s.pool.Query(ctx, "SELECT * FROM budgetd_fillup_batches($1, $2, $3, $4, $5, $6, $7)",
				limits, keys, costs, s.nowArg(), scopes, idems, hashes)
		}
		if err != nil {
			return err
		}
		clear(got)
		seen := 0
		var r batchRow
		var item, ord int64
		dst := []any{&item, &r.fits, &r.level, &r.updatedUS, &r.amounts, &r.expires, &r.nowUS,
			&r.capacity, &r.leakAmount, &r.leakPerUS, &r.history, &r.createdUS, &r.limUpdated, &r.doc, &r.errCode, &r.errMsg}
		if oneBucket {
			dst = append(dst, &ord)
		}
		_, err = pgx.ForEachRow(rows, dst, func() error {
			if oneBucket {
				item = ord
			}
			if item < 1 || int(item) > len(got) || got[item-1].seen {
				return fmt.Errorf("answer row for call %d of %d: %w", item, len(got), ledger.ErrUnavailable)
			}
			r.seen = true
			got[item-1] = r
			seen++
			r = batchRow{} // nothing of the next row may land in this one's pointers
			return nil
		})
		if err == nil && seen != len(got) {
			err = fmt.Errorf("%d answers for %d calls: %w", seen, len(got), ledger.ErrUnavailable)
		}
		return err
	})
	for i, c := range live {
		if err != nil {
			c.err = err
		} else {
			c.out, c.err = s.decodeBatchRow(ctx, c.ref.Limit, &got[i])
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

package postgres

import (
	"context"
	"encoding/json"
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
// many callers (see migrations/functions/budgetd_fillup.sql). A call queues when a
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
	ctx      context.Context
	deadline time.Time // the store's timeout from the call on; zero: from the batch on
	ref      ledger.BucketRef
	cost     string
	idem     ledger.Idempotency
	meta     string // the charge's meta as JSON, "" for none
	done     chan struct{}
	out      ledger.FillupOutcome
	err      error
}

func newFillCall(ctx context.Context, ref ledger.BucketRef, cost decimal.Decimal, idem ledger.Idempotency) *fillCall {
	return &fillCall{ctx: ctx, ref: ref, cost: cost.String(), idem: idem, done: make(chan struct{})}
}

// fillupSingle charges one bucket: through the queue when coalescing is on,
// otherwise as a batch of one. The store's timeout counts from here: the
// time the call waits in the queue is part of it, so a call queued behind a
// batch gets no second full timeout.
func (s *Store) fillupSingle(ctx context.Context, it ledger.Charge, idem ledger.Idempotency) (ledger.FillupOutcome, error) {
	c := newFillCall(ctx, it.Bucket, it.Cost, idem)
	c.meta = it.Meta.JSON()
	c.deadline = time.Now().Add(s.cfg.timeout)
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
	t := time.NewTimer(time.Until(c.deadline))
	defer t.Stop()
	select {
	case <-c.done:
		return c.out, c.err
	case <-ctx.Done():
		// The batch may still charge it: the outcome is unknown, as for a
		// direct call cancelled while its statement runs.
		return ledger.FillupOutcome{}, fmt.Errorf("postgres fillup: %w", ctx.Err())
	case <-t.C:
		s.stats.unavailable.Add(1)
		return ledger.FillupOutcome{}, fmt.Errorf("postgres fillup: no answer within %s (queued behind other calls; the outcome is unknown, retry with the same Idempotency-Key): %w",
			s.cfg.timeout, ledger.ErrUnavailable)
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

// batchRow is one row of budgetd_fillup: an answer in columns, an outcome
// document (doc: an idempotent replay, or a multi-bucket call's answer) or a
// refusal of that one call (errCode). Rows are scanned by column name.
type batchRow struct {
	Item       int32    `db:"r_item"`
	Fits       *bool    `db:"r_fits"`
	Level      *string  `db:"r_level"`
	UpdatedUS  *int64   `db:"r_updated_us"`
	Amounts    []string `db:"r_hold_amounts"`
	Expires    []int64  `db:"r_hold_expires"`
	NowUS      *int64   `db:"r_now_us"`
	Capacity   *string  `db:"r_capacity"`
	LeakAmount *string  `db:"r_leak_amount"`
	LeakPerUS  *int64   `db:"r_leak_per_us"`
	Period     []byte   `db:"r_period"` // JSON (periodDoc); NULL for a leaky limit
	History    *bool    `db:"r_history"`
	CreatedUS  *int64   `db:"r_created_us"`
	LimUpdated *int64   `db:"r_limit_updated_us"`
	Doc        []byte   `db:"r_doc"`
	ErrCode    *string  `db:"r_err_code"`
	ErrMsg     *string  `db:"r_err_msg"`
}

// fillupSQL is the one statement of every Fillup.
const fillupSQL = "SELECT * FROM budgetd_fillup($1, $2, $3, $4, $5, $6, $7, $8, $9)"

// queryFillup runs budgetd_fillup once and returns its rows in item order,
// one per item (allOrNone: one for the call).
func (s *Store) queryFillup(ctx context.Context, deadline time.Time, limits, keys, costs []string, scopes, idems, hashes, metas []*string, allOrNone bool) ([]batchRow, error) {
	want := len(costs)
	if allOrNone {
		want = 1
	}
	var got []batchRow
	if deadline.IsZero() {
		deadline = time.Now().Add(s.cfg.timeout)
	}
	err := s.doUntil(ctx, deadline, "fillup", func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, fillupSQL, limits, keys, costs, s.nowArg(), scopes, idems, hashes, allOrNone, metas)
		if err != nil {
			return err
		}
		got, err = pgx.CollectRows(rows, pgx.RowToStructByName[batchRow])
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]batchRow, want)
	seen := make([]bool, want)
	for _, r := range got {
		i := int(r.Item) - 1
		if i < 0 || i >= want || seen[i] {
			return nil, fmt.Errorf("postgres fillup: answer row for call %d of %d: %w", r.Item, want, ledger.ErrUnavailable)
		}
		seen[i] = true
		out[i] = r
	}
	if len(got) != want {
		return nil, fmt.Errorf("postgres fillup: %d answers for %d calls: %w", len(got), want, ledger.ErrUnavailable)
	}
	return out, nil
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

// runPart decides batch, skipping calls whose caller has given up or whose
// deadline has passed, and answers each call. The batch is one
// budgetd_fillup call, whatever its buckets. A failed
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
		if !c.deadline.IsZero() && !time.Now().Before(c.deadline) {
			c.err = fmt.Errorf("postgres fillup: no answer within %s: %w", s.cfg.timeout, ledger.ErrUnavailable)
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
	limits := make([]string, len(live))
	keys := make([]string, len(live))
	costs := make([]string, len(live))
	scopes := make([]*string, len(live))
	idems := make([]*string, len(live))
	hashes := make([]*string, len(live))
	metas := make([]*string, len(live))
	for i, c := range live {
		limits[i], keys[i], costs[i] = c.ref.Limit, c.ref.Key, c.cost
		if c.idem.Key != "" {
			scopes[i], idems[i], hashes[i] = &c.idem.Scope, &c.idem.Key, &c.idem.Hash
		}
		if c.meta != "" {
			metas[i] = &c.meta
		}
	}
	// A batch of one is bounded by its caller's context; a larger one serves
	// many callers, so no one caller's cancellation stops it: it runs until
	// the latest deadline of its callers (each caller's deadline started when
	// it called, so the time it queued counts).
	ctx, deadline := live[0].ctx, live[0].deadline
	if len(live) > 1 {
		ctx, deadline = context.WithoutCancel(ctx), latestDeadline(live)
	}
	got, err := s.queryFillup(ctx, deadline, limits, keys, costs, scopes, idems, hashes, metas, false)
	for i, c := range live {
		if err != nil {
			c.err = err
		} else {
			c.out, c.err = s.decodeBatchRow(ctx, c.ref.Limit, &got[i])
		}
		close(c.done)
	}
}

// latestDeadline is the latest deadline of the calls (fillupSingle gives
// each one), or zero when one has none.
func latestDeadline(calls []*fillCall) time.Time {
	var last time.Time
	for _, c := range calls {
		if c.deadline.IsZero() {
			return time.Time{}
		}
		if c.deadline.After(last) {
			last = c.deadline
		}
	}
	return last
}

// decodeBatchRow turns one row of budgetd_fillup_batch into a call's answer.
func (s *Store) decodeBatchRow(ctx context.Context, limit string, r *batchRow) (ledger.FillupOutcome, error) {
	switch {
	case r.ErrCode != nil:
		msg := ""
		if r.ErrMsg != nil {
			msg = *r.ErrMsg
		}
		return ledger.FillupOutcome{}, s.fail(ctx, "fillup", &pgconn.PgError{Severity: "ERROR", Code: *r.ErrCode, Message: msg})
	case r.Doc != nil:
		return decodeFillup(r.Doc)
	}
	leaky := r.LeakAmount != nil && r.LeakPerUS != nil
	if r.Fits == nil || r.Level == nil || r.NowUS == nil || r.Capacity == nil || leaky == (r.Period != nil) ||
		r.History == nil || r.CreatedUS == nil || r.LimUpdated == nil || len(r.Amounts) != len(r.Expires) {
		return ledger.FillupOutcome{}, fmt.Errorf("postgres fillup: incomplete answer row: %w", ledger.ErrUnavailable)
	}
	level, ok := bucket.ParseAmount(*r.Level)
	capacity, err2 := decimal.NewFromString(*r.Capacity)
	if !ok || err2 != nil {
		return ledger.FillupOutcome{}, fmt.Errorf("postgres fillup: decoding %q %q: %w", *r.Level, *r.Capacity, ledger.ErrUnavailable)
	}
	lim := ledger.Limit{Name: limit, Capacity: capacity, History: *r.History, CreatedAt: fromUS(*r.CreatedUS), UpdatedAt: fromUS(*r.LimUpdated)}
	if leaky {
		leak, err := decimal.NewFromString(*r.LeakAmount)
		if err != nil {
			return ledger.FillupOutcome{}, fmt.Errorf("postgres fillup: decoding %q: %w", *r.LeakAmount, ledger.ErrUnavailable)
		}
		lim.LeakAmount, lim.LeakPer = leak, time.Duration(*r.LeakPerUS)*time.Microsecond
	} else {
		var pd periodDoc
		if err := json.Unmarshal(r.Period, &pd); err != nil {
			return ledger.FillupOutcome{}, fmt.Errorf("postgres fillup: decoding period %s: %w", r.Period, ledger.ErrUnavailable)
		}
		lim.Period = pd.period()
	}
	var st bucket.State // never written: the zero State, as stateDoc.state
	if r.UpdatedUS != nil || !level.IsZero() || len(r.Amounts) > 0 {
		st = bucket.State{Level: level, Holds: make([]bucket.Hold, len(r.Amounts))}
		if r.UpdatedUS != nil {
			st.Updated = fromUS(*r.UpdatedUS)
		}
		for i, a := range r.Amounts {
			amount, ok := bucket.ParseAmount(a)
			if !ok {
				return ledger.FillupOutcome{}, fmt.Errorf("postgres fillup: decoding hold %q: %w", a, ledger.ErrUnavailable)
			}
			st.Holds[i] = bucket.Hold{Amount: amount, ExpiresAt: fromUS(r.Expires[i])}
		}
	}
	snap := ledger.Snapshot{
		Limit: lim,
		State: st,
		Now:   fromUS(*r.NowUS),
	}
	return ledger.FillupOutcome{Accepted: *r.Fits, Items: []ledger.ItemOutcome{{Snapshot: snap}}}, nil
}

package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/groupcommit"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shopspring/decimal"
)

// maxBatch is the most Fillups one database call decides.
const maxBatch = 256

// Single-bucket Fillups go through a group-commit batcher
// (internal/groupcommit) that sends what queued as one database call: one
// round trip, one transaction and one commit flush for many callers (see
// migrations/functions/budgetd_fillup.sql). It has a few batches at the
// database at once (WithBatchSlots, DefaultBatchSlots, never more than the
// pool's connections), as MySQL's group commit has (groupSlots), so that the
// calls that arrive meanwhile queue and go together, whatever their buckets:
// with as many batches as a large pool's connections, 64 callers on 64
// buckets would mostly go alone, each paying a statement, a commit and a
// round trip (issue 44). A call that finds a slot free and its bucket idle
// goes at once, as a batch of one, so coalescing adds no round trip and no
// wait of its own. Whoever's batch returns sends the next one.
//
// fillRule is this store's own part: which queued calls may go. A call
// whose bucket is at the database waits (it would wait for that row's lock
// anyway: a hot bucket); the others go in arrival order, the calls of one
// bucket decided one after another under one lock of its row. A call left
// in the queue holds back the later calls with its Idempotency-Key, so that
// a key is always decided by its first call. The batcher calls it under its
// lock.
type fillRule struct {
	busy map[ledger.BucketRef]int // calls of a bucket at the database, or admitted to go
	// In this pass: the buckets of calls admitted (their later calls join
	// them), and the Idempotency-Keys of calls left queued.
	admitted map[ledger.BucketRef]bool
	blocked  map[[2]string]bool
}

func newFillRule() *fillRule {
	return &fillRule{busy: map[ledger.BucketRef]int{}, admitted: map[ledger.BucketRef]bool{}, blocked: map[[2]string]bool{}}
}

// Pass begins a choice of calls: none admitted or left queued yet.
func (r *fillRule) Pass() {
	clear(r.admitted)
	clear(r.blocked)
}

// Admit lets c go unless its bucket was at the database when the pass began
// or an earlier call left queued carries its Idempotency-Key. A call it lets
// go counts as at the database until Returned.
func (r *fillRule) Admit(c *fillCall) bool {
	k := [2]string{c.idem.Scope, c.idem.Key}
	if r.busy[c.ref] > 0 && !r.admitted[c.ref] || c.idem.Key != "" && r.blocked[k] {
		if c.idem.Key != "" {
			r.blocked[k] = true
		}
		return false
	}
	r.busy[c.ref]++
	r.admitted[c.ref] = true
	return true
}

// Returned: c's batch is back from the database.
func (r *fillRule) Returned(c *fillCall) {
	if r.busy[c.ref]--; r.busy[c.ref] == 0 {
		delete(r.busy, c.ref)
	}
}

// fillCall is one single-bucket Fillup and, once its batch has run, its
// answer.
type fillCall struct {
	ctx      context.Context
	deadline time.Time // the store's timeout from the call on; zero: from the batch on
	ref      ledger.BucketRef
	cost     string
	idem     ledger.Idempotency
	meta     string // the charge's meta as JSON, "" for none
	out      ledger.FillupOutcome
	err      error
}

func newFillCall(ctx context.Context, ref ledger.BucketRef, cost decimal.Decimal, idem ledger.Idempotency) *fillCall {
	return &fillCall{ctx: ctx, ref: ref, cost: cost.String(), idem: idem}
}

// fillupSingle charges one bucket: through the batcher when coalescing is
// on, otherwise as a batch of one. The store's timeout counts from here: the
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
	switch err := s.co.Do(ctx, c.deadline, c); {
	case err == nil:
		return c.out, c.err
	case errors.Is(err, groupcommit.ErrDeadline):
		// Still queued (then never sent) or at the database.
		s.stats.unavailable.Add(1)
		return ledger.FillupOutcome{}, fmt.Errorf("postgres fillup: no answer within %s (queued behind other calls; the outcome is unknown, retry with the same Idempotency-Key): %w",
			s.cfg.timeout, ledger.ErrUnavailable)
	default:
		// The batch may still charge it: the outcome is unknown, as for a
		// direct call cancelled while its statement runs.
		return ledger.FillupOutcome{}, fmt.Errorf("postgres fillup: %w", err)
	}
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
	Period     []byte   `db:"r_period"` // JSON (periodDoc); NULL for a leaky or window limit
	WindowLen  *int64   `db:"r_window_length_us"`
	WindowPrec *int64   `db:"r_window_precision_us"`
	SlotIdx    []int64  `db:"r_slot_idx"` // a window bucket's slots, oldest first
	SlotSums   []string `db:"r_slot_sums"`
	History    *bool    `db:"r_history"`
	RecDenials *bool    `db:"r_record_denials"`
	Mode       *string  `db:"r_mode"`
	Grace      *string  `db:"r_grace"`
	Thresholds []string `db:"r_thresholds"`
	Override   *string  `db:"r_override"` // the pattern of the override that applied
	Grants     *string  `db:"r_grants"`   // the sum of the bucket's active grants, NULL for none
	Rollover   *string  `db:"r_rollover"` // the rollover the bucket receives, NULL for none
	EntryID    *string  `db:"r_entry_id"` // the fillup or denied entry the call wrote
	CreatedUS  *int64   `db:"r_created_us"`
	LimUpdated *int64   `db:"r_limit_updated_us"`
	Doc        []byte   `db:"r_doc"`
	ErrCode    *string  `db:"r_err_code"`
	ErrMsg     *string  `db:"r_err_msg"`
}

// fillupSQL is the one statement of every Fillup.
const fillupSQL = "SELECT * FROM budgetd_fillup($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"

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
		// The terms are resolved again at every attempt: a retry after
		// stale_terms or settle (terms.go) takes the limit as read since.
		terms, err := s.termsArgs(ctx, limits, keys)
		if err != nil {
			return err
		}
		rows, err := s.pool.Query(ctx, fillupSQL, limits, keys, costs, s.nowArg(), scopes, idems, hashes, allOrNone, metas, terms)
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
			return nil, fmt.Errorf("postgres fillup: answer row for call %d of %d: %w", r.Item, want, errBadAnswer)
		}
		seen[i] = true
		out[i] = r
		if r.NowUS != nil && i == 0 {
			s.sawNow(*r.NowUS)
		}
		if r.ErrCode != nil && *r.ErrCode == codeLimitNotFound && !allOrNone {
			s.terms.forgetDeleted(limits[i])
		}
	}
	if len(got) != want {
		return nil, fmt.Errorf("postgres fillup: %d answers for %d calls: %w", len(got), want, errBadAnswer)
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
			continue
		}
		if !c.deadline.IsZero() && !time.Now().Before(c.deadline) {
			c.err = fmt.Errorf("postgres fillup: no answer within %s: %w", s.cfg.timeout, ledger.ErrUnavailable)
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
	if s.setEligible(ctx, live) {
		err := s.runSet(ctx, deadline, live)
		if !errors.Is(err, errSetFallback) {
			if err != nil {
				for _, c := range live {
					c.err = err
				}
			}
			return
		}
		s.stats.setFallbacks.Add(1)
	}
	got, err := s.queryFillup(ctx, deadline, limits, keys, costs, scopes, idems, hashes, metas, false)
	for i, c := range live {
		if err != nil {
			c.err = err
		} else {
			c.out, c.err = s.decodeBatchRow(ctx, c.ref.Limit, &got[i])
		}
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
	lim, st, err := r.decode(limit)
	if err != nil {
		return ledger.FillupOutcome{}, err
	}
	snap := ledger.Snapshot{
		Limit: lim,
		State: st,
		Now:   fromUS(*r.NowUS),
	}
	var entry string
	if r.EntryID != nil {
		entry = *r.EntryID
	}
	return ledger.FillupOutcome{Accepted: *r.Fits, Items: []ledger.ItemOutcome{{Snapshot: snap, EntryID: entry}}}, nil
}

// decode returns the limit (named limit) and the bucket's state of a row of
// budgetd_fillup_batch that answers a call, or errBadAnswer.
func (r *batchRow) decode(limit string) (ledger.Limit, bucket.State, error) {
	lim, level, err := r.limit(limit)
	if err != nil {
		return ledger.Limit{}, bucket.State{}, err
	}
	st, err := r.state(level)
	return lim, st, err
}

// limit returns the limit of r, named limit, and the bucket's level.
func (r *batchRow) limit(limit string) (ledger.Limit, bucket.Amount, error) {
	leaky := r.LeakAmount != nil && r.LeakPerUS != nil
	window := r.WindowLen != nil && r.WindowPrec != nil
	kinds := 0
	for _, k := range []bool{leaky, r.Period != nil, window} {
		if k {
			kinds++
		}
	}
	if r.Fits == nil || r.Level == nil || r.NowUS == nil || r.Capacity == nil || kinds != 1 ||
		r.History == nil || r.RecDenials == nil || r.Mode == nil || r.Grace == nil || r.CreatedUS == nil || r.LimUpdated == nil || len(r.Amounts) != len(r.Expires) {
		return ledger.Limit{}, bucket.Amount{}, fmt.Errorf("postgres fillup: incomplete answer row: %w", errBadAnswer)
	}
	level, ok := bucket.ParseAmount(*r.Level)
	capacity, err2 := decimal.NewFromString(*r.Capacity)
	grace, err3 := decimal.NewFromString(*r.Grace)
	if !ok || err2 != nil || err3 != nil {
		return ledger.Limit{}, bucket.Amount{}, fmt.Errorf("postgres fillup: decoding %q %q %q: %w", *r.Level, *r.Capacity, *r.Grace, errBadAnswer)
	}
	lim := ledger.Limit{Name: limit, Capacity: capacity, History: *r.History, RecordDenials: *r.RecDenials, CreatedAt: fromUS(*r.CreatedUS), UpdatedAt: fromUS(*r.LimUpdated)}
	lim.Mode, lim.Grace = storedMode(*r.Mode, grace)
	lim.Thresholds = storedThresholds(r.Thresholds)
	if r.Override != nil {
		lim.Override = *r.Override
	}
	if r.Grants != nil {
		// r.Capacity has them already: only the sum is recorded.
		sum, err := decimal.NewFromString(*r.Grants)
		if err != nil {
			return ledger.Limit{}, bucket.Amount{}, fmt.Errorf("postgres fillup: decoding grants %q: %w", *r.Grants, errBadAnswer)
		}
		lim.Grants = sum
	}
	if r.Rollover != nil {
		// r.Capacity has it already: only what was received is recorded.
		received, err := decimal.NewFromString(*r.Rollover)
		if err != nil {
			return ledger.Limit{}, bucket.Amount{}, fmt.Errorf("postgres fillup: decoding rollover %q: %w", *r.Rollover, errBadAnswer)
		}
		lim.Received = received
	}
	switch {
	case leaky:
		leak, err := decimal.NewFromString(*r.LeakAmount)
		if err != nil {
			return ledger.Limit{}, bucket.Amount{}, fmt.Errorf("postgres fillup: decoding %q: %w", *r.LeakAmount, errBadAnswer)
		}
		lim.LeakAmount, lim.LeakPer = leak, time.Duration(*r.LeakPerUS)*time.Microsecond
	case window:
		lim.Window = (&windowDoc{LengthUS: *r.WindowLen, PrecisionUS: *r.WindowPrec}).window()
	default:
		var pd periodDoc
		if err := json.Unmarshal(r.Period, &pd); err != nil {
			return ledger.Limit{}, bucket.Amount{}, fmt.Errorf("postgres fillup: decoding period %s: %w", r.Period, errBadAnswer)
		}
		lim.Period = pd.period()
	}
	return lim, level, nil
}

// state returns the bucket's state of r at level.
func (r *batchRow) state(level bucket.Amount) (bucket.State, error) {
	slots, err := slotsOf(r.SlotIdx, r.SlotSums)
	if err != nil {
		return bucket.State{}, fmt.Errorf("postgres fillup: %w", err)
	}
	var st bucket.State // never written: the zero State, as stateDoc.state
	if r.UpdatedUS != nil || !level.IsZero() || len(r.Amounts) > 0 || len(slots) > 0 {
		st = bucket.State{Level: level, Holds: make([]bucket.Hold, len(r.Amounts)), Slots: slots}
		if r.UpdatedUS != nil {
			st.Updated = fromUS(*r.UpdatedUS)
		}
		for i, a := range r.Amounts {
			amount, ok := bucket.ParseAmount(a)
			if !ok {
				return bucket.State{}, fmt.Errorf("postgres fillup: decoding hold %q: %w", a, errBadAnswer)
			}
			st.Holds[i] = bucket.Hold{Amount: amount, ExpiresAt: fromUS(r.Expires[i])}
		}
	}
	return st, nil
}

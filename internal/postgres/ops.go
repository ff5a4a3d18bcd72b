package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
)

// The jsonb documents the server functions return. Amounts are decimal
// strings (exact), times are microseconds since the Unix epoch.

type limitDoc struct {
	Name       string          `json:"name"`
	Capacity   decimal.Decimal `json:"capacity"`
	LeakAmount decimal.Decimal `json:"leak_amount"`
	LeakPerUS  int64           `json:"leak_per_us"`
	Period     *periodDoc      `json:"period"`
	Window     *windowDoc      `json:"window"`
	History    bool            `json:"history"`
	// RecordDenials is present (true) only for a limit that records denials.
	RecordDenials bool `json:"record_denials"`
	// Mode and Grace are present only for a limit that is not in enforce
	// mode (and absent in documents older than modes): see storedMode.
	Mode  string          `json:"mode"`
	Grace decimal.Decimal `json:"grace"`
	// Thresholds are present only for a limit that has some.
	Thresholds []string `json:"thresholds"`
	CreatedUS  int64    `json:"created_us"`
	UpdatedUS  int64    `json:"updated_us"`
	// Override is present only for a limit with an override applied: its
	// pattern (budgetd_terms_limit).
	Override string `json:"override"`
	// Grants is present only for a limit with a bucket's active grants
	// added to its capacity: their sum (budgetd_bucket_terms).
	Grants decimal.Decimal `json:"grants"`
	// RolloverMax is present only for a limit with rollover, and Rollover
	// only for one with a bucket's rollover added to its capacity: what
	// the bucket receives (budgetd_with_rollover).
	RolloverMax *decimal.Decimal `json:"rollover_max"`
	Rollover    decimal.Decimal  `json:"rollover"`
}

func (d limitDoc) limit() ledger.Limit {
	mode, grace := storedMode(d.Mode, d.Grace)
	return ledger.Limit{
		Name:          d.Name,
		Capacity:      d.Capacity,
		LeakAmount:    d.LeakAmount,
		LeakPer:       time.Duration(d.LeakPerUS) * time.Microsecond,
		Period:        d.Period.period(),
		Window:        d.Window.window(),
		History:       d.History,
		RecordDenials: d.RecordDenials,
		Mode:          mode,
		Grace:         grace,
		Thresholds:    storedThresholds(d.Thresholds),
		CreatedAt:     fromUS(d.CreatedUS),
		UpdatedAt:     fromUS(d.UpdatedUS),
		Override:      d.Override,
		Grants:        d.Grants,
		Rollover:      rollover(d.RolloverMax),
		Received:      d.Rollover,
	}
}

// rollover is a limit's rollover from its stored max, nil for none.
func rollover(max *decimal.Decimal) *ledger.Rollover {
	if max == nil {
		return nil
	}
	return &ledger.Rollover{Max: *max}
}

// storedThresholds reads a limit's thresholds as the store keeps them: the
// strings Threshold.String wrote, which parse again (a string that does
// not, which the store never writes, is left out). None is nil.
func storedThresholds(ss []string) []ledger.Threshold {
	if len(ss) == 0 {
		return nil
	}
	out := make([]ledger.Threshold, 0, len(ss))
	for _, s := range ss {
		if t, err := ledger.ParseThreshold("thresholds", s); err == nil {
			out = append(out, t)
		}
	}
	return out
}

// thresholdArgs are a limit's thresholds as budgetd_put_limit takes them:
// their strings and their ledger.ThresholdSig as the signed integer of the
// same 32 bits.
func thresholdArgs(ts []ledger.Threshold) ([]string, int32) {
	ss := make([]string, len(ts))
	for i, t := range ts {
		ss[i] = t.String()
	}
	return ss, int32(ledger.ThresholdSig(ts))
}

// storedMode is a limit's mode and grace as the store read them, always
// one of the three modes: the column's check allows only those, and an
// empty mode (a document that leaves it out) is ledger.ModeEnforce. The
// grace counts only under ledger.ModeSoft.
func storedMode(mode string, grace decimal.Decimal) (string, decimal.Decimal) {
	switch mode {
	case ledger.ModeShadow:
		return mode, decimal.Decimal{}
	case ledger.ModeSoft:
		return mode, grace
	}
	return ledger.ModeEnforce, decimal.Decimal{}
}

// periodDoc is a periodic limit's rule as budgetd_period_json writes it.
type periodDoc struct {
	Every    string `json:"every"`
	TZ       string `json:"tz"`
	StartDay *int   `json:"start_day"`
}

func (d *periodDoc) period() *ledger.Period {
	if d == nil {
		return nil
	}
	p := &ledger.Period{Every: d.Every, TZ: d.TZ}
	if d.StartDay != nil {
		p.StartDay = *d.StartDay
	}
	return p
}

// windowDoc is a window limit's rule as budgetd_limit_json writes it.
type windowDoc struct {
	LengthUS    int64 `json:"length_us"`
	PrecisionUS int64 `json:"precision_us"`
}

func (d *windowDoc) window() *ledger.Window {
	if d == nil {
		return nil
	}
	return &ledger.Window{Length: time.Duration(d.LengthUS) * time.Microsecond, Precision: time.Duration(d.PrecisionUS) * time.Microsecond}
}

// stateDoc is a bucket as budgetd_state_json writes it; SlotIdx and
// SlotSums are a window bucket's slots, absent for a bucket without any.
type stateDoc struct {
	Level     decimal.Decimal `json:"level"`
	UpdatedUS *int64          `json:"updated_us"`
	Holds     []struct {
		Amount    decimal.Decimal `json:"amount"`
		ExpiresUS int64           `json:"expires_us"`
	} `json:"holds"`
	SlotIdx  []int64  `json:"slot_idx"`
	SlotSums []string `json:"slot_sums"`
}

func (d stateDoc) state() (bucket.State, error) {
	if d.UpdatedUS == nil && d.Level.IsZero() && len(d.Holds) == 0 && len(d.SlotIdx) == 0 {
		return bucket.State{}, nil // never written
	}
	st := bucket.State{Level: ledger.Amount(d.Level), Holds: make([]bucket.Hold, len(d.Holds))}
	if d.UpdatedUS != nil {
		st.Updated = fromUS(*d.UpdatedUS)
	}
	for i, h := range d.Holds {
		st.Holds[i] = bucket.Hold{Amount: ledger.Amount(h.Amount), ExpiresAt: fromUS(h.ExpiresUS)}
	}
	slots, err := slotsOf(d.SlotIdx, d.SlotSums)
	st.Slots = slots
	return st, err
}

// slotsOf pairs a window bucket's slot numbers with their sums (numeric
// text), as stored: oldest first; nil for none.
func slotsOf(idx []int64, sums []string) ([]bucket.Slot, error) {
	if len(idx) != len(sums) {
		return nil, fmt.Errorf("postgres: %d slot numbers with %d sums: %w", len(idx), len(sums), errBadAnswer)
	}
	if len(idx) == 0 {
		return nil, nil
	}
	out := make([]bucket.Slot, len(idx))
	for i, s := range sums {
		sum, ok := bucket.ParseAmount(s)
		if !ok {
			return nil, fmt.Errorf("postgres: slot sum %q: %w", s, errBadAnswer)
		}
		out[i] = bucket.Slot{Index: idx[i], Sum: sum}
	}
	return out, nil
}

// snapDoc is the part every bucket outcome shares.
type snapDoc struct {
	Limit limitDoc `json:"limit"`
	State stateDoc `json:"state"`
}

func (d snapDoc) snapshot(nowUS int64) (ledger.Snapshot, error) {
	st, err := d.State.state()
	return ledger.Snapshot{Limit: d.Limit.limit(), State: st, Now: fromUS(nowUS)}, err
}

type holdDoc struct {
	ID         string              `json:"id"`
	Limit      string              `json:"limit"`
	Key        string              `json:"key"`
	Amount     decimal.Decimal     `json:"amount"`
	State      string              `json:"state"`
	Committed  decimal.NullDecimal `json:"committed"`
	CreatedUS  int64               `json:"created_us"`
	ExpiresUS  int64               `json:"expires_us"`
	ResolvedUS *int64              `json:"resolved_us"`
}

func (d *holdDoc) reservation() ledger.Reservation {
	if d == nil {
		return ledger.Reservation{}
	}
	r := ledger.Reservation{
		ID:              d.ID,
		Bucket:          ledger.BucketRef{Limit: d.Limit, Key: d.Key},
		Amount:          d.Amount,
		State:           ledger.ReservationState(d.State),
		CommittedAmount: d.Committed,
		CreatedAt:       fromUS(d.CreatedUS),
		ExpiresAt:       fromUS(d.ExpiresUS),
	}
	if d.ResolvedUS != nil {
		r.ResolvedAt = fromUS(*d.ResolvedUS)
	}
	return r
}

func fromUS(us int64) time.Time { return time.UnixMicro(us).UTC() }

// metaArg is meta as its function parameter: JSON text, or NULL for none.
func metaArg(meta ledger.Meta) any {
	if m := meta.JSON(); m != "" {
		return m
	}
	return nil
}

// idemArgs are the three idempotency parameters of a write function; an
// empty key is NULL (no Idempotency-Key).
func idemArgs(idem ledger.Idempotency) (any, any, any) {
	if idem.Key == "" {
		return nil, nil, nil
	}
	return idem.Scope, idem.Key, idem.Hash
}

// Inspect returns a bucket's state, writing nothing but the settling at
// the end of a temporary rule change that any call on the bucket makes
// first (terms.go), which changes no answer.
func (s *Store) Inspect(ctx context.Context, ref ledger.BucketRef) (ledger.Snapshot, error) {
	var doc struct {
		snapDoc
		NowUS int64 `json:"now_us"`
	}
	if err := s.queryJSONTerms(ctx, "inspect", &doc, ref, "SELECT budgetd_inspect($1, $2, $3, $4)", func(terms *string) []any {
		return []any{ref.Limit, ref.Key, s.nowArg(), terms}
	}); err != nil {
		return ledger.Snapshot{}, err
	}
	snap, err := doc.snapshot(doc.NowUS)
	if err != nil {
		return ledger.Snapshot{}, fmt.Errorf("postgres inspect: %w", err)
	}
	return snap, nil
}

// Fillup charges every item or none, in one statement: budgetd_fillup. A
// single-bucket Fillup may be coalesced with others (coalesce.go).
func (s *Store) Fillup(ctx context.Context, items []ledger.Charge, idem ledger.Idempotency) (ledger.FillupOutcome, error) {
	if len(items) == 1 {
		return s.fillupSingle(ctx, items[0], idem)
	}
	return s.fillupAll(ctx, items, idem)
}

// fillupAll is a multi-bucket Fillup: budgetd_fillup with all_or_none.
func (s *Store) fillupAll(ctx context.Context, items []ledger.Charge, idem ledger.Idempotency) (ledger.FillupOutcome, error) {
	limits := make([]string, len(items))
	keys := make([]string, len(items))
	costs := make([]string, len(items))
	metas := make([]*string, len(items))
	for i, it := range items {
		limits[i], keys[i], costs[i] = it.Bucket.Limit, it.Bucket.Key, it.Cost.String()
		if m := it.Meta.JSON(); m != "" {
			metas[i] = &m
		}
	}
	var scope, key, hash *string
	if idem.Key != "" {
		scope, key, hash = &idem.Scope, &idem.Key, &idem.Hash
	}
	deadline := time.Now().Add(s.cfg.timeout)
	if s.cfg.isolation == string(Serializable) {
		refs := make([]ledger.BucketRef, len(items))
		for i, it := range items {
			refs[i] = it.Bucket
		}
		unlock, err := s.multiLocks.lock(ctx, deadline, refs)
		if err != nil {
			return ledger.FillupOutcome{}, s.fail(ctx, "fillup", err)
		}
		defer unlock()
	}
	rows, err := s.queryFillup(ctx, deadline, limits, keys, costs, []*string{scope}, []*string{key}, []*string{hash}, metas, true)
	if err != nil {
		return ledger.FillupOutcome{}, err
	}
	if rows[0].Doc == nil {
		return ledger.FillupOutcome{}, fmt.Errorf("postgres fillup: answer without a document: %w", errBadAnswer)
	}
	return decodeFillup(rows[0].Doc)
}

// decodeFillup reads a Fillup outcome document: a multi-bucket answer or a
// stored one replayed.
func decodeFillup(raw json.RawMessage) (ledger.FillupOutcome, error) {
	var doc struct {
		Accepted bool  `json:"accepted"`
		NowUS    int64 `json:"now_us"`
		Replayed bool  `json:"replayed"`
		Items    []struct {
			snapDoc
			EntryID string `json:"entry_id"` // null (absent in records older than entry ids): none
		} `json:"items"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return ledger.FillupOutcome{}, fmt.Errorf("postgres fillup: decoding %s: %w", raw, err)
	}
	out := ledger.FillupOutcome{Accepted: doc.Accepted, Replayed: doc.Replayed, Items: make([]ledger.ItemOutcome, len(doc.Items))}
	for i, it := range doc.Items {
		snap, err := it.snapshot(doc.NowUS)
		if err != nil {
			return ledger.FillupOutcome{}, fmt.Errorf("postgres fillup: %w", err)
		}
		out.Items[i] = ledger.ItemOutcome{Snapshot: snap, EntryID: it.EntryID}
	}
	return out, nil
}

// Drain lowers a bucket's level, clamped at zero.
func (s *Store) Drain(ctx context.Context, ref ledger.BucketRef, amount decimal.Decimal, idem ledger.Idempotency, meta ledger.Meta) (ledger.DrainOutcome, error) {
	scope, key, hash := idemArgs(idem)
	var doc struct {
		snapDoc
		Removed  decimal.Decimal `json:"removed"`
		NowUS    int64           `json:"now_us"`
		EntryID  string          `json:"entry_id"`
		Replayed bool            `json:"replayed"`
	}
	err := s.queryJSONTerms(ctx, "drain", &doc, ref, "SELECT budgetd_drain($1, $2, $3, $4, $5, $6, $7, $8, $9)", func(terms *string) []any {
		return []any{ref.Limit, ref.Key, amount.String(), s.nowArg(), scope, key, hash, metaArg(meta), terms}
	})
	if err != nil {
		return ledger.DrainOutcome{}, err
	}
	snap, err := doc.snapshot(doc.NowUS)
	if err != nil {
		return ledger.DrainOutcome{}, fmt.Errorf("postgres drain: %w", err)
	}
	return ledger.DrainOutcome{Removed: doc.Removed, Snapshot: snap, EntryID: doc.EntryID, Replayed: doc.Replayed}, nil
}

// Reserve adds a hold when it fits.
func (s *Store) Reserve(ctx context.Context, ref ledger.BucketRef, amount decimal.Decimal, ttl time.Duration, idem ledger.Idempotency, meta ledger.Meta) (ledger.ReserveOutcome, error) {
	scope, key, hash := idemArgs(idem)
	var doc struct {
		snapDoc
		Accepted    bool     `json:"accepted"`
		Reservation *holdDoc `json:"reservation"`
		NowUS       int64    `json:"now_us"`
		EntryID     string   `json:"entry_id"`
		Replayed    bool     `json:"replayed"`
	}
	id := newHoldID()
	err := s.queryJSONTerms(ctx, "reserve", &doc, ref, "SELECT budgetd_reserve($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)", func(terms *string) []any {
		return []any{ref.Limit, ref.Key, amount.String(), ttl.Microseconds(), id, s.nowArg(), scope, key, hash, metaArg(meta), terms}
	})
	if err != nil {
		return ledger.ReserveOutcome{}, err
	}
	if doc.Reservation != nil {
		s.holds.put(doc.Reservation.ID, ref)
	}
	snap, err := doc.snapshot(doc.NowUS)
	if err != nil {
		return ledger.ReserveOutcome{}, fmt.Errorf("postgres reserve: %w", err)
	}
	return ledger.ReserveOutcome{
		Accepted:    doc.Accepted,
		Reservation: doc.Reservation.reservation(),
		Snapshot:    snap,
		EntryID:     doc.EntryID,
		Replayed:    doc.Replayed,
	}, nil
}

// newHoldID returns a fresh hold id: "h" and 32 random hex digits.
func newHoldID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail
	return "h" + hex.EncodeToString(b[:])
}

// Commit ends a hold and charges amount (the held amount when null).
func (s *Store) Commit(ctx context.Context, id string, amount decimal.NullDecimal, overrun bool, idem ledger.Idempotency, meta ledger.Meta) (ledger.ResolveOutcome, error) {
	var a any
	if amount.Valid {
		a = amount.Decimal.String()
	}
	return s.resolve(ctx, "commit", id, true, a, overrun, idem, meta)
}

// Release ends a hold without charging.
func (s *Store) Release(ctx context.Context, id string, idem ledger.Idempotency, meta ledger.Meta) (ledger.ResolveOutcome, error) {
	return s.resolve(ctx, "release", id, false, nil, false, idem, meta)
}

func (s *Store) resolve(ctx context.Context, op, id string, commit bool, amount any, overrun bool, idem ledger.Idempotency, meta ledger.Meta) (ledger.ResolveOutcome, error) {
	if err := ledger.ValidateReservationID(id); err != nil {
		return ledger.ResolveOutcome{}, err
	}
	scope, key, hash := idemArgs(idem)
	var doc struct {
		snapDoc
		Reservation holdDoc `json:"reservation"`
		Refusal     string  `json:"refusal"`
		NowUS       int64   `json:"now_us"`
		Replayed    bool    `json:"replayed"`
	}
	// The terms of the hold's bucket are resolved again at every attempt,
	// as queryJSONTerms does, once the bucket is known.
	var raw []byte
	err := s.do(ctx, op, func(ctx context.Context) error {
		var terms *string
		ref, ok, err := s.holdRef(ctx, id)
		if err != nil {
			return err
		}
		if ok {
			args, err := s.termsArgs(ctx, []string{ref.Limit}, []string{ref.Key})
			if err != nil {
				return err
			}
			terms = args[0]
		}
		return s.pool.QueryRow(ctx, "SELECT budgetd_resolve($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
			id, commit, amount, overrun, s.nowArg(), scope, key, hash, metaArg(meta), terms).Scan(&raw)
	})
	if err != nil {
		return ledger.ResolveOutcome{}, err
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return ledger.ResolveOutcome{}, fmt.Errorf("postgres %s: decoding %s: %w", op, raw, err)
	}
	if doc.Reservation.State != string(ledger.Active) {
		s.holds.drop(id)
	}
	snap, err := doc.snapshot(doc.NowUS)
	if err != nil {
		return ledger.ResolveOutcome{}, fmt.Errorf("postgres %s: %w", op, err)
	}
	return ledger.ResolveOutcome{
		Reservation: doc.Reservation.reservation(),
		Snapshot:    snap,
		Refusal:     doc.Refusal,
		Replayed:    doc.Replayed,
	}, nil
}

// Reservation returns a hold as stored and the database clock.
func (s *Store) Reservation(ctx context.Context, id string) (ledger.Reservation, time.Time, error) {
	if err := ledger.ValidateReservationID(id); err != nil {
		return ledger.Reservation{}, time.Time{}, err
	}
	var doc struct {
		Reservation holdDoc `json:"reservation"`
		NowUS       int64   `json:"now_us"`
	}
	if err := s.queryJSON(ctx, "reservation", &doc, "SELECT budgetd_reservation($1, $2)", id, s.nowArg()); err != nil {
		return ledger.Reservation{}, time.Time{}, err
	}
	return doc.Reservation.reservation(), fromUS(doc.NowUS), nil
}

// History lists a bucket's entries newest first, recording due expiries.
// Cursors are "<time in µs>.<id>" of the last entry of the previous page.
func (s *Store) History(ctx context.Context, ref ledger.BucketRef, cursor string, n int) ([]ledger.Entry, string, error) {
	var afterUS, afterID any
	if cursor != "" {
		us, id, err := parseCursor(cursor)
		if err != nil {
			return nil, "", err
		}
		afterUS, afterID = us, id
	}
	n = min(max(n, 0), 1<<20) // p_n + 1 stays an int4
	var docs []struct {
		ID            string          `json:"id"`
		AtUS          int64           `json:"at_us"`
		Event         string          `json:"event"`
		Amount        decimal.Decimal `json:"amount"`
		ReservationID *string         `json:"reservation_id"`
		Meta          ledger.Meta     `json:"meta"`
		ShadowDenied  bool            `json:"shadow_denied"`
		GrantID       string          `json:"grant_id"`
	}
	err := s.queryJSON(ctx, "history", &docs, "SELECT budgetd_history($1, $2, $3, $4, $5, $6)",
		ref.Limit, ref.Key, afterUS, afterID, n, s.nowArg())
	if err != nil {
		return nil, "", err
	}
	out := make([]ledger.Entry, 0, min(len(docs), n))
	for _, d := range docs {
		if len(out) == n {
			if n == 0 {
				break
			}
			last := out[len(out)-1]
			return out, fmt.Sprintf("%d.%s", last.Time.UnixMicro(), last.ID), nil
		}
		e := ledger.Entry{ID: d.ID, Time: fromUS(d.AtUS), Event: ledger.Event(d.Event), Amount: d.Amount, Meta: d.Meta, ShadowDenied: d.ShadowDenied, GrantID: d.GrantID}
		if d.ReservationID != nil {
			e.ReservationID = *d.ReservationID
		}
		out = append(out, e)
	}
	return out, "", nil
}

// The range of cursor times: 0001-01-01 to 9999-12-31, in µs since 1970.
const (
	minCursorUS = -62135596800000000
	maxCursorUS = 253402300799999999
)

func parseCursor(c string) (int64, int64, error) {
	bad := &ledger.InvalidError{Code: ledger.CodeInvalidRequest, Field: "cursor", Reason: "malformed cursor"}
	t, id, ok := strings.Cut(c, ".")
	if !ok {
		return 0, 0, bad
	}
	us, err1 := strconv.ParseInt(t, 10, 64)
	n, err2 := strconv.ParseInt(id, 10, 64)
	// Times that PostgreSQL cannot hold as timestamptz would fail the
	// statement: only years 1 to 9999 can name an entry.
	if err1 != nil || err2 != nil || us < minCursorUS || us > maxCursorUS {
		return 0, 0, bad
	}
	return us, n, nil
}

// Events lists up to n threshold events after cursor (a position, decimal
// text; "" for the oldest kept), sealing first the events that committed
// writes emitted (budgetd_events). It runs at READ COMMITTED whatever the
// store's isolation level: the seal must see every write committed before
// it, and writes never read the outbox.
func (s *Store) Events(ctx context.Context, cursor string, n int) ([]ledger.OutboxEvent, string, error) {
	var after int64
	if cursor != "" {
		var err error
		if after, err = strconv.ParseInt(cursor, 10, 64); err != nil || after < 0 {
			return nil, "", &ledger.InvalidError{Code: ledger.CodeInvalidRequest, Field: "after", Reason: "is not a cursor this store gave"}
		}
	}
	var out []ledger.OutboxEvent
	next := cursor
	err := s.do(ctx, "events", func(ctx context.Context) error {
		out, next = out[:0], cursor
		return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, "SELECT * FROM budgetd_events($1, $2)", after, n)
			if err != nil {
				return err
			}
			if out, err = scanEvents(rows, out); len(out) > 0 {
				next = out[len(out)-1].ID
			}
			return err
		})
	})
	if err != nil {
		return nil, "", err
	}
	return out, next, nil
}

// BucketEvents lists the bucket's events kept, newest first, once the
// events visible now are sealed (budgetd_bucket_events).
func (s *Store) BucketEvents(ctx context.Context, ref ledger.BucketRef, n int) ([]ledger.OutboxEvent, error) {
	var out []ledger.OutboxEvent
	err := s.do(ctx, "bucket_events", func(ctx context.Context) error {
		return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, "SELECT * FROM budgetd_bucket_events($1, $2, $3)", ref.Limit, ref.Key, n)
			if err != nil {
				return err
			}
			out, err = scanEvents(rows, out[:0])
			return err
		})
	})
	return out, err
}

// scanEvents appends the events of rows (the columns of budgetd_events) to
// out, and closes rows.
func scanEvents(rows pgx.Rows, out []ledger.OutboxEvent) ([]ledger.OutboxEvent, error) {
	defer rows.Close()
	for rows.Next() {
		var (
			pos            int64
			ev             ledger.OutboxEvent
			used, capacity string
			periodStart    *time.Time
		)
		if err := rows.Scan(&pos, &ev.Time, &ev.Bucket.Limit, &ev.Bucket.Key, &ev.Type, &ev.Threshold, &used, &capacity, &periodStart); err != nil {
			return out, err
		}
		var p numParser
		ev.Used, ev.Capacity = p.num(used), p.num(capacity)
		if p.err != nil {
			return out, fmt.Errorf("decoding event %d: %w", pos, p.err)
		}
		ev.ID = strconv.FormatInt(pos, 10)
		ev.Time = ev.Time.UTC()
		if periodStart != nil {
			ev.PeriodStart = periodStart.UTC()
		}
		out = append(out, ev)
	}
	return out, rows.Err()
}

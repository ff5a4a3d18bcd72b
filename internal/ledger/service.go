package ledger

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/shopspring/decimal"
)

// Service is what the API calls: it validates input, calls the store once
// per operation and derives every decision from what the store saw, with the
// pure rule of package bucket.
type Service struct {
	store      Store
	defaultTTL time.Duration
	maxTTL     time.Duration
	onWrite    func() // WithWriteHook
	tracer     Tracer // WithTracer
}

// Option configures a Service.
type Option func(*Service)

// WithMaxTTL sets the longest hold a caller may ask for (default 24h).
func WithMaxTTL(d time.Duration) Option { return func(s *Service) { s.maxTTL = d } }

// MinTTL is the shortest hold; DefaultTTL applies when a Reserve names none.
const (
	MinTTL     = time.Second
	DefaultTTL = 5 * time.Minute
)

// NewService returns a Service over store.
func NewService(store Store, opts ...Option) *Service {
	s := &Service{store: store, defaultTTL: DefaultTTL, maxTTL: 24 * time.Hour}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Ping reports whether the store answers.
func (s *Service) Ping(ctx context.Context) error { return s.store.Ping(ctx) }

// LimitSpec is a limit as a caller writes it: a leak rate (LeakAmount per
// LeakPer), a Period or a Window, exactly one of the three. A Window's zero
// Precision takes the default (DefaultPrecision).
type LimitSpec struct {
	Capacity   decimal.Decimal
	LeakAmount decimal.Decimal
	LeakPer    time.Duration
	Period     *Period
	Window     *Window
	History    bool
	// RecordDenials: denials write a denied history entry.
	RecordDenials bool
	// Mode is ModeEnforce (also when empty), ModeShadow or ModeSoft; Grace
	// (a percentage, 0 to 100 with at most 2 decimals) only with ModeSoft.
	Mode  string
	Grace decimal.Decimal
	// Thresholds emit events when a write reaches or leaves them.
	Thresholds []Threshold
	// Rollover (periodic limits only) carries unused capacity into the
	// next period, at most its Max; nil for none.
	Rollover *Rollover
}

// PutLimit creates or updates the limit name (CheckLimit says what is
// refused).
func (s *Service) PutLimit(ctx context.Context, name string, spec LimitSpec) (Limit, error) {
	l, err := CheckLimit(name, spec)
	if err != nil {
		return Limit{}, err
	}
	if l.Rollover != nil {
		if err := s.servesRollover(); err != nil {
			return Limit{}, err
		}
	}
	return s.store.PutLimit(ctx, l)
}

// CheckLimit returns the limit that a PUT of spec as name stores, with
// the defaults filled in (mode enforce, a period's zone and start day, a
// window's precision), or the *InvalidError that refuses it, naming the
// field: a malformed name, a capacity or leak out of range, not exactly one
// of leak, period and window, a bad mode, grace, threshold or rollover.
// It writes nothing.
func CheckLimit(name string, spec LimitSpec) (Limit, error) {
	if err := ValidateName(name); err != nil {
		return Limit{}, err
	}
	if err := checkAmount("capacity", spec.Capacity, true); err != nil {
		return Limit{}, err
	}
	l := Limit{Name: name, Capacity: spec.Capacity, History: spec.History, RecordDenials: spec.RecordDenials}
	if err := validateMode(spec.Mode, spec.Grace); err != nil {
		return Limit{}, err
	}
	l.Mode, l.Grace = cmp.Or(spec.Mode, ModeEnforce), spec.Grace
	if err := ValidateThresholds(spec.Thresholds); err != nil {
		return Limit{}, err
	}
	l.Thresholds = spec.Thresholds
	if err := validateRollover(spec.Rollover, spec.Period != nil && spec.Window == nil); err != nil {
		return Limit{}, err
	}
	if spec.Rollover != nil {
		r := *spec.Rollover
		l.Rollover = &r
	}
	if spec.Window != nil {
		if spec.Period != nil {
			return Limit{}, invalid(CodeInvalidRequest, "window", "a limit has one of leak, period or window, not several")
		}
		if !spec.LeakAmount.IsZero() || spec.LeakPer != 0 {
			return Limit{}, invalid(CodeInvalidRequest, "window", "a limit has one of leak, period or window, not several")
		}
		w, err := ValidateWindow(spec.Window.Length, spec.Window.Precision)
		if err != nil {
			return Limit{}, err
		}
		l.Window = &w
		return l, nil
	}
	if spec.Period != nil {
		if !spec.LeakAmount.IsZero() || spec.LeakPer != 0 {
			return Limit{}, invalid(CodeInvalidRequest, "leak", "a limit has either leak or period, not both")
		}
		// Zero values take the defaults (UTC, the first day of the period).
		tz, sd := &spec.Period.TZ, &spec.Period.StartDay
		if *tz == "" {
			tz = nil
		}
		if *sd == 0 {
			sd = nil
		}
		p, err := ValidatePeriod(spec.Period.Every, tz, sd)
		if err != nil {
			return Limit{}, err
		}
		l.Period = &p
		return l, nil
	}
	if err := checkAmount("leak.amount", spec.LeakAmount, true); err != nil {
		return Limit{}, err
	}
	if spec.LeakPer < time.Microsecond || spec.LeakPer > MaxPer || spec.LeakPer%time.Microsecond != 0 {
		return Limit{}, invalid(CodeInvalidDuration, "leak.per", "must be a whole number of microseconds between 1µs and %s", MaxPer)
	}
	l.LeakAmount, l.LeakPer = spec.LeakAmount, spec.LeakPer
	return l, nil
}

// Events lists up to n events after cursor and the cursor to continue
// from (Store.Events).
func (s *Service) Events(ctx context.Context, cursor string, n int) ([]OutboxEvent, string, error) {
	return s.store.Events(ctx, cursor, n)
}

// GetLimit returns the limit name.
func (s *Service) GetLimit(ctx context.Context, name string) (Limit, error) {
	if err := ValidateName(name); err != nil {
		return Limit{}, ErrLimitNotFound
	}
	return s.store.GetLimit(ctx, name)
}

// MaxPage is the longest page of a list.
const MaxPage = 1000

// ListLimits returns up to n limits with names after cursor.
func (s *Service) ListLimits(ctx context.Context, after string, n int) ([]Limit, error) {
	if n < 1 || n > MaxPage+1 {
		return nil, invalid(CodeInvalidRequest, "limit", "must be a whole number from 1 to %d", MaxPage)
	}
	return s.store.ListLimits(ctx, after, n)
}

// DeleteLimit removes the limit name with all its buckets.
func (s *Service) DeleteLimit(ctx context.Context, name string) error {
	if err := ValidateName(name); err != nil {
		return ErrLimitNotFound
	}
	return s.store.DeleteLimit(ctx, name)
}

// BucketState is a bucket as GET …/buckets/{key} shows it without a cost.
type BucketState struct {
	Level     bucket.Amount
	Held      bucket.Amount
	Remaining bucket.Amount
	Capacity  bucket.Amount
	UpdatedAt time.Time // zero for a bucket never written
	// PeriodStart and ResetsAt bound the current period of a periodic
	// limit; zero for a leaky one.
	PeriodStart time.Time
	ResetsAt    time.Time
	// Override is the pattern of the override that applied, "" for none.
	Override string
	// Grants is the sum of the active grants in Capacity.
	Grants decimal.Decimal
	// Rollover is the rollover received in the current period, in
	// Capacity.
	Rollover decimal.Decimal
}

// StateOf derives a bucket's state from a snapshot.
func StateOf(sn Snapshot) BucketState {
	d := bucket.CanAccept(sn.Limit.Rule(), sn.State, sn.Now, bucket.Amount{})
	return BucketState{Level: d.Level, Held: d.Held, Remaining: d.Remaining, Capacity: d.Capacity, UpdatedAt: sn.State.Updated,
		PeriodStart: d.PeriodStart, ResetsAt: d.ResetsAt, Override: sn.Limit.Override, Grants: sn.Limit.Grants, Rollover: sn.Limit.Received}
}

// Bucket returns a bucket's state. It writes nothing.
func (s *Service) Bucket(ctx context.Context, ref BucketRef) (BucketState, error) {
	if err := validateRef(ref); err != nil {
		return BucketState{}, err
	}
	sn, err := s.store.Inspect(ctx, ref)
	if err != nil {
		return BucketState{}, err
	}
	return StateOf(sn), nil
}

// CanAccept answers whether a Fillup of cost would be accepted now. It
// writes nothing.
func (s *Service) CanAccept(ctx context.Context, ref BucketRef, cost decimal.Decimal) (bucket.Decision, error) {
	c, err := s.Check(ctx, ref, cost)
	return c.Decision, err
}

// Check is CanAccept that also returns the limit the decision was made under
// (for the RateLimit header fields).
func (s *Service) Check(ctx context.Context, ref BucketRef, cost decimal.Decimal) (res CheckResult, err error) {
	if s.tracer != nil {
		var end func(BucketRef, string, error)
		ctx, end = s.tracer.Decision(ctx, "check", ref, 1)
		defer func() { end(ref, decided(res.Decision.Accepted), err) }()
	}
	if err := validateRef(ref); err != nil {
		return CheckResult{}, err
	}
	if err := checkAmount("cost", cost, false); err != nil {
		return CheckResult{}, err
	}
	sn, err := s.store.Inspect(ctx, ref)
	if err != nil {
		return CheckResult{}, err
	}
	return CheckResult{Decision: bucket.CanAccept(sn.Limit.Rule(), sn.State, sn.Now, Amount(cost)), Limit: sn.Limit}, nil
}

// CheckResult is a CanAccept decision with the limit it was made under.
type CheckResult struct {
	Decision bucket.Decision
	Limit    Limit
}

// Item is one (limit, key, cost) of a Fillup.
type Item struct {
	Bucket BucketRef
	Cost   decimal.Decimal
	Meta   Meta
}

// FillupResult is the answer to a Fillup: whether the call was accepted and
// one decision per requested item, in request order.
type FillupResult struct {
	Accepted bool
	Items    []bucket.Decision
	// Limits holds, per item, the limit its decision was made under.
	Limits []Limit
	// EntryIDs holds, per item, the history entry the call wrote for its
	// bucket, "" for none.
	EntryIDs []string
	Replayed bool
}

// Fillup charges every item or none. Items on the same bucket are summed;
// each item's decision says whether its bucket could take that sum.
func (s *Service) Fillup(ctx context.Context, items []Item, idem Idempotency) (res FillupResult, err error) {
	if s.tracer != nil {
		var ref BucketRef
		if len(items) > 0 {
			ref = items[0].Bucket
		}
		var end func(BucketRef, string, error)
		ctx, end = s.tracer.Decision(ctx, "fillup", ref, len(items))
		defer func() { end(ref, decided(res.Accepted), err) }()
	}
	if len(items) == 0 || len(items) > MaxItems {
		return FillupResult{}, invalid(CodeInvalidRequest, "items", "between 1 and %d items are allowed, got %d", MaxItems, len(items))
	}
	if len(items) == 1 {
		return s.fillupOne(ctx, items[0], idem)
	}
	index := make(map[BucketRef]int, len(items))
	charges := make([]Charge, 0, len(items))
	slot := make([]int, len(items))
	for i, it := range items {
		if err := validateItem(it, i, len(items)); err != nil {
			return FillupResult{}, err
		}
		j, ok := index[it.Bucket]
		switch {
		case !ok:
			j = len(charges)
			index[it.Bucket] = j
			charges = append(charges, Charge{Bucket: it.Bucket, Cost: it.Cost, Meta: it.Meta})
		case !sameMeta(charges[j].Meta, it.Meta):
			// The items of one bucket are one charge and one history entry.
			return FillupResult{}, itemErr(invalid(CodeInvalidRequest, "meta",
				"differs from the meta of an earlier item of the same bucket, whose costs are charged as one history entry"), i, len(items))
		default:
			charges[j].Cost = charges[j].Cost.Add(it.Cost)
		}
		slot[i] = j
	}
	out, err := s.store.Fillup(ctx, charges, idem)
	if err != nil {
		return FillupResult{}, err
	}
	if len(out.Items) != len(charges) {
		return FillupResult{}, fmt.Errorf("store answered %d items for %d buckets", len(out.Items), len(charges))
	}
	decisions := make([]bucket.Decision, len(charges))
	for j, io := range out.Items {
		decisions[j] = fillupDecision(io.Snapshot, charges[j].Cost, out.Accepted)
		s.wrote(io.Snapshot.Limit, out.Accepted && !out.Replayed)
	}
	res = FillupResult{Accepted: out.Accepted, Items: make([]bucket.Decision, len(items)), Limits: make([]Limit, len(items)),
		EntryIDs: make([]string, len(items)), Replayed: out.Replayed}
	for i := range items {
		res.Items[i] = decisions[slot[i]]
		res.Limits[i] = out.Items[slot[i]].Snapshot.Limit
		res.EntryIDs[i] = out.Items[slot[i]].EntryID
	}
	return res, nil
}

// fillupOne is Fillup of one item: the same checks and answer, without the
// bookkeeping that merges the items of a bucket.
func (s *Service) fillupOne(ctx context.Context, it Item, idem Idempotency) (FillupResult, error) {
	if err := validateItem(it, 0, 1); err != nil {
		return FillupResult{}, err
	}
	out, err := s.store.Fillup(ctx, []Charge{{Bucket: it.Bucket, Cost: it.Cost, Meta: it.Meta}}, idem)
	if err != nil {
		return FillupResult{}, err
	}
	if len(out.Items) != 1 {
		return FillupResult{}, fmt.Errorf("store answered %d items for 1 bucket", len(out.Items))
	}
	sn := out.Items[0].Snapshot
	s.wrote(sn.Limit, out.Accepted && !out.Replayed)
	return FillupResult{Accepted: out.Accepted, Items: []bucket.Decision{fillupDecision(sn, it.Cost, out.Accepted)}, Limits: []Limit{sn.Limit},
		EntryIDs: []string{out.Items[0].EntryID}, Replayed: out.Replayed}, nil
}

// validateItem checks item i of a Fillup of n items, naming it in the error.
func validateItem(it Item, i, n int) error {
	if err := validateRef(it.Bucket); err != nil {
		return itemErr(err, i, n)
	}
	if err := checkAmount("cost", it.Cost, false); err != nil {
		return itemErr(err, i, n)
	}
	if err := ValidateMeta("meta", it.Meta); err != nil {
		return itemErr(err, i, n)
	}
	return nil
}

// fillupDecision derives a decision from a store's snapshot: the bucket after
// the call when the call was accepted (marked as the limit's mode marks a
// cost that ended above capacity), and as it was (with the cost asked)
// otherwise.
func fillupDecision(sn Snapshot, cost decimal.Decimal, accepted bool) bucket.Decision {
	if accepted {
		return bucket.Charged(sn.Limit.Rule(), sn.State, sn.Now, Amount(cost))
	}
	return bucket.CanAccept(sn.Limit.Rule(), sn.State, sn.Now, Amount(cost))
}

// DrainResult is the answer to a Drain.
type DrainResult struct {
	Removed decimal.Decimal
	Bucket  BucketState
	// EntryID is the drain's history entry, "" when none was written.
	EntryID  string
	Replayed bool
}

// Drain lowers a bucket's level by amount, clamped at zero.
func (s *Service) Drain(ctx context.Context, ref BucketRef, amount decimal.Decimal, idem Idempotency, meta Meta) (res DrainResult, err error) {
	if s.tracer != nil {
		var end func(BucketRef, string, error)
		ctx, end = s.tracer.Decision(ctx, "drain", ref, 1)
		defer func() { end(ref, ResultDone, err) }()
	}
	if err := validateRef(ref); err != nil {
		return DrainResult{}, err
	}
	if err := checkAmount("amount", amount, false); err != nil {
		return DrainResult{}, err
	}
	if err := ValidateMeta("meta", meta); err != nil {
		return DrainResult{}, err
	}
	out, err := s.store.Drain(ctx, ref, amount, idem, meta)
	if err != nil {
		return DrainResult{}, err
	}
	s.wrote(out.Snapshot.Limit, out.Removed.IsPositive() && !out.Replayed)
	return DrainResult{Removed: out.Removed, Bucket: StateOf(out.Snapshot), EntryID: out.EntryID, Replayed: out.Replayed}, nil
}

// ReserveResult is the answer to a Reserve: the decision and, when accepted,
// the hold.
type ReserveResult struct {
	Decision    bucket.Decision
	Limit       Limit // the limit the decision was made under
	Reservation Reservation
	// EntryID is the history entry the call wrote (reserved, or denied),
	// "" for none.
	EntryID  string
	Replayed bool
}

// Reserve holds amount in a bucket for ttl (when zero, DefaultTTL or the
// longest TTL allowed, whichever is shorter).
func (s *Service) Reserve(ctx context.Context, ref BucketRef, amount decimal.Decimal, ttl time.Duration, idem Idempotency, meta Meta) (res ReserveResult, err error) {
	if s.tracer != nil {
		var end func(BucketRef, string, error)
		ctx, end = s.tracer.Decision(ctx, "reserve", ref, 1)
		defer func() { end(ref, decided(res.Decision.Accepted), err) }()
	}
	if err := validateRef(ref); err != nil {
		return ReserveResult{}, err
	}
	if err := checkAmount("amount", amount, true); err != nil {
		return ReserveResult{}, err
	}
	if ttl == 0 {
		ttl = min(s.defaultTTL, s.maxTTL) // --max-ttl may be shorter than the default
	}
	if ttl < MinTTL || ttl > s.maxTTL || ttl%time.Microsecond != 0 {
		return ReserveResult{}, invalid(CodeInvalidDuration, "ttl", "must be a whole number of microseconds between %s and %s", MinTTL, s.maxTTL)
	}
	if err := ValidateMeta("meta", meta); err != nil {
		return ReserveResult{}, err
	}
	out, err := s.store.Reserve(ctx, ref, amount, ttl, idem, meta)
	if err != nil {
		return ReserveResult{}, err
	}
	s.wrote(out.Snapshot.Limit, out.Accepted && !out.Replayed)
	return ReserveResult{
		Decision:    fillupDecision(out.Snapshot, amount, out.Accepted),
		Limit:       out.Snapshot.Limit,
		Reservation: out.Reservation,
		EntryID:     out.EntryID,
		Replayed:    out.Replayed,
	}, nil
}

// ResolveResult is the answer to a Commit or Release: the hold as it is and
// the bucket's state after the call.
type ResolveResult struct {
	Reservation Reservation
	Bucket      BucketState
	Replayed    bool
}

// Commit ends a hold and charges amount (the held amount when null). A
// refusal is returned as a *Refusal error.
func (s *Service) Commit(ctx context.Context, id string, amount decimal.NullDecimal, overrun bool, idem Idempotency, meta Meta) (res ResolveResult, err error) {
	if s.tracer != nil {
		var end func(BucketRef, string, error)
		ctx, end = s.tracer.Decision(ctx, "commit", BucketRef{}, 1)
		defer func() { end(res.Reservation.Bucket, ResultDone, err) }()
	}
	if err := ValidateReservationID(id); err != nil {
		return ResolveResult{}, err
	}
	if amount.Valid {
		if err := checkAmount("amount", amount.Decimal, false); err != nil {
			return ResolveResult{}, err
		}
	}
	if err := ValidateMeta("meta", meta); err != nil {
		return ResolveResult{}, err
	}
	out, err := s.store.Commit(ctx, id, amount, overrun, idem, meta)
	return s.resolved(out, err)
}

// Release ends a hold without charging. A refusal is returned as a *Refusal
// error.
func (s *Service) Release(ctx context.Context, id string, idem Idempotency, meta Meta) (res ResolveResult, err error) {
	if s.tracer != nil {
		var end func(BucketRef, string, error)
		ctx, end = s.tracer.Decision(ctx, "release", BucketRef{}, 1)
		defer func() { end(res.Reservation.Bucket, ResultDone, err) }()
	}
	if err := ValidateReservationID(id); err != nil {
		return ResolveResult{}, err
	}
	if err := ValidateMeta("meta", meta); err != nil {
		return ResolveResult{}, err
	}
	out, err := s.store.Release(ctx, id, idem, meta)
	return s.resolved(out, err)
}

func (s *Service) resolved(out ResolveOutcome, err error) (ResolveResult, error) {
	if err != nil {
		return ResolveResult{}, err
	}
	s.wrote(out.Snapshot.Limit, out.Refusal == "" && !out.Replayed)
	r := out.Reservation
	r.State = r.StateAt(out.Snapshot.Now)
	res := ResolveResult{Reservation: r, Bucket: StateOf(out.Snapshot), Replayed: out.Replayed}
	if out.Refusal != "" {
		return res, &Refusal{Code: out.Refusal, Reservation: r}
	}
	return res, nil
}

// Reservation returns a hold as it is now.
func (s *Service) Reservation(ctx context.Context, id string) (Reservation, error) {
	if err := ValidateReservationID(id); err != nil {
		return Reservation{}, err
	}
	r, now, err := s.store.Reservation(ctx, id)
	if err != nil {
		return Reservation{}, err
	}
	r.State = r.StateAt(now)
	return r, nil
}

// History lists a bucket's entries newest first.
func (s *Service) History(ctx context.Context, ref BucketRef, cursor string, n int) ([]Entry, string, error) {
	if err := validateRef(ref); err != nil {
		return nil, "", err
	}
	if n < 1 || n > MaxPage {
		return nil, "", invalid(CodeInvalidRequest, "limit", "must be a whole number from 1 to %d", MaxPage)
	}
	return s.store.History(ctx, ref, cursor, n)
}

func validateRef(ref BucketRef) error {
	if err := ValidateName(ref.Limit); err != nil {
		return err
	}
	return ValidateKey(ref.Key)
}

// checkAmount enforces the input bounds on an already parsed amount.
func checkAmount(field string, d decimal.Decimal, positive bool) error {
	switch {
	case d.Sign() < 0:
		return invalid(CodeInvalidAmount, field, "must not be negative")
	case positive && d.Sign() == 0:
		return invalid(CodeInvalidAmount, field, "must be greater than 0")
	case aboveMax(d):
		return invalid(CodeInvalidAmount, field, "must be at most 1000000000000")
	case d.Exponent() < -AmountScale && !d.Equal(d.Truncate(AmountScale)):
		return invalid(CodeInvalidAmount, field, "has more than %d fractional digits", AmountScale)
	}
	return nil
}

// maxFixed is MaxAmount as the rule's fixed-point amount.
var maxFixed = bucket.AmountOf(1_000_000_000_000)

// aboveMax reports whether d > MaxAmount, comparing in fixed point (no
// math/big rescaling) whenever d converts.
func aboveMax(d decimal.Decimal) bool {
	if a, ok := bucket.FromDecimal(d); ok {
		return a.GreaterThan(maxFixed)
	}
	return d.GreaterThan(MaxAmount)
}

func itemErr(err error, i, n int) error {
	if ie, ok := err.(*InvalidError); ok && n > 0 {
		field := ie.Field
		if field == "name" {
			field = "limit" // an item names its limit in "limit"
		}
		return &InvalidError{Code: ie.Code, Field: fmt.Sprintf("items[%d].%s", i, field), Reason: ie.Reason}
	}
	return err
}

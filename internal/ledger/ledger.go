// Package ledger is the domain around the bucket rule: named limits, buckets
// keyed by caller-chosen strings, holds and their life cycle, history, and the
// idempotency of state-changing calls. It defines the Store interface that the
// memory, PostgreSQL and Redis stores implement, and the Service that validates
// input, calls the store and turns what the store saw into decisions with the
// pure rule of package bucket.
package ledger

import (
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/calendar"
	"github.com/shopspring/decimal"
)

// Limit is a named policy: capacity, one of a leak rate (LeakAmount per
// LeakPer), a calendar Period or a rolling Window, and whether history is
// kept. A periodic or window limit has zero leak fields.
type Limit struct {
	Name       string
	Capacity   decimal.Decimal
	LeakAmount decimal.Decimal
	LeakPer    time.Duration
	Period     *Period
	Window     *Window
	History    bool
	// RecordDenials makes a denied Fillup, Reserve or multi-bucket item
	// write a denied history entry (when History is on); nothing else of
	// the bucket changes.
	RecordDenials bool
	// Mode is what the limit does with a cost that does not fit: ModeEnforce
	// (denies it), ModeShadow (accepts and charges it, marked shadow_denied)
	// or ModeSoft (accepts it while level + held stays within capacity ×
	// (1 + Grace/100), marked over_capacity). Grace is a percentage from 0 to
	// 100 with at most 2 decimals, zero unless the mode is ModeSoft.
	Mode  string
	Grace decimal.Decimal
	// Thresholds are the points of a bucket's use at which a write emits
	// an event (at most MaxThresholds, distinct).
	Thresholds []Threshold
	// Rollover, on a periodic limit, carries the capacity a bucket left
	// unused at the end of a period into the next (nil: none).
	Rollover  *Rollover
	CreatedAt time.Time
	UpdatedAt time.Time
	// Override is the pattern of the override a store applied to this
	// limit for one bucket (Overrides.Effective), "" for the limit's own
	// terms: set only in a Snapshot's Limit.
	Override string
	// Grants is the sum of the bucket's active grants, already added to
	// Capacity (Limit.WithGrants): set only in a Snapshot's Limit.
	Grants decimal.Decimal
	// Received is the rollover the bucket receives in the current period,
	// already added to Capacity, and Carry what the store keeps with the
	// bucket for it (Limit.WithRollover): set only in a Snapshot's Limit.
	Received decimal.Decimal
	Carry    Carry

	watch *Watch // the thresholds at Capacity, once Prepare made them
}

// The modes of a limit (Limit.Mode).
const (
	ModeEnforce = "enforce"
	ModeShadow  = "shadow"
	ModeSoft    = "soft"
)

// Ceiling is the most level + held may reach by an accepted charge: the
// capacity scaled by the mode (CeilingScale), or MaxLevel, the largest level
// a store keeps, under ModeShadow.
func (l Limit) Ceiling() decimal.Decimal {
	scale, bounded := l.CeilingScale()
	if !bounded {
		return MaxLevel
	}
	return l.Capacity.Mul(scale)
}

// CeilingScale is the one place the modes' ceilings are written: the ceiling
// is the capacity × scale, 1 under ModeEnforce and 1 + Grace/100 under
// ModeSoft (exact: a capacity has at most 6 fractional digits and Grace 2,
// well within a level's 12); under ModeShadow it is not bounded by the
// capacity (bounded false: MaxLevel). A store that adds to the capacity
// under its own lock (grants, rollover received) scales the sum by it.
func (l Limit) CeilingScale() (scale decimal.Decimal, bounded bool) {
	switch l.Mode {
	case ModeShadow:
		return decimal.Decimal{}, false
	case ModeSoft:
		return one.Add(l.Grace.Shift(-2)), true
	}
	return one, true
}

var one = decimal.New(1, 0)

// Period is a calendar period as a limit stores it: Every is "day", "week",
// "month", "quarter" or "year", TZ an IANA zone name of the embedded
// database, StartDay the ISO weekday (week) or day of the month (month,
// quarter) a period starts on, 0 for day and year. Stores keep it as these
// three values; ValidatePeriod fills in the defaults.
type Period struct {
	Every    string
	TZ       string
	StartDay int
}

// Calendar returns the rule of p for package calendar.
func (p Period) Calendar() (calendar.Period, error) {
	u, ok := calendar.ParseUnit(p.Every)
	if !ok {
		return calendar.Period{}, invalid(CodeInvalidRequest, "period.every", "unknown period %q", clip(p.Every))
	}
	loc, err := calendar.LoadZone(p.TZ)
	if err != nil {
		return calendar.Period{}, invalid(CodeInvalidRequest, "period.tz", "unknown time zone %q", clip(p.TZ))
	}
	return calendar.Period{Every: u, Zone: loc, StartDay: p.StartDay}, nil
}

// StartsAround returns the starts, in microseconds since the epoch, of n
// consecutive periods of p (a stored limit's: read as Rule reads it), the
// first being the period before the one that contains at: the table a
// database store is given so that it can tell by its own clock which period
// "now" is in without computing a calendar.
func (p Period) StartsAround(at time.Time, n int) []int64 {
	cp := p.stored()
	start, _ := cp.Bounds(at)
	starts := cp.Starts(start.Add(-time.Microsecond), n)
	out := make([]int64, len(starts))
	for i, t := range starts {
		out[i] = t.UnixMicro()
	}
	return out
}

// Window is a rolling window as a limit stores it: its Length and the
// Precision of its slots, both whole microseconds, the precision dividing
// the length into at most MaxWindowSlots (ValidateWindow).
type Window = bucket.Window

// Periodic reports whether l resets on calendar periods.
func (l Limit) Periodic() bool { return l.Period != nil }

// Kind is the limit's rule by name: "leak", "period" or "window".
func (l Limit) Kind() string {
	switch {
	case l.Window != nil:
		return "window"
	case l.Period != nil:
		return "period"
	}
	return "leak"
}

// SameRule reports whether l and o charge buckets by the same rule (leak
// rate or period), so that a PUT from one to the other needs no settling.
func (l Limit) SameRule(o Limit) bool {
	if l.Kind() != o.Kind() {
		return false
	}
	if l.Window != nil {
		return *l.Window == *o.Window
	}
	if l.Period != nil {
		return *l.Period == *o.Period
	}
	return l.LeakAmount.Equal(o.LeakAmount) && l.LeakPer == o.LeakPer
}

// Rule returns the part of the limit that the bucket rule needs. A stored
// period was validated when it was put; should its zone ever be missing
// from the embedded database, it is read in UTC rather than failing every
// call on the limit.
func (l Limit) Rule() bucket.Limit {
	r := bucket.Limit{Capacity: Amount(l.Capacity), LeakAmount: Amount(l.LeakAmount), LeakPer: l.LeakPer}
	switch l.Mode {
	case ModeShadow:
		r.Mode, r.Ceiling = bucket.Shadow, Amount(l.Ceiling())
	case ModeSoft:
		r.Mode, r.Ceiling = bucket.Soft, Amount(l.Ceiling())
	}
	if l.Period != nil {
		p := l.Period.stored()
		r.Period = &p
	}
	if l.Window != nil {
		w := *l.Window
		r.Window = &w
	}
	return r
}

// stored is the calendar period of a stored limit: should its zone ever be
// missing from the embedded database, it is read in UTC (see Rule).
func (p Period) stored() calendar.Period {
	cp, err := p.Calendar()
	if err != nil {
		u, _ := calendar.ParseUnit(p.Every)
		cp = calendar.Period{Every: u, Zone: time.UTC, StartDay: p.StartDay}
	}
	return cp
}

// Amount returns the decimal d as the bucket rule's exact fixed-point
// amount. Every amount the service accepts (docs/rounding.md) and every level
// a store keeps converts exactly, most without allocating; anything else is a
// broken invariant, and panics rather than being charged as something else.
func Amount(d decimal.Decimal) bucket.Amount {
	a, ok := bucket.FromDecimal(d)
	if !ok {
		panic("ledger: amount out of range: " + d.String())
	}
	return a
}

// BucketRef names one bucket: a limit and a caller-chosen key.
type BucketRef struct {
	Limit string
	Key   string
}

// Snapshot is a bucket as a store saw it inside one atomic step: the limit
// at that moment, the bucket's state after the step (or as it was, when the
// step changed nothing) and the store's clock for the step. Every number in an
// answer is derived from a Snapshot with package bucket, so that all stores
// answer alike.
type Snapshot struct {
	Limit Limit
	State bucket.State
	Now   time.Time
}

// ReservationState is where a hold is in its life cycle.
type ReservationState string

// The states of a hold. A stored active hold whose expiry has passed is
// reported as expired.
const (
	Active    ReservationState = "active"
	Committed ReservationState = "committed"
	Released  ReservationState = "released"
	Expired   ReservationState = "expired"
)

// Reservation is a hold: an amount reserved in one bucket until ExpiresAt,
// then committed, released or expired. CommittedAmount is set only for a
// committed hold.
type Reservation struct {
	ID              string
	Bucket          BucketRef
	Amount          decimal.Decimal
	State           ReservationState
	CommittedAmount decimal.NullDecimal
	CreatedAt       time.Time
	ExpiresAt       time.Time
	ResolvedAt      time.Time // zero while active; ExpiresAt once expired
}

// StateAt returns the state of r as seen at now: an active hold is expired
// from ExpiresAt on.
func (r Reservation) StateAt(now time.Time) ReservationState {
	if r.State == Active && !now.Before(r.ExpiresAt) {
		return Expired
	}
	return r.State
}

// Event is the kind of a history entry.
type Event string

// The events a history records.
const (
	EventFillup    Event = "fillup"
	EventDrain     Event = "drain"
	EventReserved  Event = "reserved"
	EventCommitted Event = "committed"
	EventReleased  Event = "released"
	EventExpired   Event = "expired"
	// EventDenied is a denied Fillup, Reserve or multi-bucket item of a
	// limit with RecordDenials: the amount asked and the call's meta.
	EventDenied Event = "denied"
)

// Entry is one line of a bucket's history. IDs are assigned by the store and
// grow with insertion order within a bucket.
type Entry struct {
	ID            string
	Time          time.Time
	Event         Event
	Amount        decimal.Decimal
	ReservationID string
	// GrantID is the grant of a granted or revoked entry, "" otherwise.
	GrantID string
	// Meta is what the caller said of the event (nil when nothing).
	Meta Meta
	// ShadowDenied marks a fillup or reserved entry that a shadow-mode limit
	// with RecordDenials accepted although enforce would have denied it
	// (docs/modes.md); false on every other entry.
	ShadowDenied bool
}

// Idempotency identifies a state-changing request for replay. A zero value
// (empty Key) means the caller sent no Idempotency-Key.
//
// Scope is the route and its target (bucket, reservation or the multi-bucket
// call); Hash is a digest of the request body in canonical form. Two requests
// are the same when Scope, Key and Hash are equal.
//
// Caller is who sent the request: "key:" and the API key's name with
// authentication on, "addr:" and the client's IP address without. It is not
// part of the request's identity; a store may bound the records one caller
// keeps (the memory store does), so that one caller cannot fill them for all.
type Idempotency struct {
	Scope  string
	Key    string
	Hash   string
	Caller string
}

// IdempotencyTTL is how long a store keeps an idempotency record at least.
const IdempotencyTTL = 24 * time.Hour

// ClockStep is how far after "now" a bucket's stored time may lie and still
// be kept: a clock that went back a little leaks nothing until it catches up.
// A stored time further ahead can only come from a clock that was stepped
// back (after a forward step): the next write, or denial, of the bucket
// takes it as now, so the bucket is not locked out until the clock catches up.
const ClockStep = time.Minute

// Refusal codes: domain answers that are stored and replayed for an
// Idempotency-Key like any other answer. Each maps to one HTTP status.
const (
	RefusalExceedsHold = string(CodeExceedsHold)        // commit above the hold without overrun: 422
	RefusalExpired     = string(CodeReservationExpired) // commit or release after expiry: 410
	RefusalClosed      = string(CodeReservationClosed)  // conflicting second resolution: 409
)

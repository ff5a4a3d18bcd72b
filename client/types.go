package client

import (
	"time"

	"github.com/budgetd/budgetd/api"
	"github.com/shopspring/decimal"
)

// MaxAmount is the largest amount budgetd accepts (10^12); amounts carry at
// most MaxScale fractional digits.
var MaxAmount = api.MaxAmount

// MaxScale is the number of fractional digits an amount may carry.
const MaxScale = api.MaxScale

// refused turns a problem found before sending into an *Error (Status 0).
func refused(err error) error {
	if p, ok := err.(*api.Problem); ok {
		return &Error{Code: p.Code, Field: p.Field, Detail: p.Detail}
	}
	return err
}

// checkAmount refuses, before anything is sent, an amount budgetd would
// refuse or that the client cannot write exactly: negative, above
// MaxAmount, or with more than MaxScale fractional digits.
func checkAmount(field string, d decimal.Decimal) error {
	return refused(api.CheckAmount(field, d, false))
}

// checkBucket refuses a malformed limit name or bucket key before sending
// (an empty key would name another path); prefix is "items[2]." for an item
// of a multi-bucket call.
func checkBucket(prefix, limit, key string) error {
	if err := api.CheckName(prefix+"limit", limit); err != nil {
		return refused(err)
	}
	return refused(api.CheckKey(prefix+"key", key))
}

// checkMeta refuses meta budgetd would refuse, before sending.
func checkMeta(field string, m map[string]string) error {
	return refused(api.Meta(m).Validate(field))
}

// Decision is budgetd's answer to "may this cost be spent now?" (CanAccept,
// Fillup, Reserve, one item of a multi-bucket Fillup). Level, Held,
// Remaining and Capacity describe the bucket after the change when
// accepted, and as it is otherwise.
type Decision struct {
	Accepted  bool
	Level     decimal.Decimal
	Held      decimal.Decimal
	Remaining decimal.Decimal
	Capacity  decimal.Decimal
	// RetryAfter is how long until the cost fits if no other traffic came
	// (leak, period resets and hold expiries counted), rounded up to the
	// microsecond; zero when accepted or when the cost never fits.
	RetryAfter time.Duration
	// NeverFits: the cost is larger than the capacity and is never accepted.
	NeverFits bool
	// PeriodStart and ResetsAt bound the current period of a periodic
	// limit (the level starts again from zero at ResetsAt); nil for a leaky
	// one.
	PeriodStart *time.Time
	ResetsAt    *time.Time
	// EntryID is the id of the history entry the call wrote (the reference
	// number to quote): the fillup or reserved entry, or the denied entry
	// of a limit that records denials; "" when none was written (and for
	// CanAccept).
	EntryID string
	// ShadowDenied: a limit in shadow mode accepted (and charged) a cost
	// that enforce mode would have denied. OverCapacity: a limit in soft
	// mode accepted a cost that ends above capacity, within its grace. For
	// CanAccept, that it would.
	ShadowDenied bool
	OverCapacity bool
	// Override is the pattern of the override whose terms applied to the
	// bucket (docs/terms.md); "" for the limit's own terms.
	Override string
	// Grants is the sum of the bucket's active grants, included in
	// Capacity (docs/terms.md#grants).
	Grants decimal.Decimal
	// Rollover is the rollover the bucket received in the current period,
	// included in Capacity (docs/terms.md#rollover).
	Rollover decimal.Decimal
	// RateLimitPolicy and RateLimit are the answer's IETF RateLimit header
	// fields as budgetd sent them, for passing on to an end user.
	RateLimitPolicy string
	RateLimit       string
	// Doc is the document as budgetd sent it, every member included (the
	// fields above are read from it): what a program that passes the
	// answer on, like budgetd's CLI with --json, prints.
	Doc api.Decision
}

func decisionOfDoc(d api.Decision) Decision {
	return Decision{
		Accepted: d.Accepted, Level: d.Level, Held: d.Held, Remaining: d.Remaining, Capacity: d.Capacity,
		RetryAfter: d.RetryAfterDuration(), NeverFits: d.NeverFits, PeriodStart: optTime(d.PeriodStart), ResetsAt: optTime(d.ResetsAt),
		EntryID: optString(d.EntryID), ShadowDenied: d.ShadowDenied, OverCapacity: d.OverCapacity, Override: optString(d.Override),
		Grants: d.Grants, Rollover: d.Rollover, Doc: d,
	}
}

// optString is a string that may be absent, "" when it is.
func optString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// optTime is a time that may be absent, as a *time.Time.
func optTime(t *api.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := t.Time
	return &v
}

// Limit is a limit document: exactly one of Leak, Period and Window is set.
type Limit struct {
	Name     string
	Capacity decimal.Decimal
	// Leak is the rate of a leaky limit; nil for a periodic one.
	Leak *Leak
	// Period is the calendar period of a periodic limit; nil for a leaky
	// one.
	Period *Period
	// Window is the rolling window of a window limit; nil for another
	// kind.
	Window  *Window
	History bool
	// RecordDenials: a denied Fillup, Reserve or multi-bucket item writes a
	// denied history entry.
	RecordDenials bool
	// Mode is api.ModeEnforce, api.ModeShadow or api.ModeSoft; Grace is
	// the soft limit's grace in percent (10 for "10%"), zero otherwise.
	Mode  api.Mode
	Grace decimal.Decimal
	// Thresholds are the points of use at which a write emits an event:
	// "80%" or "4500".
	Thresholds []string
	// Rollover is the rollover of a periodic limit; nil for none.
	Rollover  *Rollover
	CreatedAt time.Time
	UpdatedAt time.Time
	// Doc is the document as budgetd sent it, every member included (the
	// fields above are read from it): what a program that passes the
	// answer on, like budgetd's CLI with --json, prints.
	Doc api.Limit
}

// Rollover carries the capacity a bucket of a periodic limit left unused
// at the end of a period into the next period only, at most Max.
type Rollover struct {
	Max decimal.Decimal
}

// Kind is the kind of the limit: api.KindLeak, api.KindPeriod or
// api.KindWindow.
func (l Limit) Kind() api.Kind {
	switch {
	case l.Window != nil:
		return api.KindWindow
	case l.Period != nil:
		return api.KindPeriod
	}
	return api.KindLeak
}

// Window is a rolling window: in every span of Length the charges accepted
// sum to at most the capacity; a charge counts until Length after the end
// of its slot of Precision.
type Window struct {
	// Length is the window's length, from 1s to 8760h.
	Length time.Duration
	// Precision is the slot length. In a LimitSpec, 0 takes the default (the
	// largest of 1ms, 10ms, 100ms, 1s, 10s, 1m, 10m, 1h and 24h that
	// divides Length into at least 60 slots); a limit read back has the
	// precision in force.
	Precision time.Duration
}

// Leak is a leak rate: Amount per Per.
type Leak struct {
	Amount decimal.Decimal
	Per    time.Duration
}

// Period is a calendar period: the level starts again from zero at the
// first instant of every period's local start date in TZ.
type Period struct {
	// Every is the length of a period: api.Day, Week, Month, Quarter or
	// Year.
	Every api.Every
	// TZ is an IANA time zone name; "" is UTC.
	TZ string
	// StartDay is the day a period starts on: day of the month (1–28) for
	// months and quarters, ISO weekday (1 Monday … 7 Sunday) for weeks; 0
	// is the default (1), and the only value allowed for days and years.
	StartDay int
}

func limitOfDoc(d api.Limit) Limit {
	l := Limit{Name: d.Name, Capacity: d.Capacity, History: d.History, RecordDenials: d.RecordDenials, Mode: d.Mode, Thresholds: d.Thresholds, CreatedAt: d.CreatedAt.Time, UpdatedAt: d.UpdatedAt.Time, Doc: d}
	if d.Grace != nil {
		l.Grace = d.Grace.Value
	}
	if d.Leak != nil {
		l.Leak = &Leak{Amount: d.Leak.Amount, Per: time.Duration(d.Leak.Per)}
	}
	if d.Period != nil {
		p := Period{Every: d.Period.Every, TZ: d.Period.TZ}
		if d.Period.StartDay != nil {
			p.StartDay = *d.Period.StartDay
		}
		l.Period = &p
	}
	if d.Window != nil {
		l.Window = &Window{Length: time.Duration(d.Window.Length), Precision: time.Duration(d.Window.Precision)}
	}
	if d.Rollover != nil {
		l.Rollover = &Rollover{Max: d.Rollover.Max}
	}
	return l
}

// LimitSpec is a limit as PutLimit writes it: exactly one of Leak, Period
// and Window.
type LimitSpec struct {
	Capacity decimal.Decimal
	// Leak makes the limit a leaky bucket: Leak.Amount leaks out every
	// Leak.Per.
	Leak *Leak
	// Period makes the limit a calendar budget: Capacity per period.
	Period *Period
	// Window makes the limit a rolling window: Capacity in any span of
	// Window.Length.
	Window *Window
	// History says whether the limit records history; nil means the
	// default (true).
	History *bool
	// RecordDenials makes a denial write a denied history entry; nil means
	// the default (false).
	RecordDenials *bool
	// Mode is what the limit does with a cost that does not fit; "" is the
	// default (api.ModeEnforce).
	Mode api.Mode
	// Grace is, for api.ModeSoft only, how far above capacity the limit
	// accepts, in percent (10 for 10%); nil is 0%.
	Grace *decimal.Decimal
	// Thresholds are at most 8 distinct points of use at which a write
	// emits an event: "80%" (of the capacity) or "4500.00".
	Thresholds []string
	// Rollover (periodic limits only) carries unused capacity into the
	// next period, at most Rollover.Max; nil is none.
	Rollover *Rollover
}

// doc is the PUT body of the spec.
func (s LimitSpec) doc() api.LimitPut {
	p := api.LimitPut{Capacity: s.Capacity, History: s.History, RecordDenials: s.RecordDenials, Mode: s.Mode, Thresholds: s.Thresholds}
	if s.Grace != nil {
		p.Grace = api.NewPercent(*s.Grace)
	}
	if s.Leak != nil {
		p.Leak = &api.Leak{Amount: s.Leak.Amount, Per: api.Duration(s.Leak.Per)}
	}
	if s.Period != nil {
		p.Period = &api.PeriodPut{Every: s.Period.Every, TZ: s.Period.TZ}
		if s.Period.StartDay != 0 {
			sd := s.Period.StartDay
			p.Period.StartDay = &sd
		}
	}
	if s.Window != nil {
		p.Window = &api.WindowPut{Length: api.Duration(s.Window.Length), Precision: api.Duration(s.Window.Precision)}
	}
	if s.Rollover != nil {
		p.Rollover = &api.Rollover{Max: s.Rollover.Max}
	}
	return p
}

// Bucket is the state of one (limit, key) bucket.
type Bucket struct {
	Key       string // set in bucket listings
	Level     decimal.Decimal
	Held      decimal.Decimal
	Remaining decimal.Decimal
	Capacity  decimal.Decimal
	UpdatedAt *time.Time // nil for a bucket never written
	// PeriodStart and ResetsAt bound the current period of a periodic
	// limit; nil for a leaky one.
	PeriodStart *time.Time
	ResetsAt    *time.Time
	// Override is the pattern of the override whose terms apply to the
	// bucket now; "" for the limit's own terms.
	Override string
	// Grants is the sum of the bucket's active grants, included in
	// Capacity.
	Grants decimal.Decimal
	// Rollover is the rollover the bucket received in the current period,
	// included in Capacity.
	Rollover decimal.Decimal
	// Doc is the document as budgetd sent it, every member included (the
	// fields above are read from it): what a program that passes the
	// answer on, like budgetd's CLI with --json, prints.
	Doc api.BucketState
}

func bucketOfDoc(key string, d api.BucketState) Bucket {
	return Bucket{Key: key, Level: d.Level, Held: d.Held, Remaining: d.Remaining, Capacity: d.Capacity, UpdatedAt: optTime(d.UpdatedAt),
		PeriodStart: optTime(d.PeriodStart), ResetsAt: optTime(d.ResetsAt), Override: optString(d.Override), Grants: d.Grants, Rollover: d.Rollover, Doc: d}
}

// Item is one (limit, key, cost) of a multi-bucket Fillup, with what to
// store on its history entry.
type Item struct {
	Limit string
	Key   string
	Cost  decimal.Decimal
	// Meta is stored on this item's history entry; nil takes the call's
	// Meta option, if any.
	Meta map[string]string
}

// ItemDecision is the decision on one item of a multi-bucket Fillup.
type ItemDecision struct {
	Limit string
	Key   string
	Decision
}

// MultiDecision is the answer to a multi-bucket Fillup: Accepted when every
// item was charged (all or nothing), and one decision per item in request
// order. RetryAfter is the largest wait among denied items (zero when a
// denied item never fits).
type MultiDecision struct {
	Accepted        bool
	Items           []ItemDecision
	RetryAfter      time.Duration
	RateLimitPolicy string
	RateLimit       string
}

// Reservation is a hold.
type Reservation struct {
	ID              string
	Limit           string
	Key             string
	State           api.ReservationState // active, committed, released or expired
	Amount          decimal.Decimal
	CommittedAmount *decimal.Decimal
	CreatedAt       time.Time
	ExpiresAt       time.Time
	ResolvedAt      *time.Time
	// Doc is the document as budgetd sent it, every member included (the
	// fields above are read from it): what a program that passes the
	// answer on, like budgetd's CLI with --json, prints.
	Doc api.Reservation
}

func reservationOfDoc(d api.Reservation) Reservation {
	return Reservation{
		ID: d.ID, Limit: d.Limit, Key: d.Key, State: d.State, Amount: d.Amount, CommittedAmount: d.CommittedAmount,
		CreatedAt: d.CreatedAt.Time, ExpiresAt: d.ExpiresAt.Time, ResolvedAt: optTime(d.ResolvedAt), Doc: d,
	}
}

// Resolved is the answer to Commit and Release: the hold as it is and the
// bucket's state after the call.
type Resolved struct {
	Reservation Reservation
	Bucket      Bucket
	// Doc is the document as budgetd sent it, every member included (the
	// fields above are read from it): what a program that passes the
	// answer on, like budgetd's CLI with --json, prints.
	Doc api.Resolved
}

// Drained is the answer to a Drain: the amount actually removed and the
// bucket after it.
type Drained struct {
	Removed decimal.Decimal
	Bucket  Bucket
	// EntryID is the drain's history entry, "" when nothing was removed.
	EntryID string
	// Doc is the document as budgetd sent it, every member included (the
	// fields above are read from it): what a program that passes the
	// answer on, like budgetd's CLI with --json, prints.
	Doc api.Drained
}

// Entry is one history entry.
type Entry struct {
	ID            string
	Time          time.Time
	Event         api.Event // fillup, drain, reserved, committed, released, expired, denied
	Amount        decimal.Decimal
	ReservationID string
	Meta          map[string]string
	// ShadowDenied: a shadow-mode limit with record_denials accepted this
	// fillup or reserved entry although enforce would have denied it.
	ShadowDenied bool
	// Doc is the document as budgetd sent it, every member included (the
	// fields above are read from it): what a program that passes the
	// answer on, like budgetd's CLI with --json, prints.
	Doc api.HistoryEntry
}

func entryOfDoc(d api.HistoryEntry) Entry {
	return Entry{ID: d.ID, Time: d.Time.Time, Event: d.Event, Amount: d.Amount, ReservationID: d.ReservationID, Meta: d.Meta, ShadowDenied: d.ShadowDenied, Doc: d}
}

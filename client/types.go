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
// Fillup, a denied Reserve): the api.Decision budgetd sent, every member
// as it sent it, with the answer's IETF RateLimit header fields.
// RetryAfterDuration gives the wait as a time.Duration. A program that
// passes the answer on, like budgetd's CLI with --json, prints d.Decision
// (marshalling d writes the same document: the header fields are not
// members).
type Decision struct {
	api.Decision
	// RateLimitPolicy and RateLimit are the answer's IETF RateLimit header
	// fields as budgetd sent them, for passing on to an end user.
	RateLimitPolicy string `json:"-"`
	RateLimit       string `json:"-"`
}

// Rollover carries the capacity a bucket of a periodic limit left unused
// at the end of a period into the next period only, at most Max: the
// document's own type.
type Rollover = api.Rollover

// Window is the rolling window of a LimitSpec: in every span of Length the charges accepted
// sum to at most the capacity; a charge counts until Length after the end
// of its slot of Precision.
type Window struct {
	// Length is the window's length, from 1s to 8760h.
	Length time.Duration
	// Precision is the slot length; 0 takes the default (the largest of
	// 1ms, 10ms, 100ms, 1s, 10s, 1m, 10m, 1h and 24h that divides Length
	// into at least 60 slots). A limit read back (api.Limit) has the
	// precision in force.
	Precision time.Duration
}

// Leak is the leak rate of a LimitSpec or an Override: Amount per Per (a
// limit read back has it as an api.Leak).
type Leak struct {
	Amount decimal.Decimal
	Per    time.Duration
}

// Period is the calendar period of a LimitSpec: the level starts again from zero at the
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

// LimitSpec is a limit as PutLimit writes it, with Go durations: exactly
// one of Leak, Period and Window. It is written as an api.LimitPut; what
// budgetd answers is the api.Limit.
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

// MultiDecision is the answer to a multi-bucket Fillup: the
// api.MultiFillupResult budgetd sent (Accepted when every item was
// charged, all or nothing; one decision per item in request order), with
// RetryAfter, the largest wait among denied items (zero when a denied item
// never fits), and the answer's IETF RateLimit header fields. Marshalling
// it writes the document budgetd sent.
type MultiDecision struct {
	api.MultiFillupResult
	RetryAfter      time.Duration `json:"-"`
	RateLimitPolicy string        `json:"-"`
	RateLimit       string        `json:"-"`
}

package client

import (
	"fmt"
	"time"

	"github.com/shopspring/decimal"
)

// MaxAmount is the largest amount budgetd accepts (10^12); amounts carry at
// most MaxScale fractional digits.
var MaxAmount = decimal.New(1, 12)

// MaxScale is the number of fractional digits an amount may carry.
const MaxScale = 6

// checkAmount refuses, before anything is sent, an amount budgetd would
// refuse or that the client cannot write exactly: negative, above
// MaxAmount, or with more than MaxScale fractional digits.
func checkAmount(field string, d decimal.Decimal) error {
	refuse := func(detail string) error {
		return &Error{Code: "invalid_amount", Field: field, Detail: fmt.Sprintf("%s %s", d.String(), detail)}
	}
	switch {
	case d.Sign() < 0:
		return refuse("is negative")
	case d.GreaterThan(MaxAmount):
		return refuse("is above 10^12")
	case !d.Equal(d.Truncate(MaxScale)):
		return refuse("has more than 6 fractional digits")
	}
	return nil
}

// amount writes an amount in budgetd's plain notation (no exponent, no
// trailing zeros).
func amount(d decimal.Decimal) string { return d.String() }

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
	// (leak and hold expiries counted), rounded up to the microsecond; zero
	// when accepted or when the cost never fits.
	RetryAfter time.Duration
	// NeverFits: the cost is larger than the capacity and is never accepted.
	NeverFits bool
	// RateLimitPolicy and RateLimit are the answer's IETF RateLimit header
	// fields as budgetd sent them, for passing on to an end user.
	RateLimitPolicy string
	RateLimit       string
}

type decisionDoc struct {
	Accepted   bool            `json:"accepted"`
	Level      decimal.Decimal `json:"level"`
	Held       decimal.Decimal `json:"held"`
	Remaining  decimal.Decimal `json:"remaining"`
	Capacity   decimal.Decimal `json:"capacity"`
	RetryAfter *string         `json:"retry_after"`
	NeverFits  bool            `json:"never_fits"`
}

func (d decisionDoc) decision() (Decision, error) {
	out := Decision{Accepted: d.Accepted, Level: d.Level, Held: d.Held, Remaining: d.Remaining, Capacity: d.Capacity, NeverFits: d.NeverFits}
	if d.RetryAfter != nil {
		s, err := decimal.NewFromString(*d.RetryAfter)
		if err != nil {
			return Decision{}, fmt.Errorf("budgetd: retry_after %q: %w", *d.RetryAfter, err)
		}
		out.RetryAfter = secondsDuration(s)
	}
	return out, nil
}

// secondsDuration converts seconds (at most 6 fractional digits) to a
// duration, rounding up and saturating.
func secondsDuration(s decimal.Decimal) time.Duration {
	us := s.Shift(6).Ceil()
	if us.GreaterThan(decimal.NewFromInt(int64(time.Duration(1<<63-1) / time.Microsecond))) {
		return time.Duration(1<<63 - 1)
	}
	return time.Duration(us.IntPart()) * time.Microsecond
}

// Limit is a limit document.
type Limit struct {
	Name      string
	Capacity  decimal.Decimal
	Leak      Leak
	History   bool
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Leak is a leak rate: Amount per Per.
type Leak struct {
	Amount decimal.Decimal
	Per    time.Duration
}

// LimitSpec is a limit as PutLimit writes it.
type LimitSpec struct {
	Capacity decimal.Decimal
	Leak     Leak
	// History says whether the limit records history; nil means the
	// default (true).
	History *bool
}

type limitDoc struct {
	Name     string          `json:"name"`
	Capacity decimal.Decimal `json:"capacity"`
	Leak     struct {
		Amount decimal.Decimal `json:"amount"`
		Per    string          `json:"per"`
	} `json:"leak"`
	History   bool      `json:"history"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func (d limitDoc) limit() (Limit, error) {
	per, err := time.ParseDuration(d.Leak.Per)
	if err != nil {
		return Limit{}, fmt.Errorf("budgetd: limit %s: leak.per %q: %w", d.Name, d.Leak.Per, err)
	}
	return Limit{Name: d.Name, Capacity: d.Capacity, Leak: Leak{Amount: d.Leak.Amount, Per: per}, History: d.History, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt}, nil
}

// Bucket is the state of one (limit, key) bucket.
type Bucket struct {
	Key       string // set in bucket listings
	Level     decimal.Decimal
	Held      decimal.Decimal
	Remaining decimal.Decimal
	Capacity  decimal.Decimal
	UpdatedAt *time.Time // nil for a bucket never written
}

type bucketDoc struct {
	Key       string          `json:"key"`
	Level     decimal.Decimal `json:"level"`
	Held      decimal.Decimal `json:"held"`
	Remaining decimal.Decimal `json:"remaining"`
	Capacity  decimal.Decimal `json:"capacity"`
	UpdatedAt *time.Time      `json:"updated_at"`
}

func (d bucketDoc) bucket() Bucket {
	return Bucket{Key: d.Key, Level: d.Level, Held: d.Held, Remaining: d.Remaining, Capacity: d.Capacity, UpdatedAt: d.UpdatedAt}
}

// Item is one (limit, key, cost) of a multi-bucket Fillup.
type Item struct {
	Limit string          `json:"limit"`
	Key   string          `json:"key"`
	Cost  decimal.Decimal `json:"cost"`
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
	State           string // active, committed, released or expired
	Amount          decimal.Decimal
	CommittedAmount *decimal.Decimal
	CreatedAt       time.Time
	ExpiresAt       time.Time
	ResolvedAt      *time.Time
}

type reservationDoc struct {
	ID              string           `json:"id"`
	Limit           string           `json:"limit"`
	Key             string           `json:"key"`
	State           string           `json:"state"`
	Amount          decimal.Decimal  `json:"amount"`
	CommittedAmount *decimal.Decimal `json:"committed_amount"`
	CreatedAt       time.Time        `json:"created_at"`
	ExpiresAt       time.Time        `json:"expires_at"`
	ResolvedAt      *time.Time       `json:"resolved_at"`
}

func (d reservationDoc) reservation() Reservation { return Reservation(d) }

// Resolved is the answer to Commit and Release: the hold as it is and the
// bucket's state after the call.
type Resolved struct {
	Reservation Reservation
	Bucket      Bucket
}

// Drained is the answer to a Drain: the amount actually removed and the
// bucket after it.
type Drained struct {
	Removed decimal.Decimal
	Bucket  Bucket
}

// Entry is one history entry.
type Entry struct {
	ID            string
	Time          time.Time
	Event         string // fillup, drain, reserved, committed, released, expired
	Amount        decimal.Decimal
	ReservationID string
	Meta          map[string]string
}

type entryDoc struct {
	ID            string            `json:"id"`
	Time          time.Time         `json:"time"`
	Event         string            `json:"event"`
	Amount        decimal.Decimal   `json:"amount"`
	ReservationID string            `json:"reservation_id"`
	Meta          map[string]string `json:"meta"`
}

type page[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

func (p page[T]) next() string {
	if p.NextCursor == nil {
		return ""
	}
	return *p.NextCursor
}

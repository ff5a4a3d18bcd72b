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
	"github.com/shopspring/decimal"
)

// Limit is a named policy: capacity, leak rate and whether history is kept.
type Limit struct {
	Name       string
	Capacity   decimal.Decimal
	LeakAmount decimal.Decimal
	LeakPer    time.Duration
	History    bool
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// Rule returns the part of the limit that the bucket rule needs.
func (l Limit) Rule() bucket.Limit {
	return bucket.Limit{Capacity: l.Capacity, LeakAmount: l.LeakAmount, LeakPer: l.LeakPer}
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
)

// Entry is one line of a bucket's history. IDs are assigned by the store and
// grow with insertion order within a bucket.
type Entry struct {
	ID            string
	Time          time.Time
	Event         Event
	Amount        decimal.Decimal
	ReservationID string
}

// Idempotency identifies a state-changing request for replay. A zero value
// (empty Key) means the caller sent no Idempotency-Key.
//
// Scope is the route and its target (bucket, reservation or the multi-bucket
// call); Hash is a digest of the request body in canonical form. Two requests
// are the same when Scope, Key and Hash are equal.
type Idempotency struct {
	Scope string
	Key   string
	Hash  string
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
	RefusalExceedsHold = "exceeds_hold"        // commit above the hold without overrun: 422
	RefusalExpired     = "reservation_expired" // commit or release after expiry: 410
	RefusalClosed      = "reservation_closed"  // conflicting second resolution: 409
)

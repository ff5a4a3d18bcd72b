package ledger

import (
	"errors"
	"fmt"
)

// Sentinel errors. Stores and the service wrap them with context; the HTTP
// layer maps them to status codes in one table.
var (
	// ErrLimitNotFound: no limit has that name (404 limit_not_found).
	ErrLimitNotFound = errors.New("limit not found")
	// ErrReservationNotFound: no hold has that id, or the id is malformed
	// (404 reservation_not_found).
	ErrReservationNotFound = errors.New("reservation not found")
	// ErrIdempotencyKeyReused: the Idempotency-Key was used before, in the
	// same scope, with a different body (422 idempotency_key_reused).
	ErrIdempotencyKeyReused = errors.New("idempotency key reused with a different request")
	// ErrIdempotencyInFlight: a request with the same key is still being
	// processed and did not finish in time (409 idempotency_in_flight).
	ErrIdempotencyInFlight = errors.New("a request with this idempotency key is in flight")
	// ErrTooManyHolds: the bucket already has MaxHolds active holds
	// (409 too_many_holds).
	ErrTooManyHolds = errors.New("too many active holds in this bucket")
	// ErrCrossSlot: a multi-bucket call spans buckets that the store cannot
	// change atomically together (Redis Cluster: different hash slots)
	// (400 cross_slot).
	ErrCrossSlot = errors.New("buckets of one call must share a hash slot")
	// ErrLevelOverflow: an overrun commit would push a level past MaxLevel
	// (422 level_overflow).
	ErrLevelOverflow = errors.New("level would exceed the supported maximum")
	// ErrIdempotencyFull: the store keeps as many Idempotency-Key records as
	// it may and refused a new key; nothing changed (503
	// idempotency_store_full). Retry later, or without a key.
	ErrIdempotencyFull = errors.New("the store's idempotency records are full")
	// ErrUnavailable: the store did not answer — it could not be reached,
	// refused or lost the connection, timed out or said it is overloaded —
	// so the outcome of a write may be unknown (503 store_unavailable).
	// Retrying with the same Idempotency-Key is safe. A store error that is
	// not unavailability (a scan or type error: a bug) is not wrapped in it
	// and is answered as a generic 500.
	ErrUnavailable = errors.New("store unavailable")
	// ErrNotServed: the store does not serve this setting of a limit yet
	// (501 not_served); nothing changed.
	ErrNotServed = errors.New("this store does not serve this yet")
)

// InvalidError is bad input: Code is the stable machine-readable code
// (invalid_amount, invalid_key, …), Field names the offending field.
type InvalidError struct {
	Code   Code
	Field  string
	Reason string
}

func (e *InvalidError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return fmt.Sprintf("%s: %s", e.Field, e.Reason)
}

func invalid(code Code, field, format string, args ...any) error {
	return &InvalidError{Code: code, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Refusal is a domain answer about a hold (see the Refusal codes). It is
// stored and replayed for an Idempotency-Key.
type Refusal struct {
	Code        string
	Reservation Reservation
}

func (e *Refusal) Error() string {
	switch e.Code {
	case RefusalExceedsHold:
		return fmt.Sprintf("commit amount exceeds the held amount %s; set overrun to allow it", e.Reservation.Amount)
	case RefusalExpired:
		return fmt.Sprintf("reservation %s expired at %s", e.Reservation.ID, e.Reservation.ExpiresAt.UTC().Format("2006-01-02T15:04:05.000000Z"))
	default:
		return fmt.Sprintf("reservation %s is already %s", e.Reservation.ID, e.Reservation.State)
	}
}

package api

import "strconv"

// Code is budgetd's stable, machine-readable error code of a problem.
type Code string

// The problem codes; docs/api.md gives the status and meaning of each.
const (
	// CodeInvalidAmount: an amount is missing, malformed, negative, above
	// 10^12 or has more than 6 fractional digits (400).
	CodeInvalidAmount Code = "invalid_amount"
	// CodeInvalidKey: a bucket key is empty, too long or not text (400).
	CodeInvalidKey Code = "invalid_key"
	// CodeInvalidName: a limit name is malformed or differs from the path
	// (400).
	CodeInvalidName Code = "invalid_name"
	// CodeInvalidDuration: a duration is malformed or out of range (400).
	CodeInvalidDuration Code = "invalid_duration"
	// CodeInvalidRequest: anything else wrong with the request (400).
	CodeInvalidRequest Code = "invalid_request"
	// CodeCrossSlot: a multi-bucket call spans Redis Cluster slots (400).
	CodeCrossSlot Code = "cross_slot"
	// CodeLimitNotFound: no limit has that name (404).
	CodeLimitNotFound Code = "limit_not_found"
	// CodeReservationNotFound: no hold has that id (404).
	CodeReservationNotFound Code = "reservation_not_found"
	// CodeNotFound: no such path (404).
	CodeNotFound Code = "not_found"
	// CodeMethodNotAllowed: the path does not take the method (405).
	CodeMethodNotAllowed Code = "method_not_allowed"
	// CodeIdempotencyInFlight: a call with the same Idempotency-Key is still
	// running (409).
	CodeIdempotencyInFlight Code = "idempotency_in_flight"
	// CodeTooManyHolds: the bucket has the most active holds allowed (409).
	CodeTooManyHolds Code = "too_many_holds"
	// CodeReservationClosed: the hold was already committed or released
	// (409).
	CodeReservationClosed Code = "reservation_closed"
	// CodeReservationExpired: the hold expired (410).
	CodeReservationExpired Code = "reservation_expired"
	// CodePayloadTooLarge: the body is over 64 KiB (413).
	CodePayloadTooLarge Code = "payload_too_large"
	// CodeExceedsHold: a commit above the hold without overrun (422).
	CodeExceedsHold Code = "exceeds_hold"
	// CodeLevelOverflow: the level would pass budgetd's bound (422).
	CodeLevelOverflow Code = "level_overflow"
	// CodeIdempotencyKeyReused: the Idempotency-Key came with another body
	// (422).
	CodeIdempotencyKeyReused Code = "idempotency_key_reused"
	// CodeUnauthorized: no or a wrong bearer token (401).
	CodeUnauthorized Code = "unauthorized"
	// CodeForbidden: the token may not use this limit or route (403).
	CodeForbidden Code = "forbidden"
	// CodeStoreUnavailable: the store did not answer; retry with the same
	// Idempotency-Key (503).
	CodeStoreUnavailable Code = "store_unavailable"
	// CodeIdempotencyStoreFull: the idempotency store is full (503).
	CodeIdempotencyStoreFull Code = "idempotency_store_full"
	// CodeShuttingDown: budgetd is shutting down (503).
	CodeShuttingDown Code = "shutting_down"
	// CodeInternal: an internal error (500).
	CodeInternal Code = "internal"
	// CodeNotServed: the store does not serve this setting of a limit yet
	// (501); nothing changed.
	CodeNotServed Code = "not_served"
	// CodeOverrideNotFound: the limit has no override of that pattern, or
	// it has expired (404).
	CodeOverrideNotFound Code = "override_not_found"
	// CodeGrantNotFound: the bucket has no active grant of that id (404).
	CodeGrantNotFound Code = "grant_not_found"
)

// Codes lists every problem code, in the order of docs/api.md.
var Codes = []Code{
	CodeInvalidAmount, CodeInvalidKey, CodeInvalidName, CodeInvalidDuration, CodeInvalidRequest, CodeCrossSlot,
	CodeLimitNotFound, CodeReservationNotFound, CodeNotFound, CodeMethodNotAllowed, CodeIdempotencyInFlight,
	CodeTooManyHolds, CodeReservationClosed, CodeReservationExpired, CodePayloadTooLarge, CodeExceedsHold,
	CodeLevelOverflow, CodeIdempotencyKeyReused, CodeUnauthorized, CodeForbidden, CodeStoreUnavailable,
	CodeIdempotencyStoreFull, CodeShuttingDown, CodeInternal, CodeNotServed, CodeOverrideNotFound,
	CodeGrantNotFound,
}

// Problem is an RFC 9457 problem document (application/problem+json): every
// error answer of budgetd. It is also the error the validation of this
// package returns, with Status 0 (nothing was sent).
type Problem struct {
	// Type is "urn:budgetd:problem:" and the code.
	Type string `json:"type"`
	// Title is the HTTP status text.
	Title string `json:"title"`
	// Status is the HTTP status; 0 for input refused before sending.
	Status int `json:"status"`
	// Detail says what is wrong, for a person.
	Detail string `json:"detail"`
	// Code is the stable code.
	Code Code `json:"code"`
	// Field names the offending input of a 400 ("cost", "items[2].key",
	// "period.tz"); "" (absent) otherwise.
	Field string `json:"field,omitempty"`
	// Reservation is the hold a refusal is about (exceeds_hold,
	// reservation_expired, reservation_closed); nil otherwise.
	Reservation *Reservation `json:"reservation,omitempty"`
}

// Error returns the code, field, detail and status in one line.
func (p *Problem) Error() string {
	s := "budgetd: " + string(p.Code)
	if p.Field != "" {
		s += " (" + p.Field + ")"
	}
	if p.Detail != "" {
		s += ": " + p.Detail
	}
	if p.Status != 0 {
		s += " [" + strconv.Itoa(p.Status) + "]"
	}
	return s
}

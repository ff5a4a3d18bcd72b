package ledger

import (
	"context"
	"time"

	"github.com/shopspring/decimal"
)

// Store keeps limits, buckets, holds, history and idempotency records.
//
// Every method that changes state is one atomic step that a database store
// runs in one round trip in the common case: the check, the change, the history
// entries and the idempotency record commit together or not at all. "Now" is
// the store's own clock (truncated to whole microseconds) read once per step;
// a store that sees its clock go backwards must not leak or expire anything
// for it (the rule in package bucket already treats a negative step as zero).
//
// Inputs reach a Store validated: names, keys, amounts (at most 10^12 with 6
// fractional digits), TTLs and costs are in range, and multi-bucket items are
// distinct buckets with their costs summed. The same rules as package bucket
// must hold exactly: Fillup accepts iff bucket.Fillup would, and so on.
//
// Errors: ErrLimitNotFound and ErrReservationNotFound for missing things;
// ErrIdempotencyKeyReused for a key replayed with another body; ErrUnavailable
// (wrapped) only when the store did not answer (unreachable, refused or lost
// connections, its timeout, an overloaded server), after which the outcome of
// a write may be unknown; context errors when ctx ends. Any other failure (a
// scan or type error, an answer of the wrong shape) is a bug and is returned
// unwrapped, to be answered as a generic 500. Domain refusals about holds are not
// errors: they are reported in the outcome's Refusal so they can be replayed.
//
// Meta: the caller's notes on an event (Charge.Meta, the meta argument),
// validated, are stored on the history entry the event adds (fillup, drain,
// reserved, committed, released) and returned by History; an expiry has none.
//
// Idempotency: when idem.Key is not empty, a store first looks up (Scope, Key).
// If a record exists with the same Hash it returns the stored outcome with
// Replayed set and changes nothing; with another Hash it returns
// ErrIdempotencyKeyReused. Otherwise it performs the step and stores its
// outcome (including denials and refusals) in the same atomic step, kept for
// at least IdempotencyTTL. A concurrent duplicate waits for the first to finish
// (bounded) or gets ErrIdempotencyInFlight. Outcomes that end in an error are
// not stored.
//
// All methods are safe for concurrent use, also from many processes sharing
// one database.
type Store interface {
	// PutLimit creates the limit or updates it in place, keeping every
	// bucket's level and holds. It returns the limit as stored, with
	// CreatedAt and UpdatedAt from the store's clock.
	PutLimit(ctx context.Context, l Limit) (Limit, error)
	// GetLimit returns the limit or ErrLimitNotFound.
	GetLimit(ctx context.Context, name string) (Limit, error)
	// ListLimits returns up to n limits ordered by name, with names > after.
	ListLimits(ctx context.Context, after string, n int) ([]Limit, error)
	// DeleteLimit removes the limit with its buckets, holds, history and
	// idempotency records, or returns ErrLimitNotFound.
	DeleteLimit(ctx context.Context, name string) error

	// Inspect returns a bucket's state without writing anything, not even a
	// timestamp or an expiry. A bucket never written has a zero State.
	Inspect(ctx context.Context, ref BucketRef) (Snapshot, error)

	// Fillup charges every item or none: it accepts iff each item's bucket
	// could take its cost now (bucket.Fillup). Items are distinct buckets. The
	// outcome has one ItemOutcome per item, in order. Accepted items of a
	// positive cost add a fillup history entry (when the limit keeps history).
	// When the call is denied, each item whose own bucket could not take its
	// cost adds a denied entry with the cost and meta, when its limit keeps
	// history and records denials; nothing else changes. Each ItemOutcome
	// names the entry written for its bucket.
	Fillup(ctx context.Context, items []Charge, idem Idempotency) (FillupOutcome, error)

	// Drain lowers a bucket's level by amount, clamped at zero
	// (bucket.Drain). A positive amount adds a drain entry with the amount
	// actually removed.
	Drain(ctx context.Context, ref BucketRef, amount decimal.Decimal, idem Idempotency, meta Meta) (DrainOutcome, error)

	// Reserve adds a hold of amount for ttl when it fits (bucket.Reserve)
	// and records a reserved entry; a denial records a denied entry with the
	// amount and meta when the limit keeps history and records denials. The store assigns the hold's id (at most
	// 128 characters of [A-Za-z0-9_-]). It returns ErrTooManyHolds when the
	// bucket has MaxHolds active holds.
	Reserve(ctx context.Context, ref BucketRef, amount decimal.Decimal, ttl time.Duration, idem Idempotency, meta Meta) (ReserveOutcome, error)

	// Commit ends an active hold and adds amount to the level
	// (bucket.Resolve); a null amount means the held amount. Refusals:
	// RefusalExceedsHold (amount > hold and !overrun), RefusalExpired,
	// RefusalClosed (released, or committed with another amount). Committing
	// again with the same amount returns the hold as it is, with no Refusal
	// and no change. An overrun that would lift the level past MaxLevel
	// returns ErrLevelOverflow.
	Commit(ctx context.Context, id string, amount decimal.NullDecimal, overrun bool, idem Idempotency, meta Meta) (ResolveOutcome, error)

	// Release ends an active hold without charging. Refusals:
	// RefusalExpired, RefusalClosed (committed). Releasing again returns the
	// hold as it is.
	Release(ctx context.Context, id string, idem Idempotency, meta Meta) (ResolveOutcome, error)

	// Reservation returns a hold (with the store's clock, so the caller can
	// tell an expired hold) or ErrReservationNotFound. It writes nothing.
	Reservation(ctx context.Context, id string) (Reservation, time.Time, error)

	// History lists a bucket's entries newest first (by Time, then ID),
	// starting after cursor ("" for the first page), up to n. It returns the
	// cursor of the next page, "" at the end. Holds of the bucket that have
	// expired are recorded as expired entries (time = ExpiresAt) before
	// listing. A limit with history off answers an empty list.
	History(ctx context.Context, ref BucketRef, cursor string, n int) ([]Entry, string, error)

	// ListBuckets lists up to n of the limit's buckets that the store holds,
	// ordered by the bytes of their keys, with keys > after ("" for the
	// first page). Each is a Snapshot at the store's clock, so that the
	// caller derives its level, held and remaining with package bucket. A
	// bucket that leaked empty may be listed (level 0) until the store prunes
	// it; a bucket never written is not. It writes nothing, not even an
	// expiry, and may be retried. Returns ErrLimitNotFound when the limit
	// does not exist (a deleted limit's buckets are never listed, also not
	// under a re-created limit of the same name). The work of one call is
	// bounded by n on every store except Redis, which scans the keyspace of
	// every master (docs/architecture.md, "Listing"). Each bucket carries
	// the threshold marks it keeps.
	ListBuckets(ctx context.Context, limit, after string, n int) ([]BucketSnapshot, error)

	// ListHolds returns the bucket's active holds (state active and not
	// expired at the store's clock), at most MaxHolds, oldest first (by
	// CreatedAt, then ID), each as Reservation returns it. A bucket with no
	// holds, or never written, has none. It writes nothing (an expired hold
	// is left for the next write to record) and may be retried. Returns
	// ErrLimitNotFound when the limit does not exist.
	ListHolds(ctx context.Context, ref BucketRef) ([]Reservation, error)

	// Events lists up to n of the events that writes emitted (thresholds
	// crossed and recovered), kept in the same atomic step as the write,
	// after cursor ("" for the oldest kept), in the order the store made
	// them visible: every event once across pages, those of one bucket in
	// the order of their writes. It returns the cursor to continue from:
	// after the last event listed, or cursor itself when there is none yet
	// (a caller polls with it). A cursor older than what the store keeps
	// continues from the oldest event kept; a malformed one is an
	// InvalidError naming "after". It writes nothing a caller can see and
	// may be retried.
	Events(ctx context.Context, cursor string, n int) ([]OutboxEvent, string, error)
	// BucketEvents returns up to n (at most MaxBucketEvents) of the events
	// kept for the bucket ref, newest first, each as Events lists it (same
	// id), once the events visible now are listed by Events too. It writes
	// nothing a caller can see and may be retried.
	BucketEvents(ctx context.Context, ref BucketRef, n int) ([]OutboxEvent, error)

	// Ping reports whether the store answers; it backs /readyz.
	Ping(ctx context.Context) error
	// Close releases the store's resources.
	Close() error
}

// MaxHolds is the most active holds one bucket may have.
const MaxHolds = 1000

// MaxLevel bounds a level: an overrun commit may not lift it further.
var MaxLevel = decimal.New(1, 15)

// BucketSnapshot is one bucket of a listing: its key, a Snapshot of it and
// the threshold marks it keeps (as stored: of whatever list and period its
// last write computed them for).
type BucketSnapshot struct {
	Key string
	Snapshot
	Marks Marks
}

// Charge is one multi-bucket item as a store sees it: a distinct bucket and
// the total cost to add to it.
type Charge struct {
	Bucket BucketRef
	Cost   decimal.Decimal
	Meta   Meta // stored on the charge's history entry
}

// FillupOutcome is what a store reports of a Fillup.
type FillupOutcome struct {
	Accepted bool
	Items    []ItemOutcome
	Replayed bool
}

// ItemOutcome is one bucket of a Fillup: Snapshot is the bucket after the
// call when the call was accepted, and as it was otherwise (ledger.Service
// derives each item's decision from it).
type ItemOutcome struct {
	Snapshot Snapshot
	// EntryID is the history entry the call wrote for this bucket (fillup,
	// or denied with RecordDenials), "" when none was written.
	EntryID string
}

// DrainOutcome is what a store reports of a Drain.
type DrainOutcome struct {
	Removed  decimal.Decimal
	Snapshot Snapshot
	// EntryID is the drain's history entry, "" when none was written.
	EntryID  string
	Replayed bool
}

// ReserveOutcome is what a store reports of a Reserve. Reservation is set
// only when Accepted.
type ReserveOutcome struct {
	Accepted    bool
	Reservation Reservation
	Snapshot    Snapshot
	// EntryID is the history entry the call wrote (reserved, or denied
	// with RecordDenials), "" when none was written.
	EntryID  string
	Replayed bool
}

// ResolveOutcome is what a store reports of a Commit or Release: the hold as
// it is after the call, the bucket after it, and a Refusal code ("" when the
// call succeeded or repeated an identical resolution).
type ResolveOutcome struct {
	Reservation Reservation
	Snapshot    Snapshot
	Refusal     string
	Replayed    bool
}

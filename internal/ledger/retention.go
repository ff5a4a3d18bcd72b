package ledger

import "time"

// What every store keeps, and for how long: declared here once and consumed
// by each store (the memory store's sweeps, the SQL stores' pruners and
// generated policy functions, the Redis library's constants), so that a
// change of one is one edit.
const (
	// HistoryRetention is how long a history entry is kept at least, unless
	// HistoryPerBucket pushes it out.
	HistoryRetention = 30 * 24 * time.Hour
	// HistoryPerBucket is the most history entries a bucket keeps; older
	// ones are dropped first.
	HistoryPerBucket = 10_000
	// ClosedHoldRetention is how long a resolved or expired hold stays
	// readable.
	ClosedHoldRetention = 24 * time.Hour
	// IdempotencyRetention is how long a store keeps an idempotency record:
	// an hour past IdempotencyTTL.
	IdempotencyRetention = IdempotencyTTL + time.Hour
	// EventRetention is how long a threshold event is kept.
	EventRetention = 7 * 24 * time.Hour
)

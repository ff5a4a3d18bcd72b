package ledger

import (
	"context"
	"time"
)

// LeaseStore is a Store that keeps named leases: one holder at a time, for
// a TTL on the store's clock, each with a durable cursor that only its
// current holder may move. Several budgetd instances sharing one store use
// the lease "webhook" so that one of them at a time delivers the events of
// the outbox (internal/webhook), from where the last holder got to.
//
// Every method is one atomic step on the store (a compare of the holder
// and the change together) and may be retried; ErrUnavailable (wrapped)
// when the store did not answer.
type LeaseStore interface {
	Store
	// AcquireLease makes holder the holder of the lease name for ttl from
	// the store's clock when the lease is free, expired or already
	// holder's (a renewal). It reports whether holder holds it now, and the
	// lease's cursor ("" before any was stored) either way.
	AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (held bool, cursor string, err error)
	// AdvanceLease stores cursor as the lease's cursor when holder holds the
	// lease and it has not expired; it reports whether it did.
	AdvanceLease(ctx context.Context, name, holder, cursor string) (bool, error)
	// ReleaseLease ends holder's hold on the lease now, keeping its cursor,
	// so another holder may take it at once; nothing when holder does not
	// hold it.
	ReleaseLease(ctx context.Context, name, holder string) error
}

// LeasesOf returns the LeaseStore that st is or wraps (through Unwrap
// methods), and false when there is none.
func LeasesOf(st Store) (LeaseStore, bool) {
	return As[LeaseStore](st)
}

package ledger

import (
	"context"
	"fmt"
	"time"
)

// LimitCounts is how many buckets a limit has and how many active holds
// they have, at one instant of the store.
type LimitCounts struct {
	// Buckets counts the buckets a full listing of the limit
	// (ListBuckets, page after page) would show at At: the buckets the
	// store holds, a bucket that leaked empty included until the store
	// prunes it, a bucket never written not.
	Buckets int64
	// ActiveHolds counts the limit's holds that are active at At: state
	// active and not expired (ExpiresAt after At), as ListHolds lists them
	// bucket by bucket.
	ActiveHolds int64
	// At is the store's clock the counts were read at.
	At time.Time
}

// Counter is implemented by a store that counts a limit's buckets and
// active holds in one pass of its own (a COUNT in SQL, one pass over the
// shards in memory, one SCAN in Redis), without a snapshot of every bucket.
// A store that is not one answers the count with ErrNotServed.
type Counter interface {
	// CountBuckets returns the limit's counts at the store's clock. It
	// writes nothing (an expired hold is left for the next write to
	// record) and may be retried. Returns ErrLimitNotFound when the limit
	// does not exist (a deleted limit's buckets and holds are never
	// counted, also not under a re-created limit of the same name), and
	// ErrUnavailable as any read.
	CountBuckets(ctx context.Context, limit string) (LimitCounts, error)
}

// CounterOf returns the Counter that st is or wraps (through Unwrap
// methods), and false when there is none.
func CounterOf(st Store) (Counter, bool) {
	return As[Counter](st)
}

// Counts returns the exact number of the limit's buckets and of their
// active holds, at the store's clock. It writes nothing.
func (s *Service) Counts(ctx context.Context, limit string) (LimitCounts, error) {
	if err := ValidateName(limit); err != nil {
		return LimitCounts{}, ErrLimitNotFound // as GetLimit: a name that cannot exist is not found
	}
	c, ok := CounterOf(s.store)
	if !ok {
		return LimitCounts{}, fmt.Errorf("counts: %w", ErrNotServed)
	}
	return c.CountBuckets(ctx, limit)
}

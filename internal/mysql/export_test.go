package mysql

import (
	"context"
	"net"
	"time"
)

// WithDial makes the store's connections with dial (a test counts the
// round trips on them).
func WithDial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) Option {
	return func(s *Store) { s.dial = dial }
}

// AtSchemaVersion makes Open apply the embedded migrations up to version v
// only, until restore is called: the upgrade test builds a database as an
// older budgetd left it. Not for parallel tests.
func AtSchemaVersion(v int) (restore func()) {
	all := schema
	schema = func() ([]migration, error) {
		ms, err := all()
		var out []migration
		for _, m := range ms {
			if m.version <= v {
				out = append(out, m)
			}
		}
		return out, err
	}
	return func() { schema = all }
}

// PruneStatements are the pruner's scans, by name, for EXPLAIN.
var PruneStatements = map[string]string{
	"expired holds": pruneExpiredHolds,
	"closed holds":  pruneClosedHolds,
	"history":       pruneHistory,
	"idempotency":   pruneIdempotency,
	"events":        pruneEvents,
}

// WithCacheSkew sets how far behind the database's clock a cached decision
// may be (cacheSkew): a test that counts round trips makes it long, so that
// a stall of a loaded machine does not fail the clock guard.
func WithCacheSkew(d time.Duration) Option { return func(s *Store) { s.cache.skew = d } }

// WithCacheCool sets how long a bucket whose cached write failed is not
// cached again (cacheCool).
func WithCacheCool(d time.Duration) Option { return func(s *Store) { s.cache.cool = d } }

// ShiftCacheClock moves the cache's estimate of the database's clock by d.
func ShiftCacheClock(s *Store, d time.Duration) {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	s.cache.clockUS += d.Microseconds()
}

// GroupCommitLoad returns the group commit's batches at the database and
// calls queued (zeros when it is off).
func GroupCommitLoad(s *Store) (inFlight, queued int) {
	if s.batcher == nil {
		return 0, 0
	}
	return s.batcher.Load()
}

// WithGroupSlots sets how many batches the group commit has at the database
// at once (groupSlots).
func WithGroupSlots(n int) Option { return func(s *Store) { s.groupSlots = n } }

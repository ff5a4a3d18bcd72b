package mysql

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
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

// WithSeedPage sets how many rows one read of seedKnown takes
// (knownSeedPage): a test pages through a few buckets.
func WithSeedPage(n int) Option { return func(s *Store) { s.seedRows = n } }

// WithGroupSlots sets how many batches the group commit has at the database
// at once (groupSlots).
func WithGroupSlots(n int) Option { return func(s *Store) { s.groupSlots = n } }

// FillupBatch decides single-bucket Fillups, charges[j] with idems[j], as
// one batch of the group commit (runGroup), whatever batches the batcher
// would have formed, and answers each as Fillup does: a call the batch
// sends back (errMiss) decides again alone. kept is how many calls were
// decided and written as one: the calls it held (the others, replays or
// refusals of a key of the batch and calls of a missing limit, are
// answered alone after it).
func FillupBatch(ctx context.Context, s *Store, charges []ledger.Charge, idems []ledger.Idempotency) (outs []ledger.FillupOutcome, errs []error, kept int) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	outs = make([]ledger.FillupOutcome, len(charges))
	errs = make([]error, len(charges))
	calls := make([]*groupCall, len(charges))
	for j := range charges {
		calls[j] = &groupCall{ctx: ctx, ref: charges[j].Bucket, fn: fillupDecision(charges[j:j+1], idems[j], &outs[j]), idem: idems[j]}
	}
	_, _, grouped := s.GroupCommitStats()
	s.runGroup(calls)
	_, _, after := s.GroupCommitStats()
	for j, c := range calls {
		err := c.err
		if errors.Is(err, errMiss) {
			err = s.decide(ctx, []ledger.BucketRef{c.ref}, c.fn, withIdem(c.idem))
		}
		if err := replayed(err, &outs[j]); err != nil {
			outs[j], errs[j] = ledger.FillupOutcome{}, err
		}
	}
	return outs, errs, int(after - grouped)
}

// WithoutWarm makes Open keep no bucket rows in the decision cache (warm):
// a test of what a cold cache does on a database with rows.
func WithoutWarm() Option { return func(s *Store) { s.warmOff = true } }

// CacheLen returns how many entries (buckets and limits) the decision
// cache holds.
func CacheLen(s *Store) int {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	return s.cache.t.n
}

package storemetrics

import (
	"context"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
)

// The optional interfaces of the listings, timed when the wrapped store
// serves them (ledger.As looks through the wrapper when it does not). A
// call that reaches one the wrapped store lacks answers ErrNotServed.

var (
	_ ledger.Forwarder     = (*Store)(nil)
	_ ledger.Counter       = (*Store)(nil)
	_ ledger.RankedLister  = (*Store)(nil)
	_ ledger.MarkedLister  = (*Store)(nil)
	_ ledger.BucketScanner = (*Store)(nil)
)

// ForwardsOptional marks Store as a ledger.Forwarder.
func (s *Store) ForwardsOptional() {}

// CountBuckets times the wrapped store's CountBuckets.
func (s *Store) CountBuckets(ctx context.Context, limit string) (ledger.LimitCounts, error) {
	c, err := ledger.Forwarded[ledger.Counter](s, "count buckets")
	if err != nil {
		return ledger.LimitCounts{}, err
	}
	start := time.Now()
	out, err := c.CountBuckets(ctx, limit)
	s.observe("count_buckets", start, err)
	return out, err
}

// RankBuckets times the wrapped store's RankBuckets.
func (s *Store) RankBuckets(ctx context.Context, limit string, q ledger.RankQuery) (ledger.Ranking, error) {
	r, err := ledger.Forwarded[ledger.RankedLister](s, "rank buckets")
	if err != nil {
		return ledger.Ranking{}, err
	}
	start := time.Now()
	out, err := r.RankBuckets(ctx, limit, q)
	s.observe("rank_buckets", start, err)
	return out, err
}

// ReadBuckets times the wrapped store's ReadBuckets.
func (s *Store) ReadBuckets(ctx context.Context, limit string, keys []string, now time.Time) ([]ledger.BucketSnapshot, error) {
	r, err := ledger.Forwarded[ledger.RankedLister](s, "read buckets")
	if err != nil {
		return nil, err
	}
	start := time.Now()
	out, err := r.ReadBuckets(ctx, limit, keys, now)
	s.observe("read_buckets", start, err)
	return out, err
}

// ListMarked times the wrapped store's ListMarked.
func (s *Store) ListMarked(ctx context.Context, limit, after string, n int, sig uint32, bit uint8) ([]ledger.BucketSnapshot, error) {
	m, err := ledger.Forwarded[ledger.MarkedLister](s, "list marked")
	if err != nil {
		return nil, err
	}
	start := time.Now()
	out, err := m.ListMarked(ctx, limit, after, n, sig, bit)
	s.observe("list_marked", start, err)
	return out, err
}

// ScanBuckets times the wrapped store's ScanBuckets, fn's work included:
// the store may read while fn runs.
func (s *Store) ScanBuckets(ctx context.Context, limit string, fn func(ledger.BucketSnapshot) error) error {
	sc, err := ledger.Forwarded[ledger.BucketScanner](s, "scan buckets")
	if err != nil {
		return err
	}
	start := time.Now()
	err = sc.ScanBuckets(ctx, limit, fn)
	s.observe("scan_buckets", start, err)
	return err
}

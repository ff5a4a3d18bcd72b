package memory

import (
	"context"

	"github.com/budgetd/budgetd/internal/ledger"
)

var _ ledger.Counter = (*Store)(nil)

// CountBuckets counts the limit's buckets and their active holds at the
// store's clock (ledger.Counter): one pass over every bucket of the store,
// as a listing page makes, one shard's lock at a time, so O(buckets) time
// and no memory. Each bucket's holds are checked as ListHolds checks them.
func (s *Store) CountBuckets(_ context.Context, limit string) (ledger.LimitCounts, error) {
	s.limitsMu.RLock()
	defer s.limitsMu.RUnlock()
	if _, err := s.limit(limit); err != nil {
		return ledger.LimitCounts{}, err
	}
	out := ledger.LimitCounts{At: s.clock()}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for ref, b := range sh.buckets {
			if ref.Limit != limit {
				continue
			}
			out.Buckets++
			for _, x := range b.holds() {
				if h := sh.holds[x.ID]; h != nil && h.res.State == ledger.Active && out.At.Before(h.res.ExpiresAt) {
					out.ActiveHolds++
				}
			}
		}
		sh.mu.Unlock()
	}
	return out, nil
}

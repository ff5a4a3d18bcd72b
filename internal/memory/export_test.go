package memory

import "github.com/budgetd/budgetd/internal/ledger"

// IdempotencyUse reports how many idempotency records s keeps and their
// estimated bytes.
func (s *Store) IdempotencyUse() (records int, bytes int64) {
	s.idem.mu.Lock()
	defer s.idem.mu.Unlock()
	return len(s.idem.records), s.idem.bytes
}

// Sweep prunes every shard as the store does after many writes.
func (s *Store) Sweep() {
	s.limitsMu.RLock()
	defer s.limitsMu.RUnlock()
	now := s.clock()
	for i := range s.shards {
		s.shards[i].mu.Lock()
		s.sweep(&s.shards[i], now)
		s.shards[i].mu.Unlock()
	}
}

// Buckets is how many buckets the store holds.
func (s *Store) Buckets() int {
	n := 0
	for i := range s.shards {
		s.shards[i].mu.Lock()
		n += len(s.shards[i].buckets)
		s.shards[i].mu.Unlock()
	}
	return n
}

// GrantedBuckets is how many buckets hold grants, expired ones included.
func (s *Store) GrantedBuckets() int {
	s.limitsMu.RLock()
	defer s.limitsMu.RUnlock()
	return len(s.grants)
}

// Lean reports whether the bucket of limit and key exists and keeps
// nothing beyond its level and time (no bucketMore).
func (s *Store) Lean(limit, key string) bool {
	ref := ledger.BucketRef{Limit: limit, Key: key}
	sh := &s.shards[s.shardOf(ref)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b := sh.buckets[ref]
	return b != nil && b.more == nil
}

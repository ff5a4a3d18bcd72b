package memory

import (
	"context"
	"slices"
	"strings"

	"github.com/budgetd/budgetd/internal/ledger"
)

// ListBuckets lists up to n of the limit's buckets with keys after after, in
// byte order of key. It visits every bucket of the store, so a page costs
// O(buckets) time under each shard's lock in turn, and O(n) memory.
func (s *Store) ListBuckets(_ context.Context, limit, after string, n int) ([]ledger.BucketSnapshot, error) {
	s.limitsMu.RLock()
	defer s.limitsMu.RUnlock()
	l, err := s.limit(limit)
	if err != nil {
		return nil, err
	}
	now := s.clock()
	var out []ledger.BucketSnapshot
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for ref, b := range sh.buckets {
			if ref.Limit != limit || ref.Key <= after {
				continue
			}
			if len(out) == n && ref.Key >= out[n-1].Key {
				continue
			}
			out = insertSorted(out, ledger.BucketSnapshot{Key: ref.Key, Snapshot: snapshot(s.terms(l, ref.Key, b, now), b, now)}, n)
		}
		sh.mu.Unlock()
	}
	return out, nil
}

// insertSorted inserts b into out, kept sorted by key and at most n long.
func insertSorted(out []ledger.BucketSnapshot, b ledger.BucketSnapshot, n int) []ledger.BucketSnapshot {
	i, _ := slices.BinarySearchFunc(out, b.Key, func(e ledger.BucketSnapshot, k string) int { return strings.Compare(e.Key, k) })
	out = slices.Insert(out, i, b)
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// ListHolds returns the bucket's holds that are active now, oldest first.
func (s *Store) ListHolds(_ context.Context, ref ledger.BucketRef) ([]ledger.Reservation, error) {
	s.limitsMu.RLock()
	defer s.limitsMu.RUnlock()
	if _, err := s.limit(ref.Limit); err != nil {
		return nil, err
	}
	now := s.clock()
	sh := &s.shards[s.shardOf(ref)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	out := []ledger.Reservation{}
	if b := sh.buckets[ref]; b != nil {
		for _, x := range b.holds() {
			if h := sh.holds[x.ID]; h != nil && h.res.State == ledger.Active && now.Before(h.res.ExpiresAt) {
				out = append(out, h.res)
			}
		}
	}
	slices.SortFunc(out, compareHolds)
	return out, nil
}

// compareHolds orders holds by creation time, then id.
func compareHolds(a, b ledger.Reservation) int {
	if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

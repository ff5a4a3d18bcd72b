package memory

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
)

// ListBuckets lists up to n of the limit's buckets with keys after after, in
// byte order of key. It visits every bucket of the store, so a page costs
// O(buckets) time under each shard's lock in turn, and O(n) memory.
func (s *Store) ListBuckets(_ context.Context, limit, after string, n int) ([]ledger.BucketSnapshot, error) {
	return s.listBuckets(limit, after, n, nil)
}

// ListMarked is ListBuckets of the buckets whose marks have signature sig
// and bit set: the same one pass over every bucket, that reads the terms
// of the marked ones only.
func (s *Store) ListMarked(_ context.Context, limit, after string, n int, sig uint32, bit uint8) ([]ledger.BucketSnapshot, error) {
	return s.listBuckets(limit, after, n, func(m ledger.Marks) bool { return m.Sig == sig && m.Above&bit == bit })
}

// listBuckets is ListBuckets of the buckets whose marks keep accepts (nil:
// all).
func (s *Store) listBuckets(limit, after string, n int, keep func(ledger.Marks) bool) ([]ledger.BucketSnapshot, error) {
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
			if ref.Limit != limit || ref.Key <= after || keep != nil && !keep(b.marks()) {
				continue
			}
			if len(out) == n && ref.Key >= out[n-1].Key {
				continue
			}
			out = insertSorted(out, s.listed(l, ref.Key, b, now), n)
		}
		sh.mu.Unlock()
	}
	return out, nil
}

// ScanBuckets calls fn for every bucket of the limit, one shard at a time
// under its lock: one pass over every bucket of the store.
func (s *Store) ScanBuckets(_ context.Context, limit string, fn func(ledger.BucketSnapshot) error) error {
	s.limitsMu.RLock()
	defer s.limitsMu.RUnlock()
	l, err := s.limit(limit)
	if err != nil {
		return err
	}
	now := s.clock()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for ref, b := range sh.buckets {
			if ref.Limit == limit {
				if err = fn(s.listed(l, ref.Key, b, now)); err != nil {
					break
				}
			}
		}
		sh.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// listed is bucket b of limit l as a listing has it at now.
func (s *Store) listed(l ledger.Limit, key string, b *bucketRec, now time.Time) ledger.BucketSnapshot {
	return ledger.BucketSnapshot{Key: key, Snapshot: snapshot(s.terms(l, key, b, now), b, now), Marks: b.marks()}
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

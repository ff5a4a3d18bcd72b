package redis

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/budgetd/budgetd/internal/ledger"
	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

// Listing has no index to walk in key order: a bucket's keys live in its own
// hash slot, and an index of a limit's keys would sit in one slot that no
// bucket script could update atomically in Redis Cluster. So ListBuckets
// SCANs every master for the limit generation's bucket keys (P:<g>:b:*),
// keeps the n smallest after the cursor, and then reads those n buckets with
// the read-only inspect script (pipelined by the batcher). A page costs one
// SCAN of each master's whole keyspace (about keys/scanCount round trips per
// master) and n script calls, with O(n) memory in this process.

// scanCount is the COUNT hint of each SCAN call.
const scanCount = 1000

// listConcurrency bounds the script calls of one listing in flight at once.
const listConcurrency = 32

// ListBuckets lists up to n of the limit's buckets with keys after after, in
// byte order of key.
func (s *Store) ListBuckets(ctx context.Context, limit, after string, n int) ([]ledger.BucketSnapshot, error) {
	cl, err := s.fetchLimit(ctx, limit)
	if err != nil {
		return nil, err
	}
	base := s.k.gen(cl.gen) + ":b:"
	var (
		mu   sync.Mutex
		keys []string // sorted, at most n
	)
	err = s.eachNode(ctx, func(ctx context.Context, c goredis.Cmdable) error {
		var cursor uint64
		for {
			ks, next, err := c.Scan(ctx, cursor, base+"*", scanCount).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			for _, rk := range ks {
				key, ok := decodeKey(strings.TrimPrefix(rk, base))
				if !ok || key <= after || (len(keys) == n && key >= keys[n-1]) {
					continue
				}
				i, found := slices.BinarySearch(keys, key)
				if found {
					continue // SCAN may return a key twice
				}
				keys = slices.Insert(keys, i, key)
				if len(keys) > n {
					keys = keys[:n]
				}
			}
			mu.Unlock()
			if next == 0 {
				return nil
			}
			cursor = next
		}
	})
	if err != nil {
		return nil, s.fail(ctx, "list buckets", err)
	}
	out := make([]ledger.BucketSnapshot, len(keys))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(listConcurrency)
	for i, key := range keys {
		g.Go(func() error {
			sn, err := s.Inspect(gctx, ledger.BucketRef{Limit: limit, Key: key})
			out[i] = ledger.BucketSnapshot{Key: key, Snapshot: sn}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// ListHolds returns the bucket's holds that are active at the Redis clock,
// oldest first: the hold ids are the "h<id>" fields of the bucket's hash, and
// each hold is read as Reservation reads it.
func (s *Store) ListHolds(ctx context.Context, ref ledger.BucketRef) ([]ledger.Reservation, error) {
	cl, err := s.fetchLimit(ctx, ref.Limit)
	if err != nil {
		return nil, err
	}
	fields, err := s.client.HGetAll(ctx, s.k.bucket(cl.gen, ref.Key)).Result()
	if err != nil {
		return nil, s.fail(ctx, "list holds", err)
	}
	var ids []string
	for f := range fields {
		if id, ok := strings.CutPrefix(f, "h"); ok {
			ids = append(ids, id)
		}
	}
	found := make([]*ledger.Reservation, len(ids))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(listConcurrency)
	for i, id := range ids {
		g.Go(func() error {
			r, now, err := s.Reservation(gctx, id)
			switch {
			case errors.Is(err, ledger.ErrReservationNotFound):
				return nil // resolved and gone meanwhile
			case err != nil:
				return err
			case r.StateAt(now) == ledger.Active && r.Bucket == ref:
				found[i] = &r
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := []ledger.Reservation{}
	for _, r := range found {
		if r != nil {
			out = append(out, *r)
		}
	}
	slices.SortFunc(out, func(a, b ledger.Reservation) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

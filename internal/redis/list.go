package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
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
// SCAN of each master's whole keyspace (about keys/1000 round trips per
// master) and n script calls, with O(n) memory in this process.

// listConcurrency bounds the script calls of one listing in flight at once.
const listConcurrency = 32

// ListBuckets lists up to n of the limit's buckets with keys after after, in
// byte order of key.
func (s *Store) ListBuckets(ctx context.Context, limit, after string, n int) ([]ledger.BucketSnapshot, error) {
	cl, err := s.fetchLimit(ctx, limit)
	if err != nil {
		return nil, err
	}
	var (
		mu   sync.Mutex
		keys []string // sorted, at most n
	)
	err = s.bucketKeys(ctx, cl.gen, func(ks []string) error {
		mu.Lock()
		defer mu.Unlock()
		for _, key := range ks {
			if key <= after || (len(keys) == n && key >= keys[n-1]) {
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
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.readBuckets(ctx, limit, cl.gen, keys)
}

// readBuckets reads the buckets of keys as a listing has them,
// listConcurrency at a time.
func (s *Store) readBuckets(ctx context.Context, limit string, gen int64, keys []string) ([]ledger.BucketSnapshot, error) {
	out := make([]ledger.BucketSnapshot, len(keys))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(listConcurrency)
	for i, key := range keys {
		g.Go(func() (err error) {
			out[i], err = s.listed(gctx, limit, gen, key)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// ScanBuckets calls fn for every bucket of the limit: one SCAN of every
// master, each batch of keys it returns read as ListBuckets reads a page
// (SCAN may return a key twice, and fn then sees it twice). fn is called
// from one goroutine at a time.
func (s *Store) ScanBuckets(ctx context.Context, limit string, fn func(ledger.BucketSnapshot) error) error {
	cl, err := s.fetchLimit(ctx, limit)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	return s.bucketKeys(ctx, cl.gen, func(ks []string) error {
		out, err := s.readBuckets(ctx, limit, cl.gen, ks)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, b := range out {
			if err := fn(b); err != nil {
				return err
			}
		}
		return nil
	})
}

// bucketKeys calls fn with the bucket keys of each SCAN reply for the
// bucket keys of limit generation gen, concurrently across masters.
func (s *Store) bucketKeys(ctx context.Context, gen int64, fn func(keys []string) error) error {
	base := s.k.gen(gen) + ":b:"
	err := s.scanKeys(ctx, base+"*", func(_ context.Context, _ goredis.Cmdable, ks []string) error {
		keys := make([]string, 0, len(ks))
		for _, rk := range ks {
			if key, ok := decodeKey(strings.TrimPrefix(rk, base)); ok {
				keys = append(keys, key)
			}
		}
		return fn(keys)
	})
	if err != nil {
		return s.fail(ctx, "list buckets", err)
	}
	return nil
}

// listed reads one bucket of a listing: its snapshot (the read-only inspect
// script) and its marks.
func (s *Store) listed(ctx context.Context, limit string, gen int64, key string) (ledger.BucketSnapshot, error) {
	sn, err := s.Inspect(ctx, ledger.BucketRef{Limit: limit, Key: key})
	if err != nil {
		return ledger.BucketSnapshot{}, err
	}
	m, err := s.marks(ctx, s.k.bucket(gen, key))
	return ledger.BucketSnapshot{Key: key, Snapshot: sn, Marks: m}, err
}

// marks reads the threshold marks a bucket's hash keeps (budgetd.lua,
// marks): the field t = "<sig>:<above>:<period>", or the fields ts, ta and
// tp of a bucket last marked by an older version, which win. It is read
// after the bucket's snapshot, not in the same script: a write in between
// may show marks newer than the snapshot, as the next listing would.
func (s *Store) marks(ctx context.Context, bk string) (ledger.Marks, error) {
	v, err := s.client.HMGet(ctx, bk, "t", "ts", "ta", "tp").Result()
	if err != nil {
		return ledger.Marks{}, s.fail(ctx, "list buckets", err)
	}
	str := func(i int) string { x, _ := v[i].(string); return x }
	sig, above, period := str(1), str(2), str(3)
	if sig == "" && above == "" && period == "" {
		var ok bool
		if sig, above, ok = strings.Cut(str(0), ":"); !ok {
			return ledger.Marks{}, nil
		}
		above, period, _ = strings.Cut(above, ":")
	}
	num := func(x string, bits int) (uint64, error) {
		if x == "" {
			return 0, nil
		}
		return strconv.ParseUint(x, 10, bits)
	}
	sg, err1 := num(sig, 32)
	ab, err2 := num(above, 8)
	pd, err3 := num(period, 63)
	if err := errors.Join(err1, err2, err3); err != nil {
		return ledger.Marks{}, fmt.Errorf("redis: marks of %q: %w", bk, err)
	}
	return ledger.Marks{Sig: uint32(sg), Above: uint8(ab), Period: int64(pd)}, nil
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

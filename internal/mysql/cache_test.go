package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/mysql"
)

// countingConn counts the writes on a connection: the driver sends a
// command (one multi-statement query included) in one write and waits for
// its answer, so writes are round trips.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// openCounted opens a store with the decision cache whose round trips
// writes counts.
func openCounted(t *testing.T, url string, writes *atomic.Int64, opts ...mysql.Option) *mysql.Store {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, writes: writes}, nil
	}
	return open(t, url, append([]mysql.Option{mysql.WithDial(dial), mysql.WithCache(mysql.DefaultCacheEntries, mysql.DefaultCacheBytes), mysql.WithPruneInterval(0)}, opts...)...)
}

func charge(ref ledger.BucketRef, cost int64) []ledger.Charge {
	return []ledger.Charge{{Bucket: ref, Cost: decimal.NewFromInt(cost)}}
}

// TestCacheOneRoundTrip: with the decision cache, a Fillup or a Drain of a
// bucket this store wrote last is one round trip, on the database's clock;
// the first (a miss) is two, the read and the write. A bucket another
// instance wrote meanwhile, a limit changed or deleted, an override or a
// grant added elsewhere are never decided on stale rows: the cached write
// fails and the decision runs again on a read, with the new terms.
func TestCacheOneRoundTrip(t *testing.T) {
	for _, iso := range []string{mysql.RepeatableRead, mysql.ReadCommitted} {
		t.Run(iso, func(t *testing.T) {
			url := newDatabase(t)
			var writes atomic.Int64
			// A long skew: a stall of a loaded machine between the decision
			// and its write must not fail the clock guard here (that guard is
			// TestCacheClockGuard's); no cooling after a conflict (that is
			// TestCacheCools's).
			s := openCounted(t, url, &writes, mysql.WithIsolation(iso), mysql.WithCacheSkew(time.Minute), mysql.WithCacheCool(0))
			other := ledger.NewService(open(t, url, mysql.WithIsolation(iso), mysql.WithPruneInterval(0), mysql.WithCache(0, 0)))
			ctx := context.Background()
			spec := ledger.LimitSpec{Capacity: decimal.NewFromInt(100), Period: &ledger.Period{Every: "year"}, History: true}
			if _, err := other.PutLimit(ctx, "l", spec); err != nil {
				t.Fatal(err)
			}
			ref := ledger.BucketRef{Limit: "l", Key: "k"}
			trips := func(what string, want int64, fn func() error) {
				t.Helper()
				w0 := writes.Load()
				if err := fn(); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if got := writes.Load() - w0; got != want {
					t.Errorf("%s: %d round trips, want %d", what, got, want)
				}
			}
			fillup := func(cost int64, accepted bool, level string) func() error {
				return func() error {
					out, err := s.Fillup(ctx, charge(ref, cost), ledger.Idempotency{})
					if err != nil {
						return err
					}
					if out.Accepted != accepted || out.Items[0].Snapshot.State.Level.String() != level {
						return fmt.Errorf("accepted %v at level %s, want %v at %s", out.Accepted, out.Items[0].Snapshot.State.Level, accepted, level)
					}
					return nil
				}
			}
			// Warm the pool's one connection up first.
			if err := s.Ping(ctx); err != nil {
				t.Fatal(err)
			}
			trips("first Fillup (a miss)", 2, fillup(1, true, "1"))
			for i := 2; i <= 5; i++ {
				trips("Fillup of a bucket it wrote last", 1, fillup(1, true, fmt.Sprint(i)))
			}
			trips("Drain of a bucket it wrote last", 1, func() error {
				out, err := s.Drain(ctx, ref, decimal.NewFromInt(2), ledger.Idempotency{}, nil)
				if err == nil && out.Snapshot.State.Level.String() != "3" {
					err = fmt.Errorf("level %s after the drain, want 3", out.Snapshot.State.Level)
				}
				return err
			})
			// A denial writes nothing, so it reads: a denial must be of the
			// row as it is.
			trips("denied Fillup", 1, fillup(1000, false, "3"))
			// Written by another instance: the cached write fails (and is
			// rolled back), then the read and the write.
			if _, err := other.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: decimal.NewFromInt(10)}}, ledger.Idempotency{}); err != nil {
				t.Fatal(err)
			}
			trips("Fillup after another instance's", 4, fillup(1, true, "14"))
			trips("and the next", 1, fillup(1, true, "15"))
			entries, _, err := s.History(ctx, ref, "", 100)
			if err != nil || len(entries) != 9 || entries[0].ID != "9" {
				t.Fatalf("history: %d entries, newest %+v, %v; want 9, the newest 9", len(entries), entries[0], err)
			}

			// The terms changed elsewhere: never decided on the cached ones.
			spec.Capacity = decimal.NewFromInt(16)
			if _, err := other.PutLimit(ctx, "l", spec); err != nil {
				t.Fatal(err)
			}
			// A cached decision would accept: the write fails, is rolled
			// back and the read denies (and writes nothing).
			trips("Fillup over a capacity lowered elsewhere", 3, fillup(2, false, "15"))
			trips("Fillup within it (a miss)", 2, fillup(1, true, "16"))
			override := func(capacity int64) {
				t.Helper()
				if _, err := other.PutOverride(ctx, "l", ledger.Override{Pattern: "k", Capacity: decimal.NewNullDecimal(decimal.NewFromInt(capacity))}); err != nil {
					t.Fatal(err)
				}
			}
			override(30)
			// A cached decision would deny: a denial is made on a read. A
			// read that finds the limit's overrides changed since this
			// Store's copy also reads the rows changed since (one more).
			trips("Fillup under an override raising the capacity", 3, fillup(2, true, "18"))
			trips("and the next", 1, fillup(1, true, "19"))
			override(19)
			trips("Fillup under an override lowering it", 4, fillup(1, false, "19"))
			trips("Drain (a miss: the failed write forgot the row)", 2, func() error {
				_, err := s.Drain(ctx, ref, decimal.NewFromInt(1), ledger.Idempotency{}, nil)
				return err
			})
			if _, err := other.AddGrant(ctx, ref, decimal.NewFromInt(5), time.Time{}, ledger.Idempotency{}, nil); err != nil {
				t.Fatal(err)
			}
			trips("Fillup with a grant added elsewhere", 4, fillup(1, true, "19"))
			trips("and the next", 1, fillup(5, true, "24"))
			if err := other.DeleteLimit(ctx, "l"); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Fillup(ctx, charge(ref, 1), ledger.Idempotency{}); !errors.Is(err, ledger.ErrLimitNotFound) {
				t.Fatalf("Fillup of a deleted limit: %v, want ErrLimitNotFound", err)
			}
			if hits, misses, conflicts := s.CacheStats(); hits == 0 || misses == 0 || conflicts != 4 {
				t.Errorf("cache: %d hits, %d misses, %d conflicts; want some, some and 4", hits, misses, conflicts)
			}
		})
	}
}

// TestCacheClockGuard: a cached decision is kept only when its "now", the
// cache's estimate of the database's clock, is neither after the database's
// clock nor more than the skew behind it. With the estimate an hour ahead,
// then an hour behind, the cached write fails and the decision runs again on
// a read, at the database's clock (the test server's, on this machine); the
// bucket, unchanged, is cached again at once (it does not cool).
func TestCacheClockGuard(t *testing.T) {
	url := newDatabase(t)
	var writes atomic.Int64
	s := openCounted(t, url, &writes)
	ctx := context.Background()
	if _, err := s.PutLimit(ctx, ledger.Limit{Name: "l", Capacity: decimal.NewFromInt(100), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Hour}); err != nil {
		t.Fatal(err)
	}
	ref := ledger.BucketRef{Limit: "l", Key: "k"}
	if _, err := s.Fillup(ctx, charge(ref, 1), ledger.Idempotency{}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []time.Duration{time.Hour, -time.Hour} {
		mysql.ShiftCacheClock(s, d)
		_, _, c0 := s.CacheStats()
		before := time.Now()
		out, err := s.Fillup(ctx, charge(ref, 1), ledger.Idempotency{})
		after := time.Now()
		if err != nil || !out.Accepted {
			t.Fatalf("Fillup: %+v, %v", out, err)
		}
		if now := out.Items[0].Snapshot.Now; now.Before(before.Add(-time.Minute)) || now.After(after.Add(time.Minute)) {
			t.Errorf("estimate moved by %s: decided at %s, between %s and %s by this machine's clock", d, now, before, after)
		}
		if _, _, c := s.CacheStats(); c != c0+1 {
			t.Errorf("estimate moved by %s: %d cached writes failed, want 1", d, c-c0)
		}
	}
}

// TestCacheCools: two cached stores charging one bucket in turn (a load
// balancer without affinity) fail each other's cached write once each, and
// then, while the bucket cools, decide on a read (two round trips), not on
// the cache (four: the failed write, its rollback, the read, the write).
func TestCacheCools(t *testing.T) {
	url := newDatabase(t)
	var writes atomic.Int64
	stores := []*mysql.Store{openCounted(t, url, &writes, mysql.WithCacheSkew(time.Minute), mysql.WithCacheCool(time.Minute)), openCounted(t, url, &writes, mysql.WithCacheSkew(time.Minute), mysql.WithCacheCool(time.Minute))}
	ctx := context.Background()
	if _, err := stores[0].PutLimit(ctx, ledger.Limit{Name: "l", Capacity: decimal.NewFromInt(100), Period: &ledger.Period{Every: "year"}}); err != nil {
		t.Fatal(err)
	}
	for _, s := range stores {
		if err := s.Ping(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ref := ledger.BucketRef{Limit: "l", Key: "k"}
	want := []int64{2, 2, 4, 4, 2, 2, 2, 2, 2, 2}
	for i, w := range want {
		w0 := writes.Load()
		out, err := stores[i%2].Fillup(ctx, charge(ref, 1), ledger.Idempotency{})
		if err != nil || !out.Accepted || out.Items[0].Snapshot.State.Level.String() != fmt.Sprint(i+1) {
			t.Fatalf("Fillup %d: %+v, %v", i, out, err)
		}
		if got := writes.Load() - w0; got != w {
			t.Errorf("Fillup %d, from store %d: %d round trips, want %d", i, i%2, got, w)
		}
	}
}

// TestCacheTwoInstances: two stores with the decision cache on one database
// charge one bucket of a yearly limit (no leak) at once, each from several
// goroutines, so that each keeps failing the other's cached writes. Nothing
// is admitted twice or lost: the level is exactly the sum of the accepted
// costs, never above the capacity, and the history holds one entry for each
// accepted charge.
func TestCacheTwoInstances(t *testing.T) {
	for _, iso := range []string{mysql.RepeatableRead, mysql.ReadCommitted} {
		t.Run(iso, func(t *testing.T) {
			url := newDatabase(t)
			var writes atomic.Int64
			stores := []*mysql.Store{openCounted(t, url, &writes, mysql.WithIsolation(iso)), openCounted(t, url, &writes, mysql.WithIsolation(iso))}
			ctx := context.Background()
			if _, err := ledger.NewService(stores[0]).PutLimit(ctx, "l", ledger.LimitSpec{Capacity: decimal.NewFromInt(600), Period: &ledger.Period{Every: "year"}, History: true}); err != nil {
				t.Fatal(err)
			}
			ref := ledger.BucketRef{Limit: "l", Key: "k"}
			var mu sync.Mutex
			sum, n := decimal.Zero, 0
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 30 {
						cost := 1 + rand.Int64N(9)
						// Alternately from each store, and the goroutines
						// of each store at once.
						out, err := stores[(g+i)%2].Fillup(ctx, charge(ref, cost), ledger.Idempotency{})
						if err != nil {
							errs <- err
							return
						}
						if out.Accepted {
							mu.Lock()
							sum, n = sum.Add(decimal.NewFromInt(cost)), n+1
							mu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("Fillup: %v", err)
			}
			st, err := ledger.NewService(stores[1]).Bucket(ctx, ref)
			if err != nil {
				t.Fatal(err)
			}
			if !st.Level.Decimal().Equal(sum) || sum.GreaterThan(decimal.NewFromInt(600)) {
				t.Errorf("level %s, accepted costs sum to %s (capacity 600)", st.Level, sum)
			}
			entries, _, err := stores[0].History(ctx, ref, "", 1000)
			if err != nil || len(entries) != n {
				t.Errorf("history: %d entries, %v; want the %d accepted charges", len(entries), err, n)
			}
			for i, s := range stores {
				hits, misses, conflicts := s.CacheStats()
				t.Logf("store %d: %d hits, %d misses, %d conflicts", i, hits, misses, conflicts)
			}
			if sum.LessThan(decimal.NewFromInt(590)) {
				t.Errorf("accepted %s of 240 charges of 1 to 9 into 600: too few", sum)
			}
		})
	}
}

// The conformance suite with the decision cache on, at both isolation
// levels (on the suite's pinned clock: the cache's clock guard is
// TestCacheOneRoundTrip's).
func TestConformanceCachedRepeatableRead(t *testing.T) {
	ledgertest.Run(t, cachedFactory(mysql.RepeatableRead))
}

func TestConformanceCachedReadCommitted(t *testing.T) {
	ledgertest.Run(t, cachedFactory(mysql.ReadCommitted))
}

func cachedFactory(isolation string) ledgertest.Factory {
	return func(t *testing.T, clock *ledgertest.Clock) ledger.Store {
		return open(t, newDatabase(t), mysql.WithIsolation(isolation), mysql.WithClock(clock.Now), mysql.WithPruneInterval(0), mysql.WithCache(mysql.DefaultCacheEntries, mysql.DefaultCacheBytes))
	}
}

// TestCacheKnowsRowsAtOpen: a Store opened on a database that already has
// buckets (written by another instance, or by this process before a
// restart) knows them from the start: a batch of them is decided on one
// read, never on a presumption that they are new whose write fails on the
// first existing row. The buckets of two limits, read in pages of 7, with
// no rows kept in the cache (TestCacheWarmAtOpen keeps them).
func TestCacheKnowsRowsAtOpen(t *testing.T) {
	ctx := context.Background()
	url := newDatabase(t)
	before := open(t, url, mysql.WithPruneInterval(0))
	refs := twoLimitsOfBuckets(t, before)
	// Each batch holds buckets of both limits, from the first page, the
	// last and between.
	for _, batch := range [][]int{{0, 20, 39}, {6, 7, 13, 14, 26, 27}, {19, 21, 33, 38}} {
		s := open(t, url, mysql.WithPruneInterval(0), mysql.WithSeedPage(7), mysql.WithoutWarm())
		// A first call of each limit, on a bucket of its own, caches the
		// limit: from then on a bucket it never saw is presumed new.
		for _, name := range []string{"a", "b"} {
			if out, err := s.Fillup(ctx, charge(ledger.BucketRef{Limit: name, Key: fmt.Sprint("new", batch)}, 1), ledger.Idempotency{}); err != nil || !out.Accepted {
				t.Fatalf("Fillup of a new bucket of %s: %+v %v", name, out, err)
			}
		}
		var charges []ledger.Charge
		for _, j := range batch {
			charges = append(charges, charge(refs[j], 2)...)
		}
		outs, errs, kept := mysql.FillupBatch(ctx, s, charges, make([]ledger.Idempotency, len(charges)))
		for j := range outs {
			if errs[j] != nil || !outs[j].Accepted || outs[j].Items[0].Snapshot.State.Level.String() != "3" {
				t.Fatalf("batch %v, call %d: %+v %v; want accepted at 3", batch, j, outs[j], errs[j])
			}
		}
		_, _, conflicts := s.CacheStats()
		_, _, read := s.GroupCommitBuckets()
		if kept != len(batch) || read != 1 || conflicts != 0 {
			t.Errorf("batch %v: %d calls kept, %d batches decided on a read, %d failed cached writes; want %d, 1 and 0",
				batch, kept, read, conflicts, len(batch))
		}
	}
}

// twoLimitsOfBuckets puts limits "a" and "b" through s and writes 20
// buckets of each, k0 to k19, at level 1; it returns them, a's first.
func twoLimitsOfBuckets(t *testing.T, s *mysql.Store) []ledger.BucketRef {
	t.Helper()
	ctx := context.Background()
	svc := ledger.NewService(s)
	var refs []ledger.BucketRef
	for _, name := range []string{"a", "b"} {
		if _, err := svc.PutLimit(ctx, name, ledger.LimitSpec{Capacity: decimal.NewFromInt(100), Period: &ledger.Period{Every: "year"}}); err != nil {
			t.Fatal(err)
		}
		for k := range 20 {
			ref := ledger.BucketRef{Limit: name, Key: fmt.Sprint("k", k)}
			refs = append(refs, ref)
			if out, err := s.Fillup(ctx, charge(ref, 1), ledger.Idempotency{}); err != nil || !out.Accepted {
				t.Fatalf("Fillup of %v: %+v %v", ref, out, err)
			}
		}
	}
	return refs
}

// TestCacheWarmAtOpen: a Store opened on a database that has buckets keeps
// their rows in its decision cache while it has room (docs/mysql.md "A warm
// start"), so a batch of them is decided without a read, as on a Store
// that wrote them; with a smaller cache it keeps what fits, and the rest
// are read. A row changed by another instance since fails the cached
// write's compare-and-set, and the decision is made on the row as it is.
func TestCacheWarmAtOpen(t *testing.T) {
	ctx := context.Background()
	url := newDatabase(t)
	before := open(t, url, mysql.WithPruneInterval(0))
	refs := twoLimitsOfBuckets(t, before)
	batch := func(s *mysql.Store, idx []int, want string) (read int64) {
		t.Helper()
		_, _, read0 := s.GroupCommitBuckets()
		var charges []ledger.Charge
		for _, j := range idx {
			charges = append(charges, charge(refs[j], 2)...)
		}
		outs, errs, kept := mysql.FillupBatch(ctx, s, charges, make([]ledger.Idempotency, len(charges)))
		for j := range outs {
			if errs[j] != nil || !outs[j].Accepted || outs[j].Items[0].Snapshot.State.Level.String() != want {
				t.Fatalf("batch %v, call %d: %+v %v; want accepted at %s", idx, j, outs[j], errs[j], want)
			}
		}
		if kept != len(idx) {
			t.Errorf("batch %v: %d calls kept, want %d", idx, kept, len(idx))
		}
		_, _, read = s.GroupCommitBuckets()
		return read - read0
	}

	s := open(t, url, mysql.WithPruneInterval(0), mysql.WithSeedPage(7))
	if n := mysql.CacheLen(s); n != 42 {
		t.Errorf("%d entries cached at Open, want 42 (40 buckets and 2 limits)", n)
	}
	if read := batch(s, []int{0, 20, 39, 6, 27}, "3"); read != 0 {
		t.Errorf("%d batches decided on a read, want 0", read)
	}
	if _, _, conflicts := s.CacheStats(); conflicts != 0 {
		t.Errorf("%d failed cached writes, want 0", conflicts)
	}

	// Room for a few: the first buckets in key order are kept, the
	// others read.
	small := open(t, url, mysql.WithPruneInterval(0), mysql.WithSeedPage(7), mysql.WithCache(6, mysql.DefaultCacheBytes))
	if n := mysql.CacheLen(small); n < 2 || n > 6 {
		t.Errorf("%d entries cached at Open, want 2 to 6", n)
	}
	if read := batch(small, []int{1, 2, 3}, "3"); read != 1 {
		t.Errorf("%d batches decided on a read, want 1", read)
	}

	// k6 of a, changed by another instance after s read it.
	if out, err := before.Fillup(ctx, charge(refs[6], 10), ledger.Idempotency{}); err != nil || !out.Accepted {
		t.Fatalf("Fillup of k6 by the other instance: %+v %v", out, err)
	}
	if out, err := s.Fillup(ctx, charge(refs[6], 1), ledger.Idempotency{}); err != nil || !out.Accepted || out.Items[0].Snapshot.State.Level.String() != "14" {
		t.Fatalf("Fillup of k6 after the other instance's: %+v %v; want accepted at 14", out, err)
	}
	if _, _, conflicts := s.CacheStats(); conflicts != 1 {
		t.Errorf("%d failed cached writes, want 1", conflicts)
	}
}

// TestCacheRowGone: a bucket's row deleted behind the cache (as the pruner
// deletes an idle bucket's, or an operator by hand) is not written back
// from the cached state: the cached write, an upsert that checks each row
// it updates (docs/mysql.md, "The guarded upsert"), would insert the row
// again, and its count of affected rows fails it. The decision then runs on
// a read, as for a bucket never written: level 1, version 1, and last_us
// the decision's instant, not the one the cache held.
func TestCacheRowGone(t *testing.T) {
	url := newDatabase(t)
	var writes atomic.Int64
	s := openCounted(t, url, &writes, mysql.WithCacheSkew(time.Minute), mysql.WithCacheCool(0))
	db := direct(t, url)
	ctx := context.Background()
	if _, err := s.PutLimit(ctx, ledger.Limit{Name: "l", Capacity: decimal.NewFromInt(100), Period: &ledger.Period{Every: "year"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	ref := ledger.BucketRef{Limit: "l", Key: "k"}
	for i := 1; i <= 3; i++ {
		if out, err := s.Fillup(ctx, charge(ref, 1), ledger.Idempotency{}); err != nil || !out.Accepted {
			t.Fatalf("Fillup %d: %+v, %v", i, out, err)
		}
	}
	if _, err := db.ExecContext(ctx, "DELETE FROM budgetd_buckets WHERE bkey = ?", []byte("k")); err != nil {
		t.Fatal(err)
	}
	w0 := writes.Load()
	before := time.Now()
	out, err := s.Fillup(ctx, charge(ref, 1), ledger.Idempotency{})
	if err != nil || !out.Accepted || out.Items[0].Snapshot.State.Level.String() != "1" {
		t.Fatalf("Fillup after the row was deleted: %+v, %v; want accepted at level 1", out, err)
	}
	// The failed write, its rollback, the read, the write.
	if got := writes.Load() - w0; got != 4 {
		t.Errorf("Fillup after the row was deleted: %d round trips, want 4", got)
	}
	var version, last int64
	if err := db.QueryRowContext(ctx, "SELECT version, last_us FROM budgetd_buckets WHERE bkey = ?", []byte("k")).Scan(&version, &last); err != nil {
		t.Fatal(err)
	}
	// The test server's clock is this machine's.
	if version != 1 || last < before.Add(-time.Second).UnixMicro() {
		t.Errorf("row after the Fillup: version %d, last_us %d; want version 1, last_us after %d", version, last, before.UnixMicro())
	}
}

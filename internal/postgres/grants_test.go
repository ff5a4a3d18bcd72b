package postgres_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/postgres"
	"github.com/shopspring/decimal"
)

// TestGrantsConcurrentFillups: a grant made in the middle of a stream of
// Fillups of its bucket from 50 goroutines (coalesced into batches on a
// small pool) is counted whole or not at all by each decision, by every
// decision that starts after it was made, and the bucket admits exactly its
// capacity plus the grant, never more, at both isolation levels.
func TestGrantsConcurrentFillups(t *testing.T) {
	for _, iso := range []string{"read-committed", "serializable"} {
		t.Run(iso, func(t *testing.T) {
			clock := ledgertest.NewClock()
			s := open(t, postgres.WithIsolation(iso), postgres.WithClock(clock.Now), postgres.WithMaxConns(4))
			svc := ledger.NewService(s)
			ctx := context.Background()
			if _, err := svc.PutLimit(ctx, "team", ledger.LimitSpec{Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: time.Hour, History: true}); err != nil {
				t.Fatal(err)
			}
			r := ledger.BucketRef{Limit: "team", Key: "b"}
			var accepted, before, after atomic.Int64
			var granted atomic.Bool
			half := make(chan struct{})
			var once sync.Once
			deadline := time.Now().Add(30 * time.Second)
			var wg sync.WaitGroup
			for i := 0; i < 50; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Until a denial that started once the grant was made.
					for time.Now().Before(deadline) {
						done := granted.Load()
						res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: r, Cost: dec("1")}}, ledger.Idempotency{})
						if err != nil {
							t.Error(err)
							return
						}
						switch c, g := res.Items[0].Capacity.String(), res.Limits[0].Grants.String(); {
						case c == "30" && g == "20":
							after.Add(1)
						case c == "10" && g == "0" && !done:
							before.Add(1)
						default:
							t.Errorf("a decision with capacity %s and grants %s (started after the grant: %v)", c, g, done)
							return
						}
						if res.Accepted {
							if accepted.Add(1) == 5 {
								once.Do(func() { close(half) })
							}
						} else if done {
							return
						}
					}
					t.Error("no denial after the grant before the deadline")
				}()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer granted.Store(true)
				<-half
				if _, err := svc.AddGrant(ctx, r, dec("20"), clock.Now().Add(time.Hour), ledger.Idempotency{}, nil); err != nil {
					t.Error(err)
				}
			}()
			wg.Wait()
			t.Logf("%d decisions without the grant, %d with it; stats %+v", before.Load(), after.Load(), s.Stats())
			st, err := svc.Bucket(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if accepted.Load() != 30 || st.Level.String() != "30" || st.Capacity.String() != "30" || st.Grants.String() != "20" {
				t.Fatalf("%d accepted, bucket %+v: want 30 accepted, level 30 of capacity 10 + grants 20", accepted.Load(), st)
			}
		})
	}
}

// TestGrantsPrune: the listing of buckets shows their grants; the pruner
// keeps an empty bucket while it has an active grant and deletes expired grants, after which the limit pays nothing for
// grants in its decisions (limits.grant_rows is back to 0); deleting a limit
// deletes its grants.
func TestGrantsPrune(t *testing.T) {
	ctx := context.Background()
	clock := ledgertest.NewClock()
	s, count := openCounting(t, clock)
	svc := ledger.NewService(s)
	if _, err := svc.PutLimit(ctx, "l", ledger.LimitSpec{Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: time.Second}); err != nil {
		t.Fatal(err)
	}
	granted, plain := ledger.BucketRef{Limit: "l", Key: "granted"}, ledger.BucketRef{Limit: "l", Key: "plain"}
	for _, r := range []ledger.BucketRef{granted, plain} {
		if res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: r, Cost: dec("2")}}, ledger.Idempotency{}); err != nil || !res.Accepted {
			t.Fatalf("Fillup: %+v %v", res, err)
		}
	}
	if _, err := svc.AddGrant(ctx, granted, dec("5"), clock.Now().Add(time.Hour), ledger.Idempotency{}, nil); err != nil {
		t.Fatal(err)
	}
	// A single-bucket Fillup (budgetd_fillup_batch) answers them, and its
	// replay repeats them.
	idem := ledger.Idempotency{Scope: "fillup:l/granted", Key: "k1", Hash: "h"}
	for _, replay := range []bool{false, true} {
		res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: granted, Cost: dec("1")}}, idem)
		if err != nil || !res.Accepted || res.Replayed != replay || res.Items[0].Capacity.String() != "15" || res.Limits[0].Grants.String() != "5" {
			t.Fatalf("Fillup (replay %v): %+v %v", replay, res, err)
		}
	}
	// The listing shows each bucket's grants in its capacity.
	list, _, err := svc.ListBuckets(ctx, "l", "", 10)
	if err != nil || len(list) != 2 || list[0].Key != "granted" || list[0].Capacity.String() != "15" || list[0].Grants.String() != "5" ||
		list[1].Key != "plain" || list[1].Capacity.String() != "10" || !list[1].Grants.IsZero() {
		t.Fatalf("listing: %+v %v", list, err)
	}
	// A grant on a bucket never charged writes no bucket row.
	if _, err := svc.AddGrant(ctx, ledger.BucketRef{Limit: "l", Key: "fresh"}, dec("1"), clock.Now().Add(time.Minute), ledger.Idempotency{}, nil); err != nil {
		t.Fatal(err)
	}
	if n := count("SELECT count(*) FROM buckets WHERE key = 'fresh'"); n != 0 {
		t.Errorf("a grant left %d bucket rows", n)
	}
	clock.Advance(10 * time.Second) // both buckets have leaked empty
	st, err := s.Prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.EmptyBuckets != 1 || count("SELECT count(*) FROM buckets WHERE key = 'granted'") != 1 {
		t.Errorf("first pass %+v: want the empty bucket without a grant deleted and the granted one kept", st)
	}

	clock.Advance(time.Hour)
	st, err = s.Prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.ExpiredGrants != 2 || st.EmptyBuckets != 1 || count("SELECT count(*) FROM grants") != 0 || count("SELECT count(*) FROM buckets") != 0 {
		t.Errorf("after the grants expired: %+v, want both grants and the bucket deleted", st)
	}
	if n := count("SELECT grant_rows FROM limits WHERE name = 'l'"); n != 0 {
		t.Errorf("grant_rows %d once every grant is pruned, want 0", n)
	}
	if d, err := svc.CanAccept(ctx, granted, dec("10")); err != nil || !d.Accepted || d.Capacity.String() != "10" {
		t.Errorf("after the grants: %+v %v", d, err)
	}

	// Deleting a limit deletes its grants.
	if _, err := svc.AddGrant(ctx, granted, dec("5"), clock.Now().Add(time.Hour), ledger.Idempotency{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := svc.DeleteLimit(ctx, "l"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.ListGrants(ctx, granted); !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Errorf("grants of a deleted limit: %v", err)
	}
	if _, err := s.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count("SELECT count(*) FROM grants"); n != 0 {
		t.Errorf("%d grants left of a deleted limit", n)
	}
	if _, err := svc.PutLimit(ctx, "l", ledger.LimitSpec{Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: time.Second}); err != nil {
		t.Fatal(err)
	}
	if gs, err := svc.ListGrants(ctx, granted); err != nil || len(gs) != 0 {
		t.Errorf("a re-created limit has grants: %+v %v", gs, err)
	}
}

// TestGrantsDefaultExpiryOfOverride: without expires_at a grant ends with
// the bucket's current period as its override sets it (zone and start
// day), and an override's capacity is what the grant adds to.
func TestGrantsDefaultExpiryOfOverride(t *testing.T) {
	clock := ledgertest.NewClock()
	clock.Set(time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC))
	s := open(t, postgres.WithClock(clock.Now))
	svc := ledger.NewService(s)
	ctx := context.Background()
	if _, err := svc.PutLimit(ctx, "m", ledger.LimitSpec{Capacity: dec("100"), Period: &ledger.Period{Every: "month"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.PutOverride(ctx, "m", ledger.Override{Pattern: "jp-*", TZ: "Asia/Tokyo", StartDay: 25}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.PutOverride(ctx, "m", ledger.Override{Pattern: "big", Capacity: decimal.NewNullDecimal(dec("1000"))}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key, expires, capacity, override string
	}{
		{"plain", "2026-12-01T00:00:00Z", "150", ""},
		{"jp-1", "2026-11-24T15:00:00Z", "150", "jp-*"}, // 25 November in Tokyo
		{"big", "2026-12-01T00:00:00Z", "1050", "big"},
	} {
		res, err := svc.AddGrant(ctx, ledger.BucketRef{Limit: "m", Key: c.key}, dec("50"), time.Time{}, ledger.Idempotency{}, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.key, err)
		}
		if got := res.Grant.ExpiresAt.Format(time.RFC3339); got != c.expires || res.Bucket.Capacity.String() != c.capacity || res.Bucket.Override != c.override {
			t.Errorf("%s: expires %s, bucket %+v; want %s, capacity %s, override %q", c.key, got, res.Bucket, c.expires, c.capacity, c.override)
		}
	}
}

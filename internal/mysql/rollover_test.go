package mysql_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/mysql"
)

// TestRolloverPruneAndList: the listing of buckets shows the rollover each
// receives; a bucket's first write in a new month keeps its carry in its
// row (the capacity it left unused, uncapped, for the month it applies to)
// and a read keeps none; the pruner deletes an empty bucket of a periodic
// limit without rollover but keeps one that may still pass rollover on,
// until rollover is removed (as TestRolloverPruneAndList of the PostgreSQL
// store).
func TestRolloverPruneAndList(t *testing.T) {
	ctx := context.Background()
	clock := ledgertest.NewClock()
	clock.Set(time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC))
	s, count := pruneStore(t, clock)
	svc := ledger.NewService(s)
	month := &ledger.Period{Every: "month"}
	for name, r := range map[string]*ledger.Rollover{"plain": nil, "carry": {Max: d("30")}} {
		if _, err := svc.PutLimit(ctx, name, ledger.LimitSpec{Capacity: d("100"), Period: month, Rollover: r}); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []ledger.BucketRef{{Limit: "plain", Key: "k"}, {Limit: "carry", Key: "k"}, {Limit: "carry", Key: "m"}} {
		if res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: r, Cost: d("50")}}, ledger.Idempotency{}); err != nil || !res.Accepted {
			t.Fatalf("Fillup %v: %+v %v", r, res, err)
		}
	}
	clock.Set(time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC))
	list, _, err := svc.ListBuckets(ctx, "carry", "", 10)
	if err != nil || len(list) != 2 || list[0].Capacity.String() != "130" || list[0].Rollover.String() != "30" ||
		list[1].Capacity.String() != "130" || list[1].Rollover.String() != "30" {
		t.Fatalf("listing in December: %+v %v", list, err)
	}
	// The first write of December keeps the carry: 50 unused, for December.
	if res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "carry", Key: "k"}, Cost: d("1")}}, ledger.Idempotency{}); err != nil ||
		!res.Accepted || res.Items[0].Capacity.String() != "130" || res.Limits[0].Received.String() != "30" {
		t.Fatalf("December fillup: %+v %v", res, err)
	}
	december := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	carry := "budgetd_buckets WHERE bkey = 'k' AND JSON_UNQUOTE(JSON_EXTRACT(extra, '$.carry.u')) = '50' AND JSON_EXTRACT(extra, '$.carry.p') = " + strconv.FormatInt(december, 10)
	if n := count(carry); n != 1 {
		t.Errorf("%d buckets keep the carry 50 for December, want 1", n)
	}
	if n := count("budgetd_buckets WHERE bkey = 'm' AND JSON_EXTRACT(extra, '$.carry') IS NOT NULL"); n != 0 {
		t.Errorf("a read kept a carry in %d rows", n)
	}
	// Later in December the stored carry decides: the level of November is
	// gone from the row.
	clock.Set(time.Date(2026, 12, 20, 9, 0, 0, 0, time.UTC))
	if st, err := svc.Bucket(ctx, ledger.BucketRef{Limit: "carry", Key: "k"}); err != nil || st.Capacity.String() != "130" || st.Rollover.String() != "30" || st.Level.String() != "1" {
		t.Fatalf("the bucket later in December: %+v %v", st, err)
	}

	st, err := s.Prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.EmptyBuckets != 1 || count("budgetd_buckets b JOIN budgetd_limits l ON l.id = b.limit_id WHERE l.name = 'carry'") != 2 ||
		count("budgetd_buckets b JOIN budgetd_limits l ON l.id = b.limit_id WHERE l.name = 'plain'") != 0 {
		t.Errorf("prune in December %+v: want the plain bucket deleted and both with rollover kept", st)
	}
	// January: m was untouched in December and carries min(max, capacity);
	// k left 99 unused.
	clock.Set(time.Date(2027, 1, 5, 9, 0, 0, 0, time.UTC))
	for _, key := range []string{"m", "k"} {
		if d, err := svc.CanAccept(ctx, ledger.BucketRef{Limit: "carry", Key: key}, d("1")); err != nil || d.Capacity.String() != "130" {
			t.Fatalf("January %s: %+v %v", key, d, err)
		}
	}
	if st, err := s.Prune(ctx); err != nil || st.EmptyBuckets != 0 || count("budgetd_buckets") != 2 {
		t.Errorf("prune in January: %+v %v, want both buckets with rollover kept", st, err)
	}
	// Without rollover the empty buckets go.
	if _, err := svc.PutLimit(ctx, "carry", ledger.LimitSpec{Capacity: d("100"), Period: month}); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Prune(ctx); err != nil || st.EmptyBuckets != 2 || count("budgetd_buckets") != 0 {
		t.Errorf("prune without rollover: %+v %v, want both buckets deleted", st, err)
	}
}

// TestRolloverGrantBound: a grant's bound counts the limit's capacity and
// the grants, not the rollover the bucket receives, as on the other stores.
func TestRolloverGrantBound(t *testing.T) {
	clock := ledgertest.NewClock()
	s, _ := pruneStore(t, clock)
	ledgertest.RolloverGrantBound(t, s, clock)
}

// TestRolloverOverrideAtEnd: the capacity in force at a month's end is the
// override's that applied at its last microsecond, also after PUTs of the
// limit and of another override in the new month.
func TestRolloverOverrideAtEnd(t *testing.T) {
	clock := ledgertest.NewClock()
	s, _ := pruneStore(t, clock)
	ledgertest.RolloverOverrideAtEnd(t, s, clock)
}

// TestRolloverConcurrentFirstWrites: 40 Fillups of 5 at once, from two
// Store instances, are a bucket's first writes of December, after it left
// 50 unused in November (rollover max 30): each decision, the first and
// those that run again after a conflict, sees capacity 130 with 30 received,
// exactly 26 are accepted, and January receives nothing (December was used
// up), at both isolation levels.
func TestRolloverConcurrentFirstWrites(t *testing.T) {
	for _, iso := range []string{mysql.RepeatableRead, mysql.ReadCommitted} {
		t.Run(iso, func(t *testing.T) {
			ctx := context.Background()
			clock := ledgertest.NewClock()
			clock.Set(time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC))
			url := newDatabase(t)
			var stores [2]*mysql.Store
			for i := range stores {
				stores[i] = open(t, url, mysql.WithIsolation(iso), mysql.WithClock(clock.Now), mysql.WithPruneInterval(0))
			}
			svc := ledger.NewService(stores[0])
			spec := ledger.LimitSpec{Capacity: d("100"), Period: &ledger.Period{Every: "month"}, Rollover: &ledger.Rollover{Max: d("30")}, History: true}
			if _, err := svc.PutLimit(ctx, "m", spec); err != nil {
				t.Fatal(err)
			}
			r := ledger.BucketRef{Limit: "m", Key: "k"}
			if res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: r, Cost: d("50")}}, ledger.Idempotency{}); err != nil || !res.Accepted {
				t.Fatalf("November: %+v %v", res, err)
			}
			clock.Set(time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC))
			var accepted atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range 40 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					res, err := ledger.NewService(stores[i%2]).Fillup(ctx, []ledger.Item{{Bucket: r, Cost: d("5")}}, ledger.Idempotency{})
					if err != nil {
						t.Errorf("Fillup: %v", err)
						return
					}
					if res.Items[0].Capacity.String() != "130" || res.Limits[0].Received.String() != "30" {
						t.Errorf("a December decision: capacity %s, received %s, want 130 and 30", res.Items[0].Capacity, res.Limits[0].Received)
					}
					if res.Accepted {
						accepted.Add(1)
					}
				}()
			}
			close(start)
			wg.Wait()
			if n := accepted.Load(); n != 26 {
				t.Errorf("accepted %d Fillups of 5 into 130, want 26", n)
			}
			if st, err := svc.Bucket(ctx, r); err != nil || st.Level.String() != "130" || st.Rollover.String() != "30" {
				t.Fatalf("December: %+v %v", st, err)
			}
			if es, _, err := svc.History(ctx, r, "", 100); err != nil || len(es) != 27 {
				t.Errorf("history: %d entries (%v), want 27", len(es), err)
			}
			clock.Set(time.Date(2027, 1, 5, 9, 0, 0, 0, time.UTC))
			if st, err := svc.Bucket(ctx, r); err != nil || st.Capacity.String() != "100" || st.Rollover.String() != "0" {
				t.Fatalf("January: %+v %v", st, err)
			}
		})
	}
}

package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/postgres"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
)

// TestOverridesAtScale: a limit with 100,000 overrides (half exact, half
// prefixes, bulk-copied into the table) still resolves each bucket's terms
// exactly, exact before the longest prefix before the limit, on single
// calls, on the coalesced path under concurrency, in idempotent replays and
// in listings; deleting the limit takes them all with it.
func TestOverridesAtScale(t *testing.T) {
	ctx := context.Background()
	url := dsn(t)
	schema := newSchema(t)
	clock := ledgertest.NewClock()
	s, err := postgres.Open(ctx, url, postgres.WithSchema(schema), postgres.WithPruneInterval(0), postgres.WithClock(clock.Now), postgres.WithCoalescing(true))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	svc := ledger.NewService(s)
	if _, err := svc.PutLimit(ctx, "api", ledger.LimitSpec{Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: time.Hour, History: true}); err != nil {
		t.Fatal(err)
	}
	// Through the store: one override of each pattern length the bulk rows
	// use, so that the limit knows the lengths (limits.override_lens).
	put := func(o ledger.Override) {
		t.Helper()
		if _, err := svc.PutOverride(ctx, "api", o); err != nil {
			t.Fatalf("PutOverride(%s): %v", o.Pattern, err)
		}
	}
	put(ledger.Override{Pattern: "cust-000000", Capacity: decimal.NewNullDecimal(dec("1000"))})
	put(ledger.Override{Pattern: "org-00000-*", Capacity: decimal.NewNullDecimal(dec("2000"))})

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var id int64
	if err := conn.QueryRow(ctx, "SELECT id FROM "+pgx.Identifier{schema, "limits"}.Sanitize()+" WHERE name = 'api'").Scan(&id); err != nil {
		t.Fatal(err)
	}
	const n = 50_000
	now := clock.Now()
	rows := make([][]any, 0, 2*n)
	for i := 1; i <= n; i++ {
		// cust-i: capacity 1000 + i; org-i-*: 2000 + i.
		rows = append(rows, []any{id, fmt.Sprintf("cust-%06d", i), nil, fmt.Sprint(1000 + i), now, now},
			[]any{id, fmt.Sprintf("org-%05d-*", i), int32(10), fmt.Sprint(2000 + i), now, now})
	}
	copied, err := conn.CopyFrom(ctx, pgx.Identifier{schema, "overrides"}, []string{"limit_id", "pattern", "plen", "capacity", "created_at", "updated_at"},
		pgx.CopyFromRows(rows))
	if err != nil || copied != 2*n {
		t.Fatalf("copied %d overrides: %v", copied, err)
	}
	if _, err := conn.Exec(ctx, "ANALYZE "+pgx.Identifier{schema, "overrides"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	// A longer prefix beats org-01234-*, and an exact key beats both.
	put(ledger.Override{Pattern: "org-01234-team*", Capacity: decimal.NewNullDecimal(dec("5"))})
	put(ledger.Override{Pattern: "org-01234-team-x", Capacity: decimal.NewNullDecimal(dec("7"))})
	if list, err := svc.ListOverrides(ctx, "api", "org-50000-*", 10); err != nil || len(list) != 0 {
		t.Fatalf("the last page: %+v %v", list, err)
	}

	// The first call reads the limit's 100,002 overrides into the terms
	// index. On a busy machine that read can outlast one call's 5 s
	// deadline: that call fails as a store failure, while the read goes on
	// under its own deadline (loadTimeout) for the calls after it. Wait
	// for the index with a call that changes nothing; any other failure,
	// or none in 60 s, fails the test.
	for deadline := time.Now().Add(time.Minute); ; {
		_, err := svc.CanAccept(ctx, ledger.BucketRef{Limit: "api", Key: "warm-up"}, dec("1"))
		if err == nil {
			break
		}
		if !errors.Is(err, context.DeadlineExceeded) || time.Now().After(deadline) {
			t.Fatalf("the first call while the overrides load: %v", err)
		}
		t.Logf("the first call while the overrides load: %v", err)
	}

	for _, c := range []struct{ key, capacity, override string }{
		{"cust-012345", "13345", "cust-012345"},
		{"cust-0123456", "10", ""},
		{"org-01234-a", "3234", "org-01234-*"},
		{"org-01234-", "3234", "org-01234-*"},
		{"org-01234-teamwork", "5", "org-01234-team*"},
		{"org-01234-team-x", "7", "org-01234-team-x"},
		{"org-01234", "10", ""},
		{"org-50001-a", "10", ""},
	} {
		ref := ledger.BucketRef{Limit: "api", Key: c.key}
		res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: dec(c.capacity)}}, ledger.Idempotency{Scope: "fillup:" + c.key, Key: "k", Hash: "h"})
		if err != nil || !res.Accepted || res.Limits[0].Override != c.override || res.Items[0].Capacity.String() != c.capacity {
			t.Fatalf("%s: Fillup of %s: %+v %v", c.key, c.capacity, res, err)
		}
		again, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: dec(c.capacity)}}, ledger.Idempotency{Scope: "fillup:" + c.key, Key: "k", Hash: "h"})
		if err != nil || !again.Replayed || again.Limits[0].Override != c.override {
			t.Fatalf("%s: replay %+v %v", c.key, again, err)
		}
		if d, err := svc.CanAccept(ctx, ref, dec("0.000001")); err != nil || d.Accepted || d.Capacity.String() != c.capacity {
			t.Fatalf("%s: a full bucket: %+v %v", c.key, d, err)
		}
	}

	// Concurrent Fillups of many overridden buckets go through the
	// coalesced path; each is decided under its own terms.
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := 100; i < 300; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key, capacity := fmt.Sprintf("org-%05d-x", i), fmt.Sprint(2000+i)
			ref := ledger.BucketRef{Limit: "api", Key: key}
			for _, cost := range []string{capacity, "0.000001"} {
				res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: dec(cost)}}, ledger.Idempotency{})
				switch {
				case err != nil:
					errs <- err
				case res.Accepted != (cost == capacity) || res.Items[0].Capacity.String() != capacity || res.Limits[0].Override != fmt.Sprintf("org-%05d-*", i):
					errs <- fmt.Errorf("%s: Fillup of %s: %+v", key, cost, res)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	buckets, _, err := svc.ListBuckets(ctx, "api", ledger.BucketCursor("org-01234-"), 2)
	if err != nil || len(buckets) != 2 || buckets[0].Key != "org-01234-a" || buckets[0].Override != "org-01234-*" || buckets[0].Capacity.String() != "3234" ||
		buckets[1].Key != "org-01234-team-x" || buckets[1].Override != "org-01234-team-x" {
		t.Fatalf("listing: %+v %v", buckets, err)
	}

	if err := svc.DeleteLimit(ctx, "api"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.PutLimit(ctx, "api", ledger.LimitSpec{Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if list, err := svc.ListOverrides(ctx, "api", "", 10); err != nil || len(list) != 0 {
		t.Fatalf("a re-created limit has overrides: %+v %v", list, err)
	}
	if st, err := svc.Bucket(ctx, ledger.BucketRef{Limit: "api", Key: "cust-012345"}); err != nil || st.Override != "" || st.Capacity.String() != "10" {
		t.Fatalf("a re-created limit applies an old override: %+v %v", st, err)
	}
}

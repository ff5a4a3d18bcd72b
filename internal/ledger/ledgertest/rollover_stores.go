package ledgertest

import (
	"context"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/budgetd/budgetd/internal/ledger"
)

// RolloverGrantBound checks, on a fresh store whose clock is clock, that a
// grant's bound (the bucket's capacity with its grants at most 10^12)
// counts the limit's capacity and the grants, not the rollover the bucket
// receives. The PostgreSQL, MySQL and Redis stores' TestRolloverGrantBound
// run it on their own set-ups.
func RolloverGrantBound(t *testing.T, store ledger.Store, clock *Clock) {
	t.Helper()
	ctx := context.Background()
	clock.Set(time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC))
	svc := ledger.NewService(store)
	spec := ledger.LimitSpec{Capacity: dec("999999999990"), Period: &ledger.Period{Every: "month"}, Rollover: &ledger.Rollover{Max: dec("30")}}
	if _, err := svc.PutLimit(ctx, "big", spec); err != nil {
		t.Fatal(err)
	}
	r := ledger.BucketRef{Limit: "big", Key: "k"}
	if res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: r, Cost: dec("1")}}, ledger.Idempotency{}); err != nil || !res.Accepted {
		t.Fatalf("Fillup: %+v %v", res, err)
	}
	clock.Set(time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC))
	out, err := svc.AddGrant(ctx, r, dec("10"), time.Time{}, ledger.Idempotency{}, nil)
	if err != nil {
		t.Fatalf("a grant within the bound without the rollover: %v", err)
	}
	if out.Bucket.Capacity.String() != "1000000000030" || out.Bucket.Rollover.String() != "30" {
		t.Errorf("after the grant: capacity %s, rollover %s, want 1000000000030 and 30", out.Bucket.Capacity, out.Bucket.Rollover)
	}
	if _, err := svc.AddGrant(ctx, r, dec("0.000001"), time.Time{}, ledger.Idempotency{}, nil); err == nil {
		t.Error("a grant past the bound was accepted")
	}
}

// RolloverOverrideAtEnd checks, on a fresh store whose clock is clock, that
// the capacity in force at a month's end is the override's that applied at
// its last microsecond: a raise "until the end of the month" (expires_at the
// next month's first instant) counts, one that ended a microsecond earlier
// does not; the expired override still counts after PUTs of the limit and
// of another override in the new month, and is no longer readable. The PostgreSQL, MySQL and Redis
// stores' TestRolloverOverrideAtEnd run it on their own set-ups.
func RolloverOverrideAtEnd(t *testing.T, store ledger.Store, clock *Clock) {
	t.Helper()
	ctx := context.Background()
	clock.Set(time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC))
	svc := ledger.NewService(store)
	spec := ledger.LimitSpec{Capacity: dec("100"), Period: &ledger.Period{Every: "month"}, Rollover: &ledger.Rollover{Max: dec("30")}}
	if _, err := svc.PutLimit(ctx, "m", spec); err != nil {
		t.Fatal(err)
	}
	december := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for key, end := range map[string]time.Time{"until": december, "before": december.Add(-time.Microsecond)} {
		o := ledger.Override{Pattern: key, Capacity: decimal.NewNullDecimal(dec("200")), ExpiresAt: end}
		if _, err := svc.PutOverride(ctx, "m", o); err != nil {
			t.Fatal(err)
		}
		r := ledger.BucketRef{Limit: "m", Key: key}
		if res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: r, Cost: dec("150")}}, ledger.Idempotency{}); err != nil || !res.Accepted {
			t.Fatalf("Fillup %s: %+v %v", key, res, err)
		}
	}
	clock.Set(time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC))
	check := func(when string) {
		t.Helper()
		for key, want := range map[string]string{"until": "130", "before": "100"} {
			d, err := svc.CanAccept(ctx, ledger.BucketRef{Limit: "m", Key: key}, dec("1"))
			if err != nil || d.Capacity.String() != want {
				t.Errorf("%s: %s: capacity %s (%v), want %s", when, key, d.Capacity, err, want)
			}
		}
	}
	check("December")
	if _, err := svc.PutLimit(ctx, "m", spec); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.PutOverride(ctx, "m", ledger.Override{Pattern: "other", Capacity: decimal.NewNullDecimal(dec("300"))}); err != nil {
		t.Fatal(err)
	}
	check("after PUTs in December")
	if _, err := svc.GetOverride(ctx, "m", "until"); err == nil {
		t.Error("an expired override is readable")
	}
}

package postgres_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
)

// TestRolloverPruneAndList: the listing of buckets shows the rollover each
// receives; a bucket's first write in a new month keeps its carry in its
// row (the capacity it left unused, uncapped, for the month it applies to);
// the pruner deletes an empty bucket of a periodic limit without rollover
// but keeps one that may still pass rollover on, until rollover is removed.
func TestRolloverPruneAndList(t *testing.T) {
	ctx := context.Background()
	clock := ledgertest.NewClock()
	clock.Set(time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC))
	s, count := openCounting(t, clock)
	svc := ledger.NewService(s)
	month := &ledger.Period{Every: "month"}
	for name, r := range map[string]*ledger.Rollover{"plain": nil, "carry": {Max: dec("30")}} {
		if _, err := svc.PutLimit(ctx, name, ledger.LimitSpec{Capacity: dec("100"), Period: month, Rollover: r}); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []ledger.BucketRef{{Limit: "plain", Key: "k"}, {Limit: "carry", Key: "k"}, {Limit: "carry", Key: "m"}} {
		if res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: r, Cost: dec("50")}}, ledger.Idempotency{}); err != nil || !res.Accepted {
			t.Fatalf("Fillup %v: %+v %v", r, res, err)
		}
	}
	clock.Set(time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC))
	list, _, err := svc.ListBuckets(ctx, "carry", "", 10)
	if err != nil || len(list) != 2 || list[0].Capacity.String() != "130" || list[0].Rollover.String() != "30" {
		t.Fatalf("listing in December: %+v %v", list, err)
	}
	// The first write of December keeps the carry: 50 unused, for December.
	if res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "carry", Key: "k"}, Cost: dec("1")}}, ledger.Idempotency{}); err != nil ||
		!res.Accepted || res.Items[0].Capacity.String() != "130" || res.Limits[0].Received.String() != "30" {
		t.Fatalf("December fillup: %+v %v", res, err)
	}
	december := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	if n := count("SELECT count(*) FROM buckets WHERE key = 'k' AND carry_unused = 50 AND carry_period = " + strconv.FormatInt(december, 10)); n != 1 {
		t.Errorf("%d buckets keep the carry 50 for December, want 1", n)
	}
	if n := count("SELECT count(*) FROM buckets WHERE key = 'm' AND carry_period IS NOT NULL"); n != 0 {
		t.Errorf("a read kept a carry in %d rows", n)
	}

	st, err := s.Prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.EmptyBuckets != 1 || count("SELECT count(*) FROM buckets b JOIN limits l ON l.id = b.limit_id WHERE l.name = 'carry'") != 2 {
		t.Errorf("prune in December %+v: want the plain bucket deleted and both with rollover kept", st)
	}
	// January: m was untouched in December and carries min(max, capacity).
	clock.Set(time.Date(2027, 1, 5, 9, 0, 0, 0, time.UTC))
	if d, err := svc.CanAccept(ctx, ledger.BucketRef{Limit: "carry", Key: "m"}, dec("1")); err != nil || d.Capacity.String() != "130" {
		t.Fatalf("January: %+v %v", d, err)
	}
	// Without rollover the empty buckets go.
	if _, err := svc.PutLimit(ctx, "carry", ledger.LimitSpec{Capacity: dec("100"), Period: month}); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Prune(ctx); err != nil || st.EmptyBuckets != 2 || count("SELECT count(*) FROM buckets") != 0 {
		t.Errorf("prune without rollover: %+v %v, want both buckets deleted", st, err)
	}
}

// TestRolloverGrantBound: a grant's bound (the bucket's capacity with its
// grants at most 10^12) counts the limit's capacity and the grants, not the
// rollover the bucket receives, as on the memory store.
func TestRolloverGrantBound(t *testing.T) {
	clock := ledgertest.NewClock()
	s, _ := openCounting(t, clock)
	ledgertest.RolloverGrantBound(t, s, clock)
}

// TestRolloverOverrideAtEnd: the capacity in force at a month's end is the
// override's that applied at its last microsecond: a raise "until the end
// of the month" (expires_at the next month's first instant) counts, one
// that ended a microsecond earlier does not.
func TestRolloverOverrideAtEnd(t *testing.T) {
	clock := ledgertest.NewClock()
	s, _ := openCounting(t, clock)
	ledgertest.RolloverOverrideAtEnd(t, s, clock)
}

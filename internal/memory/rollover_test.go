package memory_test

import (
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/shopspring/decimal"
)

// TestRolloverKeepsBuckets: the sweeper prunes an empty bucket of a
// periodic limit without rollover at a new month, but keeps one that may
// still pass rollover on: pruned, it would start again as a new bucket and
// lose the rollover its untouched months carry.
func TestRolloverKeepsBuckets(t *testing.T) {
	clock := ledgertest.NewClock()
	clock.Set(time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC))
	s := memory.New(memory.WithClock(clock.Now))
	svc := ledger.NewService(s)
	ctx := t.Context()
	month := &ledger.Period{Every: "month"}
	for name, r := range map[string]*ledger.Rollover{"plain": nil, "carry": {Max: decimal.NewFromInt(30)}} {
		if _, err := svc.PutLimit(ctx, name, ledger.LimitSpec{Capacity: decimal.NewFromInt(100), Period: month, Rollover: r}); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: name, Key: "k"}, Cost: decimal.NewFromInt(90)}}, ledger.Idempotency{}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Set(time.Date(2027, 2, 3, 0, 0, 0, 0, time.UTC))
	s.Sweep()
	if n := s.Buckets(); n != 1 {
		t.Fatalf("%d buckets after a sweep, want the one with rollover", n)
	}
	st, err := svc.Bucket(ctx, ledger.BucketRef{Limit: "carry", Key: "k"})
	if err != nil || !st.Rollover.Equal(decimal.NewFromInt(30)) || !st.Capacity.Decimal().Equal(decimal.NewFromInt(130)) {
		t.Fatalf("the kept bucket: %+v %v", st, err)
	}
}

// TestRolloverForgetsPastCarries: a bucket that passes rollover on is kept
// for ever, but the carry it stored in a month is of no use once that month
// is over; the sweeper forgets it, so a bucket idle for good takes no more
// than a lean one, and every answer stays the same (an untouched month
// still carries min(max, capacity)).
func TestRolloverForgetsPastCarries(t *testing.T) {
	clock := ledgertest.NewClock()
	clock.Set(time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC))
	s := memory.New(memory.WithClock(clock.Now))
	svc := ledger.NewService(s)
	ctx := t.Context()
	if _, err := svc.PutLimit(ctx, "carry", ledger.LimitSpec{Capacity: decimal.NewFromInt(100), Period: &ledger.Period{Every: "month"}, Rollover: &ledger.Rollover{Max: decimal.NewFromInt(30)}}); err != nil {
		t.Fatal(err)
	}
	ref := ledger.BucketRef{Limit: "carry", Key: "k"}
	charge := func(n int64) {
		t.Helper()
		if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: decimal.NewFromInt(n)}}, ledger.Idempotency{}); err != nil {
			t.Fatal(err)
		}
	}
	charge(90)
	clock.Set(time.Date(2026, 12, 10, 0, 0, 0, 0, time.UTC))
	charge(5) // December's first write keeps November's unused 10
	s.Sweep()
	if s.Lean("carry", "k") {
		t.Fatal("the carry of the current month was dropped")
	}
	if st, err := svc.Bucket(ctx, ref); err != nil || !st.Rollover.Equal(decimal.NewFromInt(10)) {
		t.Fatalf("December: %+v %v", st, err)
	}
	clock.Set(time.Date(2027, 2, 3, 0, 0, 0, 0, time.UTC))
	before, err := svc.Bucket(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	s.Sweep()
	if !s.Lean("carry", "k") {
		t.Fatal("the bucket still keeps December's carry in February")
	}
	after, err := svc.Bucket(ctx, ref)
	if err != nil || !after.Rollover.Equal(decimal.NewFromInt(30)) || !after.Rollover.Equal(before.Rollover) ||
		!after.Capacity.Decimal().Equal(before.Capacity.Decimal()) || !after.Level.Equal(before.Level) {
		t.Fatalf("February: before the sweep %+v, after %+v %v", before, after, err)
	}
}

package memory_test

import (
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/shopspring/decimal"
)

// TestSweepUnderOverrides: the sweeper prunes a bucket that its own terms
// have emptied and keeps one they have not: with a capacity-only override
// (the sweeper then reads no override) the limit's leak empties it; with
// an override of a slower leak, that leak decides, and the bucket stays.
func TestSweepUnderOverrides(t *testing.T) {
	clock := ledgertest.NewClock()
	s := memory.New(memory.WithClock(clock.Now))
	svc := ledger.NewService(s)
	ctx := t.Context()
	if _, err := svc.PutLimit(ctx, "api", ledger.LimitSpec{Capacity: decimal.NewFromInt(100), LeakAmount: decimal.NewFromInt(100), LeakPer: time.Second}); err != nil {
		t.Fatal(err)
	}
	put := func(o ledger.Override) {
		t.Helper()
		if _, err := svc.PutOverride(ctx, "api", o); err != nil {
			t.Fatal(err)
		}
	}
	put(ledger.Override{Pattern: "big", Capacity: decimal.NewNullDecimal(decimal.NewFromInt(1000))})
	for _, k := range []string{"plain", "big", "slow"} {
		if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "api", Key: k}, Cost: decimal.NewFromInt(50)}}, ledger.Idempotency{}); err != nil {
			t.Fatal(err)
		}
	}
	// Put after the charge, so that the bucket is settled at 50 under the
	// old leak, then leaks 1 an hour.
	put(ledger.Override{Pattern: "slow", LeakAmount: decimal.NewFromInt(1), LeakPer: time.Hour})
	clock.Advance(10 * time.Second)
	s.Sweep()
	if s.Lean("api", "plain") || s.Lean("api", "big") || !s.Lean("api", "slow") {
		t.Fatalf("after a sweep: plain %v, big %v, slow %v; want only slow kept", s.Lean("api", "plain"), s.Lean("api", "big"), s.Lean("api", "slow"))
	}
	st, err := svc.Bucket(ctx, ledger.BucketRef{Limit: "api", Key: "slow"})
	if err != nil || st.Level.Decimal().LessThan(decimal.NewFromInt(49)) || st.Override != "slow" {
		t.Fatalf("slow after the sweep: %+v %v", st, err)
	}
}

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

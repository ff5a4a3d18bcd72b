package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/shopspring/decimal"
)

// TestSweepKeepsReachedMarks: a bucket that leaked empty is pruned, unless
// it keeps a reached threshold whose recovery its next write must emit;
// that write emits it, and then the bucket may go.
func TestSweepKeepsReachedMarks(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := memory.New(memory.WithClock(func() time.Time { return now }))
	svc := ledger.NewService(s)
	ctx := context.Background()
	th, _ := ledger.ParseThreshold("t", "5")
	for _, name := range []string{"plain", "marked"} {
		spec := ledger.LimitSpec{Capacity: decimal.NewFromInt(10), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Second}
		if name == "marked" {
			spec.Thresholds = []ledger.Threshold{th}
		}
		if _, err := svc.PutLimit(ctx, name, spec); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: name, Key: "k"}, Cost: decimal.NewFromInt(6)}}, ledger.Idempotency{}); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(time.Minute) // both leaked empty
	s.Sweep()
	if n := s.Buckets(); n != 1 {
		t.Fatalf("after the sweep %d buckets, want only the one with a reached threshold", n)
	}
	_, cursor, _ := svc.Events(ctx, "", 100)
	if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "marked", Key: "k"}, Cost: decimal.NewFromInt(1)}}, ledger.Idempotency{}); err != nil {
		t.Fatal(err)
	}
	evs, _, _ := svc.Events(ctx, cursor, 100)
	if len(evs) != 1 || evs[0].Type != ledger.EventThresholdRecovered || !evs[0].Used.Equal(decimal.NewFromInt(1)) {
		t.Fatalf("the write after the sweep: events %+v, want the recovery", evs)
	}
	now = now.Add(time.Minute)
	s.Sweep()
	if n := s.Buckets(); n != 0 {
		t.Fatalf("after the recovery and the leak, %d buckets are kept", n)
	}
}

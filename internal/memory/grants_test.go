package memory_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/shopspring/decimal"
)

// TestExpiredGrantsArePruned: the grants of buckets that are never granted
// or revoked again do not stay once expired.
func TestExpiredGrantsArePruned(t *testing.T) {
	clock := ledgertest.NewClock()
	s := memory.New(memory.WithClock(clock.Now))
	svc := ledger.NewService(s)
	ctx := t.Context()
	if _, err := svc.PutLimit(ctx, "l", ledger.LimitSpec{Capacity: decimal.NewFromInt(10), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Hour}); err != nil {
		t.Fatal(err)
	}
	grant := func(key string, d time.Duration) {
		t.Helper()
		if _, err := svc.AddGrant(ctx, ledger.BucketRef{Limit: "l", Key: key}, decimal.NewFromInt(5), clock.Now().Add(d), ledger.Idempotency{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 200 {
		grant("short-"+strconv.Itoa(i), time.Minute)
	}
	clock.Advance(time.Minute)
	for i := range 300 {
		grant("long-"+strconv.Itoa(i), time.Hour)
	}
	if n := s.GrantedBuckets(); n != 300 {
		t.Fatalf("%d buckets hold grants, want the 300 with unexpired ones", n)
	}
}

package memory_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/shopspring/decimal"
)

// TestClockReadUnderBucketLock: a Fillup that has read the clock holds its
// bucket, so a second Fillup of the bucket, which reads a later time, cannot
// be recorded before it. Call A's clock reading blocks until call B is done
// (or, when B cannot proceed because A holds the lock, for 100 ms); A read
// the earlier time, so history in id order must still run forward in time.
// With the clock read before the lock, B ran to completion while A waited,
// and A's entry came second with the earlier time.
func TestClockReadUnderBucketLock(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var armed atomic.Bool
	var calls atomic.Int64
	aRead, bDone := make(chan struct{}), make(chan struct{})
	clock := func() time.Time {
		if !armed.Load() {
			return t0
		}
		if calls.Add(1) == 1 { // call A
			close(aRead)
			select {
			case <-bDone:
			case <-time.After(100 * time.Millisecond):
			}
			return t0.Add(time.Second)
		}
		return t0.Add(2 * time.Second)
	}
	svc := ledger.NewService(memory.New(memory.WithClock(clock)))
	ctx := context.Background()
	if _, err := svc.PutLimit(ctx, "l", ledger.LimitSpec{Capacity: decimal.NewFromInt(10), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Hour, History: true}); err != nil {
		t.Fatal(err)
	}
	ref := ledger.BucketRef{Limit: "l", Key: "k"}
	fill := func() {
		if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: decimal.NewFromInt(1)}}, ledger.Idempotency{}); err != nil {
			t.Error(err)
		}
	}
	armed.Store(true)
	var wg sync.WaitGroup
	wg.Go(fill)
	<-aRead
	wg.Go(func() {
		defer close(bDone)
		fill()
	})
	wg.Wait()
	armed.Store(false)
	h, _, err := svc.History(ctx, ref, "", 10)
	if err != nil || len(h) != 2 {
		t.Fatalf("history = %+v, %v", h, err)
	}
	// Newest first by time; the newer must also be the later id.
	newer, older := h[0], h[1]
	if n, o := atoi(t, newer.ID), atoi(t, older.ID); n < o {
		t.Errorf("entry %s at %s was recorded before entry %s at %s: time runs backwards in id order",
			newer.ID, newer.Time, older.ID, older.Time)
	}
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("history id %q: %v", s, err)
	}
	return n
}

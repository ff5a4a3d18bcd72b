package webhook_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/budgetd/budgetd/client"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/budgetd/budgetd/internal/webhook"
	"github.com/shopspring/decimal"
)

// TestWriteHookOnWritesOnLimitsWithThresholds: the Service calls its write
// hook after an accepted write on a limit with thresholds (Fillup, Reserve,
// Commit, Release, Drain), and not for a limit without, a denied charge or
// a replay.
func TestWriteHookOnWritesOnLimitsWithThresholds(t *testing.T) {
	ctx := context.Background()
	var calls atomic.Int64
	svc := ledger.NewService(memory.New(), ledger.WithWriteHook(func() { calls.Add(1) }))
	th, err := ledger.ParseThreshold("thresholds", "50%")
	if err != nil {
		t.Fatal(err)
	}
	spec := ledger.LimitSpec{Capacity: decimal.NewFromInt(10), LeakAmount: decimal.NewFromInt(1), LeakPer: 24 * time.Hour}
	if _, err := svc.PutLimit(ctx, "plain", spec); err != nil {
		t.Fatal(err)
	}
	spec.Thresholds = []ledger.Threshold{th}
	if _, err := svc.PutLimit(ctx, "watched", spec); err != nil {
		t.Fatal(err)
	}
	one := decimal.NewFromInt(1)
	expect := func(what string, want int64, call func() error) {
		t.Helper()
		before := calls.Load()
		if err := call(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := calls.Load() - before; got != want {
			t.Errorf("%s: the hook was called %d times, want %d", what, got, want)
		}
	}
	fill := func(limit, key string, cost int64, idem ledger.Idempotency) func() error {
		return func() error {
			_, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: limit, Key: key}, Cost: decimal.NewFromInt(cost)}}, idem)
			return err
		}
	}
	expect("a charge on a limit without thresholds", 0, fill("plain", "a", 1, ledger.Idempotency{}))
	expect("a charge on a limit with thresholds", 1, fill("watched", "a", 1, ledger.Idempotency{}))
	idem := ledger.Idempotency{Key: "k1"}
	expect("a charge with an Idempotency-Key", 1, fill("watched", "a", 1, idem))
	expect("its replay", 0, fill("watched", "a", 1, idem))
	expect("a denied charge", 0, fill("watched", "a", 100, ledger.Idempotency{}))
	expect("a multi-bucket charge on both limits", 1, func() error {
		_, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "plain", Key: "b"}, Cost: one},
			{Bucket: ledger.BucketRef{Limit: "watched", Key: "b"}, Cost: one}}, ledger.Idempotency{})
		return err
	})
	var holds []string
	for range 2 {
		expect("a reserve", 1, func() error {
			r, err := svc.Reserve(ctx, ledger.BucketRef{Limit: "watched", Key: "c"}, one, 0, ledger.Idempotency{}, nil)
			holds = append(holds, r.Reservation.ID)
			return err
		})
	}
	expect("a commit", 1, func() error {
		_, err := svc.Commit(ctx, holds[0], decimal.NullDecimal{}, false, ledger.Idempotency{}, nil)
		return err
	})
	expect("a release", 1, func() error { _, err := svc.Release(ctx, holds[1], ledger.Idempotency{}, nil); return err })
	expect("a drain", 1, func() error {
		_, err := svc.Drain(ctx, ledger.BucketRef{Limit: "watched", Key: "a"}, one, ledger.Idempotency{}, nil)
		return err
	})
	expect("a drain of an empty bucket", 0, func() error {
		_, err := svc.Drain(ctx, ledger.BucketRef{Limit: "watched", Key: "empty"}, one, ledger.Idempotency{}, nil)
		return err
	})
}

// TestNudgeDeliversBeforeThePoll: with a poll of a minute, a crossing
// written through a Service whose write hook is the deliverer's Nudge
// arrives within seconds; without the nudge it would wait for the poll.
func TestNudgeDeliversBeforeThePoll(t *testing.T) {
	st := memory.New()
	r := newReceiver(t, nil)
	d := webhook.New(r.srv.URL, key(t), st, st, fast(webhook.WithPoll(time.Minute))...)
	em := newEmitter(t, st)
	em.svc = ledger.NewService(st, ledger.WithWriteHook(d.Nudge))
	run(t, d)
	charge := func(k string) time.Time {
		t.Helper()
		start := time.Now()
		_, err := em.svc.Fillup(context.Background(), []ledger.Item{{Bucket: ledger.BucketRef{Limit: em.limit, Key: k}, Cost: decimal.NewFromInt(1)}}, ledger.Idempotency{})
		if err != nil {
			t.Fatal(err)
		}
		return start
	}
	// The first crossing may be found by the first read; once it arrived,
	// the deliverer waits on an empty outbox for its minute.
	charge("first")
	r.waitFor(t, "the first crossing", 30*time.Second, func(es []client.Event) bool { return len(es) == 1 })
	for i := range 3 {
		start := charge("next")
		r.waitFor(t, "a crossing after a nudge", 10*time.Second, func(es []client.Event) bool { return len(es) == 2+i })
		t.Logf("crossing %d delivered %v after its charge", i+1, time.Since(start))
	}
}

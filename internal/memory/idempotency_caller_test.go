package memory_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/shopspring/decimal"
)

// TestIdempotencyOneCallerCannotFillTheTable: a caller sending fresh
// Idempotency-Keys without end (issue 29: ~208k of them made every keyed
// write of every caller 503 for a day) is stopped at its share, half of the
// table by default, and refused alone: another caller's fresh key is
// stored, the first caller's stored keys replay, a refused call charges
// nothing, and the share comes back as its records expire.
func TestIdempotencyOneCallerCannotFillTheTable(t *testing.T) {
	ctx := context.Background()
	clock := ledgertest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithIdempotencyLimits(10, 0))
	if _, err := s.PutLimit(ctx, ledger.Limit{Name: "m", Capacity: decimal.NewFromInt(1_000_000), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Hour}); err != nil {
		t.Fatal(err)
	}
	ref := ledger.BucketRef{Limit: "m", Key: "k"}
	charge := []ledger.Charge{{Bucket: ref, Cost: decimal.NewFromInt(1)}}
	idem := func(caller, key string) ledger.Idempotency {
		return ledger.Idempotency{Scope: "fillup|m|k", Key: key, Hash: "h", Caller: caller}
	}
	stored := 0
	for i := range 20 {
		_, err := s.Fillup(ctx, charge, idem("key:a", "a"+strconv.Itoa(i)))
		switch {
		case err == nil:
			stored++
		case !errors.Is(err, ledger.ErrIdempotencyFull):
			t.Fatal(err)
		}
	}
	if stored != 5 {
		t.Fatalf("caller a stored %d records of a table of 10, want its share of 5", stored)
	}
	if sn, err := s.Inspect(ctx, ref); err != nil || sn.State.Level.String() != "5" {
		t.Fatalf("level %v (%v), want 5: a refused call charges nothing", sn.State.Level, err)
	}
	// A failed call (an unknown limit) leaves no record: the table's other
	// half still has room for all of b's five.
	if _, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ledger.BucketRef{Limit: "none", Key: "k"}, Cost: decimal.NewFromInt(1)}}, idem("key:b", "b-failed")); !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Fatalf("unknown limit: %v", err)
	}
	for i := range 5 {
		if _, err := s.Fillup(ctx, charge, idem("key:b", "b"+strconv.Itoa(i))); err != nil {
			t.Fatalf("caller b, fresh key %d: %v", i, err)
		}
	}
	if out, err := s.Fillup(ctx, charge, idem("key:a", "a0")); err != nil || !out.Replayed {
		t.Fatalf("replay of a stored key: %+v %v", out, err)
	}
	clock.Advance(ledger.IdempotencyTTL + time.Second)
	if _, err := s.Fillup(ctx, charge, idem("key:a", "a-again")); err != nil {
		t.Fatalf("caller a after its records expired: %v", err)
	}
	if n, _ := s.IdempotencyUse(); n != 1 {
		t.Fatalf("%d records after expiry and one new key, want 1", n)
	}
}

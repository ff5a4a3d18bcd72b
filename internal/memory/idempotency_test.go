package memory_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/shopspring/decimal"
)

// TestIdempotencyBoundedByBytes sends many charges with fresh 255-byte keys
// to a store bounded at 1 MiB of records: the records never pass the bound
// (counted, and measured on the heap), a refused call charges nothing, a
// stored key still replays, and records reclaimed at expiry make room again.
func TestIdempotencyBoundedByBytes(t *testing.T) {
	const bound = 1 << 20
	ctx := context.Background()
	clock := ledgertest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithIdempotencyLimits(1_000_000, bound))
	if _, err := s.PutLimit(ctx, ledger.Limit{Name: "m", Capacity: decimal.NewFromInt(1_000_000), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Hour}); err != nil {
		t.Fatal(err)
	}
	ref := ledger.BucketRef{Limit: "m", Key: "k"}
	charge := []ledger.Charge{{Bucket: ref, Cost: decimal.NewFromInt(1)}}
	key := func(i int) ledger.Idempotency {
		k := strconv.Itoa(i)
		// Each key from a caller of its own: the table's bound, not a
		// caller's share of it, is under test.
		return ledger.Idempotency{Scope: "fillup|m|k", Key: k + strings.Repeat("x", 255-len(k)), Hash: strings.Repeat("h", 64), Caller: k}
	}
	before := heap()
	accepted, refused := 0, 0
	for i := range 20_000 {
		_, err := s.Fillup(ctx, charge, key(i))
		switch {
		case err == nil:
			accepted++
		case errors.Is(err, ledger.ErrIdempotencyFull):
			refused++
		default:
			t.Fatal(err)
		}
		if n, b := s.IdempotencyUse(); b > bound {
			t.Fatalf("after %d keys: %d records of %d bytes, past the bound of %d", i+1, n, b, bound)
		}
	}
	grown := int64(heap()) - int64(before)
	t.Logf("%d keys stored, %d refused, heap grew %d bytes", accepted, refused, grown)
	if accepted == 0 || refused == 0 {
		t.Fatalf("accepted %d, refused %d: want both", accepted, refused)
	}
	if grown > 2*bound {
		t.Fatalf("heap grew %d bytes with records bounded at %d", grown, bound)
	}
	sn, err := s.Inspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if !sn.State.Level.Equal(bucket.AmountOf(int64(accepted))) {
		t.Fatalf("level %s after %d accepted calls: a refused call charged", sn.State.Level, accepted)
	}
	if out, err := s.Fillup(ctx, charge, key(0)); err != nil || !out.Replayed {
		t.Fatalf("replay of a stored key when full: %+v, %v", out, err)
	}
	// Records are kept for the TTL, then reclaimed.
	clock.Advance(ledger.IdempotencyTTL)
	if _, err := s.Fillup(ctx, charge, key(-1)); err != nil {
		t.Fatalf("a new key after the records expired: %v", err)
	}
	if n, _ := s.IdempotencyUse(); n != 1 {
		t.Fatalf("%d records after expiry and one new key, want 1", n)
	}
}

// TestIdempotencyBoundedByCount: with room for 3 records, the fourth new key
// (each from another caller) is refused until a limit deletion forgets the records.
func TestIdempotencyBoundedByCount(t *testing.T) {
	ctx := context.Background()
	s := memory.New(memory.WithIdempotencyLimits(3, 0))
	if _, err := s.PutLimit(ctx, ledger.Limit{Name: "m", Capacity: decimal.NewFromInt(10), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Hour}); err != nil {
		t.Fatal(err)
	}
	ref := ledger.BucketRef{Limit: "m", Key: "k"}
	for i := range 4 {
		_, err := s.Drain(ctx, ref, decimal.NewFromInt(1), ledger.Idempotency{Scope: "drain|m|k", Key: strconv.Itoa(i), Hash: "h", Caller: strconv.Itoa(i)}, nil)
		if i < 3 && err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
		if i == 3 && !errors.Is(err, ledger.ErrIdempotencyFull) {
			t.Fatalf("fourth key: %v, want ErrIdempotencyFull", err)
		}
	}
	if err := s.DeleteLimit(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if n, b := s.IdempotencyUse(); n != 0 || b != 0 {
		t.Fatalf("after the delete: %d records of %d bytes, want none", n, b)
	}
}

package memory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/shopspring/decimal"
)

// BenchmarkFillupOverrides compares a Fillup on a limit without overrides
// with one on a limit with 100,000 (50,000 exact keys, 50,000 prefixes),
// on one hot key that a prefix covers and spread over 100,000 keys, half
// with an exact override and half under a prefix (docs/terms.md).
func BenchmarkFillupOverrides(b *testing.B) {
	const n = 100_000
	keys := make([]string, 0, n)
	for i := range n / 2 {
		keys = append(keys, fmt.Sprintf("cust-%06d", i), fmt.Sprintf("org-%05d-team", i))
	}
	for _, with := range []bool{false, true} {
		ctx := context.Background()
		svc := ledger.NewService(memory.New())
		if _, err := svc.PutLimit(ctx, "api", ledger.LimitSpec{Capacity: decimal.New(1, 12), LeakAmount: decimal.New(1, 12), LeakPer: time.Second}); err != nil {
			b.Fatal(err)
		}
		for i := range n / 2 {
			if !with {
				break
			}
			for _, p := range []string{fmt.Sprintf("cust-%06d", i), fmt.Sprintf("org-%05d-*", i)} {
				if _, err := svc.PutOverride(ctx, "api", ledger.Override{Pattern: p, Capacity: decimal.NewNullDecimal(decimal.New(5, 11))}); err != nil {
					b.Fatal(err)
				}
			}
		}
		for _, spread := range []bool{false, true} {
			name := fmt.Sprintf("overrides=%d/hot", map[bool]int{true: n}[with])
			if spread {
				name = fmt.Sprintf("overrides=%d/spread", map[bool]int{true: n}[with])
			}
			b.Run(name, func(b *testing.B) {
				items := []ledger.Item{{Bucket: ledger.BucketRef{Limit: "api", Key: "org-01234-team"}, Cost: decimal.New(1, -2)}}
				i := 0
				for b.Loop() {
					if spread {
						items[0].Bucket.Key = keys[i%len(keys)]
						i += 7919 // a prime: every key, not in order
					}
					if _, err := svc.Fillup(ctx, items, ledger.Idempotency{}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

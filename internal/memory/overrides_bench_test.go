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
// with one on a limit with 100,000 (half exact, half prefixes), on a key
// that a prefix override covers (docs/terms.md).
func BenchmarkFillupOverrides(b *testing.B) {
	for _, n := range []int{0, 100_000} {
		b.Run(fmt.Sprintf("overrides=%d", n), func(b *testing.B) {
			ctx := context.Background()
			svc := ledger.NewService(memory.New())
			if _, err := svc.PutLimit(ctx, "api", ledger.LimitSpec{Capacity: decimal.New(1, 12), LeakAmount: decimal.New(1, 12), LeakPer: time.Second}); err != nil {
				b.Fatal(err)
			}
			for i := range n / 2 {
				for _, p := range []string{fmt.Sprintf("cust-%06d", i), fmt.Sprintf("org-%05d-*", i)} {
					if _, err := svc.PutOverride(ctx, "api", ledger.Override{Pattern: p, Capacity: decimal.NewNullDecimal(decimal.New(5, 11))}); err != nil {
						b.Fatal(err)
					}
				}
			}
			items := []ledger.Item{{Bucket: ledger.BucketRef{Limit: "api", Key: "org-01234-team"}, Cost: decimal.New(1, -2)}}
			b.ResetTimer()
			for b.Loop() {
				if _, err := svc.Fillup(ctx, items, ledger.Idempotency{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

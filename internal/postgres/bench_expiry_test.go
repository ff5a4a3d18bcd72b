package postgres_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/postgres"
)

// BenchmarkFillupOverrideTerms measures a Fillup (one bucket per goroutine,
// coalescing on) on a leaky limit without overrides ("none"), and on keys
// under an override without an expiry that changes the leak, exact
// ("exact") or a prefix ("prefix"), on a limit that also has a temporary
// rule change of another key ending after every write: the decisions that
// must not pay for settling the end of a temporary rule change
// (docs/postgres.md "Overrides").
func BenchmarkFillupOverrideTerms(b *testing.B) {
	for _, terms := range []string{"none", "exact", "prefix"} {
		b.Run(terms, func(b *testing.B) {
			s := open(b, postgres.WithMaxConns(16), postgres.WithMaxAttempts(100), postgres.WithTimeout(time.Minute))
			ctx := context.Background()
			svc := ledger.NewService(s)
			if _, err := svc.PutLimit(ctx, "b", ledger.LimitSpec{Capacity: dec("1000000000000"), LeakAmount: dec("1"), LeakPer: time.Second, History: true}); err != nil {
				b.Fatal(err)
			}
			put := func(o ledger.Override) {
				if _, err := svc.PutOverride(ctx, "b", o); err != nil {
					b.Fatal(err)
				}
			}
			if terms != "none" {
				put(ledger.Override{Pattern: "other", LeakAmount: dec("3"), LeakPer: time.Second, ExpiresAt: time.Now().Add(24 * time.Hour).Truncate(time.Microsecond)})
			}
			switch terms {
			case "prefix":
				put(ledger.Override{Pattern: "k*", LeakAmount: dec("2"), LeakPer: time.Second})
			case "exact": // more than the goroutines of RunParallel
				for i := 1; i <= 64; i++ {
					put(ledger.Override{Pattern: fmt.Sprint("k", i), LeakAmount: dec("2"), LeakPer: time.Second})
				}
			}
			var g atomic.Int64
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				key := fmt.Sprint("k", g.Add(1))
				items := []ledger.Charge{{Bucket: ledger.BucketRef{Limit: "b", Key: key}, Cost: dec("1")}}
				for pb.Next() {
					if _, err := s.Fillup(ctx, items, ledger.Idempotency{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

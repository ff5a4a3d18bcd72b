package memory_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/shopspring/decimal"
)

func TestConformance(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T, clock *ledgertest.Clock) ledger.Store {
		return memory.New(memory.WithClock(clock.Now))
	})
}

// BenchmarkMemoryPerRecord reports the heap cost of what the store keeps: a
// bucket with a level (one Fillup each, history off), and an idempotency
// record (the same, with an Idempotency-Key).
func BenchmarkMemoryPerRecord(b *testing.B) {
	for _, withKey := range []bool{false, true} {
		name := "bucket"
		if withKey {
			name = "bucket+idempotency"
		}
		b.Run(name, func(b *testing.B) {
			const n = 100_000
			ctx := context.Background()
			for i := 0; i < b.N; i++ {
				s := memory.New()
				svc := ledger.NewService(s)
				if _, err := svc.PutLimit(ctx, "m", ledger.LimitSpec{Capacity: decimal.NewFromInt(1000), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Hour}); err != nil {
					b.Fatal(err)
				}
				before := heap()
				for k := 0; k < n; k++ {
					var idem ledger.Idempotency
					if withKey {
						idem = ledger.Idempotency{Scope: "fillup|m|k" + strconv.Itoa(k), Key: "key-" + strconv.Itoa(k), Hash: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
					}
					item := ledger.Item{Bucket: ledger.BucketRef{Limit: "m", Key: "k" + strconv.Itoa(k)}, Cost: decimal.NewFromInt(1)}
					if _, err := svc.Fillup(ctx, []ledger.Item{item}, idem); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(heap()-before)/n, "B/record")
				runtime.KeepAlive(s)
			}
		})
	}
}

func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

package mysql_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/mysql"
)

// BenchmarkFillup measures Store.Fillup against the test server with the
// decision cache off and on: one bucket per goroutine ("spread", which the
// cache hits after each goroutine's first call) or one for all ("hot"), at
// both isolation levels (docs/mysql.md "Round trips and the clock").
func BenchmarkFillup(b *testing.B) {
	for _, iso := range []string{mysql.RepeatableRead, mysql.ReadCommitted} {
		for _, hot := range []bool{false, true} {
			for _, cache := range []bool{false, true} {
				b.Run(fmt.Sprintf("%s/hot=%v/cache=%v", iso, hot, cache), func(b *testing.B) {
					opts := []mysql.Option{mysql.WithIsolation(iso), mysql.WithPruneInterval(0), mysql.WithTimeout(time.Minute)}
					if cache {
						opts = append(opts, mysql.WithCache(mysql.DefaultCacheEntries, mysql.DefaultCacheBytes))
					}
					benchFillup(b, hot, open(b, newDatabase(b), opts...))
				})
			}
		}
	}
}

func benchFillup(b *testing.B, hot bool, s *mysql.Store) {
	ctx := context.Background()
	if _, err := s.PutLimit(ctx, ledger.Limit{Name: "b", Capacity: decimal.RequireFromString("1000000000000"), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Second, History: true}); err != nil {
		b.Fatal(err)
	}
	var g atomic.Int64
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprint("k", g.Add(1))
		if hot {
			key = "hot"
		}
		items := []ledger.Charge{{Bucket: ledger.BucketRef{Limit: "b", Key: key}, Cost: decimal.NewFromInt(1)}}
		for pb.Next() {
			if out, err := s.Fillup(ctx, items, ledger.Idempotency{}); err != nil || !out.Accepted {
				b.Fatalf("Fillup: %+v, %v", out, err)
			}
		}
	})
	b.StopTimer()
	if hits, misses, conflicts := s.CacheStats(); hits+misses > 0 {
		b.ReportMetric(float64(hits)/float64(hits+misses), "hit-rate")
		b.ReportMetric(float64(conflicts)/float64(b.N), "conflicts/op")
	}
}

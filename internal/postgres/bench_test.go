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

// BenchmarkFillup measures Store.Fillup against the test server: one bucket
// per goroutine ("spread") or one for all ("hot"), at both isolation levels,
// with the coalescing of one bucket's concurrent Fillups on and off.
func BenchmarkFillup(b *testing.B) {
	for _, iso := range []string{"read-committed", "serializable"} {
		for _, hot := range []bool{false, true} {
			for _, co := range []bool{true, false} {
				b.Run(fmt.Sprintf("%s/hot=%v/coalesce=%v", iso, hot, co), func(b *testing.B) {
					benchFillup(b, hot, postgres.WithIsolation(iso), postgres.WithCoalescing(co))
				})
			}
		}
	}
}

// BenchmarkFillupPool2 is BenchmarkFillup at READ COMMITTED through a pool
// of 2 connections, so that calls queue for connections as they do behind a
// loaded HTTP server (more requests than connections): coalescing then also
// batches calls of different buckets.
func BenchmarkFillupPool2(b *testing.B) {
	for _, hot := range []bool{false, true} {
		for _, co := range []bool{true, false} {
			b.Run(fmt.Sprintf("hot=%v/coalesce=%v", hot, co), func(b *testing.B) {
				benchFillup(b, hot, postgres.WithCoalescing(co), postgres.WithMaxConns(2))
			})
		}
	}
}

func benchFillup(b *testing.B, hot bool, opts ...postgres.Option) {
	s := open(b, append([]postgres.Option{postgres.WithMaxConns(16), postgres.WithMaxAttempts(100), postgres.WithTimeout(time.Minute)}, opts...)...)
	ctx := context.Background()
	if _, err := s.PutLimit(ctx, ledger.Limit{Name: "b", Capacity: dec("1000000000000"), LeakAmount: dec("1"), LeakPer: time.Second, History: true}); err != nil {
		b.Fatal(err)
	}
	var g atomic.Int64
	before := s.Stats()
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprint("k", g.Add(1))
		if hot {
			key = "hot"
		}
		items := []ledger.Charge{{Bucket: ledger.BucketRef{Limit: "b", Key: key}, Cost: dec("1")}}
		for pb.Next() {
			if _, err := s.Fillup(ctx, items, ledger.Idempotency{}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	after := s.Stats()
	b.ReportMetric(float64(after.SerializationRetries-before.SerializationRetries)/float64(b.N), "retries/op")
	if n := after.Batches - before.Batches; n > 0 {
		b.ReportMetric(float64(after.Batched-before.Batched)/float64(n), "calls/batch")
	}
}

package redis

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	goredis "github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"
)

// benchStore opens a store on BUDGETD_TEST_REDIS with a fresh prefix.
func benchStore(b *testing.B, history bool) (*ledger.Service, func()) {
	url := os.Getenv("BUDGETD_TEST_REDIS")
	if url == "" {
		b.Skip("BUDGETD_TEST_REDIS is not set")
	}
	prefix := testPrefix()
	s, err := Open(context.Background(), url, WithPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	svc := ledger.NewService(s)
	if _, err := svc.PutLimit(context.Background(), "l", ledger.LimitSpec{Capacity: decimal.New(1, 12), LeakAmount: decimal.NewFromInt(1000), LeakPer: time.Second, History: history}); err != nil {
		b.Fatal(err)
	}
	return svc, func() {
		_ = s.scanKeys(context.Background(), prefix+":*", func(ctx context.Context, c goredis.Cmdable, ks []string) error {
			return c.Unlink(ctx, ks...).Err()
		})
		s.Close()
	}
}

// BenchmarkFillup measures accepted Fillups of 12.37 from parallel clients,
// on one hot bucket and spread over many: GOMAXPROCS clients, and 64 per
// GOMAXPROCS ("-c64"), where calls queue and go to Redis in pipelines
// (batch.go).
func BenchmarkFillup(b *testing.B) {
	for _, c := range []struct {
		name    string
		keys    int64
		history bool
		par     int
	}{{"hot", 1, false, 1}, {"spread", 100000, false, 1}, {"spread-history", 100000, true, 1},
		{"hot-c64", 1, false, 64}, {"spread-c64", 100000, false, 64}} {
		b.Run(c.name, func(b *testing.B) {
			svc, done := benchStore(b, c.history)
			defer done()
			var n atomic.Int64
			cost := decimal.RequireFromString("12.37")
			b.SetParallelism(c.par)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := fmt.Sprint(n.Add(1) % c.keys)
					if _, err := svc.Fillup(context.Background(), []ledger.Item{{Bucket: ledger.BucketRef{Limit: "l", Key: key}, Cost: cost}}, ledger.Idempotency{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

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

// benchStore opens a store on BUDGETD_TEST_REDIS with a fresh prefix and
// the limit "l" as spec says.
func benchStore(b *testing.B, spec ledger.LimitSpec) (*ledger.Service, func()) {
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
	if _, err := svc.PutLimit(context.Background(), "l", spec); err != nil {
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
	for _, c := range []fillupCase{{"hot", 1, false, 1}, {"spread", 100000, false, 1}, {"spread-history", 100000, true, 1},
		{"hot-c64", 1, false, 64}, {"spread-c64", 100000, false, 64}} {
		b.Run(c.name, func(b *testing.B) { benchFillup(b, c, nil) })
	}
}

// BenchmarkFillupThresholds is BenchmarkFillup's hot and spread cases on
// the same limit without thresholds ("none") and with three that the load
// never reaches ("th": 50%, 80% and 9·10^11 of a capacity of 10^12), one
// after the other, so -count alternates them: issue 25 wants "th" within
// 10% of "none" (fillup_lean serves both while nothing is reached).
func BenchmarkFillupThresholds(b *testing.B) {
	var th []ledger.Threshold
	for _, s := range []string{"50%", "80%", "900000000000"} {
		t, err := ledger.ParseThreshold("thresholds", s)
		if err != nil {
			b.Fatal(err)
		}
		th = append(th, t)
	}
	for _, c := range []fillupCase{{"hot", 1, false, 1}, {"spread", 100000, false, 1}} {
		b.Run(c.name+"/none", func(b *testing.B) { benchFillup(b, c, nil) })
		b.Run(c.name+"/th", func(b *testing.B) { benchFillup(b, c, th) })
	}
}

// fillupCase is one load of the Fillup benchmarks: keys buckets, history,
// par clients per GOMAXPROCS.
type fillupCase struct {
	name    string
	keys    int64
	history bool
	par     int
}

// benchFillup measures accepted Fillups of 12.37 under the load c, on
// BenchmarkFillup's limit with thresholds th.
func benchFillup(b *testing.B, c fillupCase, th []ledger.Threshold) {
	svc, done := benchStore(b, ledger.LimitSpec{Capacity: decimal.New(1, 12), LeakAmount: decimal.NewFromInt(1000), LeakPer: time.Second,
		History: c.history, Thresholds: th})
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
}

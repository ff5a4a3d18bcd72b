package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
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

// BenchmarkSpread is the spread load of issue 44 at the store: 64
// goroutines charging random buckets of 100,000 through the default pool
// and batch slots, with the set-based batch (WithSetBatch) off and on.
func BenchmarkSpread(b *testing.B) {
	for _, set := range []bool{false, true} {
		b.Run(fmt.Sprintf("set=%v", set), func(b *testing.B) {
			s := open(b, postgres.WithSetBatch(set), postgres.WithMaxAttempts(100), postgres.WithTimeout(time.Minute))
			ctx := context.Background()
			if _, err := s.PutLimit(ctx, ledger.Limit{Name: "b", Capacity: dec("1000000000000"), LeakAmount: dec("1"), LeakPer: time.Second, History: true}); err != nil {
				b.Fatal(err)
			}
			var g atomic.Uint64
			before, cpu := s.Stats(), serverCPU(b, s)
			b.SetParallelism(64 / runtime.GOMAXPROCS(0))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				r := rand.New(rand.NewPCG(g.Add(1), 1))
				for pb.Next() {
					items := []ledger.Charge{{Bucket: ledger.BucketRef{Limit: "b", Key: fmt.Sprint("k", r.IntN(100_000))}, Cost: dec("1")}}
					if _, err := s.Fillup(ctx, items, ledger.Idempotency{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			after := s.Stats()
			if n := after.Batches - before.Batches; n > 0 {
				b.ReportMetric(float64(after.Batched-before.Batched)/float64(n), "calls/batch")
			}
			b.ReportMetric(float64(after.SetBatches-before.SetBatches), "set-batches")
			// Clock ticks are 10 ms on Linux (USER_HZ 100).
			b.ReportMetric((serverCPU(b, s)-cpu)*1e4/float64(b.N), "pg-µs/op")
		})
	}
}

// serverCPU is the CPU time, in clock ticks, that the test server's
// postmaster and its processes have used, reaped ones included (from
// /proc; 0 where it cannot be read).
func serverCPU(b *testing.B, s *postgres.Store) float64 {
	var dir string
	if err := s.Pool().QueryRow(context.Background(), "SHOW data_directory").Scan(&dir); err != nil {
		return 0
	}
	raw, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pm := strings.SplitN(string(raw), "\n", 2)[0]
	stat := func(pid string) []string {
		raw, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			return nil
		}
		s := string(raw)
		return strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	}
	ticks := func(f []string, from, to int) float64 {
		var t float64
		for i := from; i <= to; i++ {
			v, _ := strconv.ParseFloat(f[i], 64)
			t += v
		}
		return t
	}
	f := stat(pm)
	if f == nil {
		return 0
	}
	total := ticks(f, 11, 14) // utime, stime, cutime, cstime
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if c := stat(p.Name()); c != nil && c[1] == pm {
			total += ticks(c, 11, 12)
		}
	}
	return total
}

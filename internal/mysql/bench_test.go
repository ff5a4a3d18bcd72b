package mysql_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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

// BenchmarkSpread measures Store.Fillup spread over many keys of one limit
// from 64 goroutines (the bench tool's spread case, without HTTP: a leaky
// limit without history), over 100,000 keys (most calls on a bucket not
// written yet), over 10,000 (each written once first: every call on a
// bucket this store wrote, cached) and on one key (the hot key, written
// first),
// with group commit off (slots=0), on with one batch at the database at a
// time (the default) and with 4 (the default until 2026-12-03): the calls
// per batch, the calls decided alone (a batch slot free, or sent back by
// their batch), the round trips per call (the
// commands sent on the store's connections), the cached decisions whose
// write found a row changed, and the CPU per call of the
// test server (mariadbd, from /proc when it runs on this machine) and of
// this process. On a shared machine the CPU per call is the steadier
// figure; the time per call follows the server's commit latency.
func BenchmarkSpread(b *testing.B) {
	for _, keys := range []int{100_000, 10_000, 1} {
		for _, slots := range []int{0, 1, 4} {
			b.Run(fmt.Sprintf("keys=%d/slots=%d", keys, slots), func(b *testing.B) {
				var writes atomic.Int64
				url := newDatabase(b)
				opts := []mysql.Option{mysql.WithPruneInterval(0), mysql.WithTimeout(time.Minute), mysql.WithGroupCommit(slots > 0), mysql.WithDial(countingDial(&writes))}
				if slots > 0 {
					opts = append(opts, mysql.WithGroupSlots(slots))
				}
				benchSpread(b, open(b, url, opts...), keys, &writes, serverPID(b, url))
			})
		}
	}
}

func benchSpread(b *testing.B, s *mysql.Store, keys int, writes *atomic.Int64, pid int) {
	ctx := context.Background()
	if _, err := s.PutLimit(ctx, ledger.Limit{Name: "b", Capacity: decimal.RequireFromString("1000000000000"), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Second}); err != nil {
		b.Fatal(err)
	}
	if keys <= 10_000 {
		// Every bucket written once first (and so cached).
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := next.Add(1) - 1; k < int64(keys); k = next.Add(1) - 1 {
					if _, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ledger.BucketRef{Limit: "b", Key: fmt.Sprint("k", k)}, Cost: decimal.NewFromInt(1)}}, ledger.Idempotency{}); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	var g atomic.Uint64
	batches0, calls0, grouped0 := s.GroupCommitStats()
	_, _, conflicts0 := s.CacheStats()
	w0, db0, self0 := writes.Load(), procTicks(pid), selfCPU()
	b.SetParallelism(64 / runtime.GOMAXPROCS(0))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewPCG(g.Add(1), 1))
		for pb.Next() {
			items := []ledger.Charge{{Bucket: ledger.BucketRef{Limit: "b", Key: fmt.Sprint("k", r.IntN(keys))}, Cost: decimal.NewFromInt(1)}}
			if out, err := s.Fillup(ctx, items, ledger.Idempotency{}); err != nil || !out.Accepted {
				b.Errorf("Fillup: %+v, %v", out, err)
				return
			}
		}
	})
	b.StopTimer()
	batches, calls, grouped := s.GroupCommitStats()
	if n := batches - batches0; n > 0 {
		b.ReportMetric(float64(calls-calls0)/float64(n), "calls/batch")
		b.ReportMetric(float64((calls-calls0)-(grouped-grouped0))/float64(b.N), "alone/op")
	}
	_, _, conflicts := s.CacheStats()
	b.ReportMetric(float64(conflicts-conflicts0)/float64(b.N), "conflicts/op")
	b.ReportMetric(float64(writes.Load()-w0)/float64(b.N), "trips/op")
	if pid > 0 {
		// Clock ticks are 10 ms on Linux (USER_HZ 100).
		b.ReportMetric(float64(procTicks(pid)-db0)*1e4/float64(b.N), "db-µs/op")
	}
	b.ReportMetric(float64(selfCPU()-self0)/1e3/float64(b.N), "go-µs/op")
}

// serverPID is the test server's process id, 0 when it cannot be read (a
// server on another machine, say).
func serverPID(b *testing.B, url string) int {
	db, _ := admin(b)
	var file string
	if err := db.QueryRow("SELECT @@pid_file").Scan(&file); err != nil {
		return 0
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	if procTicks(pid) == 0 {
		return 0
	}
	return pid
}

// procTicks is the user and system time of process pid, in clock ticks.
func procTicks(pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st
}

// selfCPU is this process's user and system time, in nanoseconds.
func selfCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// countingDial makes connections whose writes (round trips, as
// countingConn's) writes counts.
func countingDial(writes *atomic.Int64) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, writes: writes}, nil
	}
}

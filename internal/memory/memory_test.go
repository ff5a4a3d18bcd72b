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

func TestOverrideExpiry(t *testing.T) {
	factory := func(t *testing.T, clock *ledgertest.Clock) ledger.Store {
		return memory.New(memory.WithClock(clock.Now))
	}
	ledgertest.RunOverrideExpiry(t, factory)
	ledgertest.RunOverrideExpiryChanges(t, factory)
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

// TestHistoryCap writes more than ledger.HistoryPerBucket entries to one bucket and
// reads them all back: exactly the newest ledger.HistoryPerBucket are listed, newest
// first, however far past the cap the bucket has been written.
func TestHistoryCap(t *testing.T) {
	ctx := context.Background()
	clock := ledgertest.NewClock()
	ref := ledger.BucketRef{Limit: "h", Key: "k"}
	for _, total := range []int{ledger.HistoryPerBucket + 1, ledger.HistoryPerBucket + ledger.HistoryPerBucket/8 + 1, 3*ledger.HistoryPerBucket + 7} {
		t.Run(strconv.Itoa(total), func(t *testing.T) {
			s := memory.New(memory.WithClock(clock.Now))
			if _, err := s.PutLimit(ctx, ledger.Limit{Name: "h", Capacity: decimal.NewFromInt(1_000_000_000), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Hour, History: true}); err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= total; i++ {
				clock.Advance(time.Microsecond)
				item := ledger.Charge{Bucket: ref, Cost: decimal.NewFromInt(int64(i))}
				if _, err := s.Fillup(ctx, []ledger.Charge{item}, ledger.Idempotency{}); err != nil {
					t.Fatal(err)
				}
			}
			var got []ledger.Entry
			cursor := ""
			for {
				page, next, err := s.History(ctx, ref, cursor, ledger.MaxPage)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, page...)
				if next == "" {
					break
				}
				cursor = next
			}
			if len(got) != ledger.HistoryPerBucket {
				t.Fatalf("listed %d entries, want %d", len(got), ledger.HistoryPerBucket)
			}
			for j, e := range got {
				if want := decimal.NewFromInt(int64(total - j)); !e.Amount.Equal(want) {
					t.Fatalf("entry %d has amount %s, want %s (the newest first)", j, e.Amount, want)
				}
			}
		})
	}
}

// BenchmarkFillupFullHistory charges one bucket whose history is full: the
// cost per write must not grow with ledger.HistoryPerBucket.
func BenchmarkFillupFullHistory(b *testing.B) {
	ctx := context.Background()
	s := memory.New()
	if _, err := s.PutLimit(ctx, ledger.Limit{Name: "h", Capacity: decimal.NewFromInt(1_000_000_000_000), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Hour, History: true}); err != nil {
		b.Fatal(err)
	}
	item := []ledger.Charge{{Bucket: ledger.BucketRef{Limit: "h", Key: "k"}, Cost: decimal.NewFromInt(1)}}
	for range ledger.HistoryPerBucket + ledger.HistoryPerBucket/8 {
		if _, err := s.Fillup(ctx, item, ledger.Idempotency{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Fillup(ctx, item, ledger.Idempotency{}); err != nil {
			b.Fatal(err)
		}
	}
}

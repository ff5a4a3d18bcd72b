package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/postgres"
	"github.com/shopspring/decimal"
)

// allEvents reads every event after cursor in pages of n.
func allEvents(t *testing.T, s *postgres.Store, cursor string, n int) ([]ledger.OutboxEvent, string) {
	t.Helper()
	var out []ledger.OutboxEvent
	for {
		page, next, err := s.Events(context.Background(), cursor, n)
		if err != nil {
			t.Fatalf("Events(%q): %v", cursor, err)
		}
		if len(page) == 0 {
			return out, cursor
		}
		out = append(out, page...)
		cursor = next
	}
}

// TestEventsCoalescedCrossing: 50 Fillups of 2 decided as one coalesced
// batch (budgetd_fillup_batch) that take a bucket past 80 of 100 emit one
// crossed event, with the use after the item that crossed; and 50 more sent
// concurrently through a small pool (so that they queue and coalesce) on
// another bucket do the same. At both isolation levels.
func TestEventsCoalescedCrossing(t *testing.T) {
	for _, iso := range []string{"read-committed", "serializable"} {
		t.Run(iso, func(t *testing.T) {
			clock := ledgertest.NewClock()
			s := open(t, postgres.WithIsolation(iso), postgres.WithClock(clock.Now), postgres.WithMaxConns(2))
			ctx := context.Background()
			th, _ := ledger.ParseThreshold("thresholds", "80%")
			if _, err := s.PutLimit(ctx, ledger.Limit{Name: "c", Capacity: dec("100"), LeakAmount: dec("1"), LeakPer: time.Hour,
				Thresholds: []ledger.Threshold{th}}); err != nil {
				t.Fatal(err)
			}
			costs := make([]decimal.Decimal, 50)
			for i := range costs {
				costs[i] = dec("2")
			}
			_, errs := s.FillupBatch(ctx, ledger.BucketRef{Limit: "c", Key: "batched"}, costs)
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			for range 50 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ledger.BucketRef{Limit: "c", Key: "concurrent"}, Cost: dec("2")}}, ledger.Idempotency{}); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			evs, _ := allEvents(t, s, "", 10)
			var got []string
			for _, ev := range evs {
				got = append(got, fmt.Sprintf("%s %s %s used=%s", ev.Bucket.Key, ev.Type, ev.Threshold, ev.Used))
			}
			want := []string{"batched threshold.crossed 80% used=80", "concurrent threshold.crossed 80% used=80"}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("events %q, want %q", got, want)
			}
		})
	}
}

// TestEventsGapFreeUnderWriters: a reader polling Events in small pages
// while 200 Fillups run concurrently on 20 buckets with thresholds sees
// every event exactly once, and each bucket's events in the order of its
// writes (use growing, thresholds crossed in order), at both isolation
// levels.
func TestEventsGapFreeUnderWriters(t *testing.T) {
	for _, iso := range []string{"read-committed", "serializable"} {
		t.Run(iso, func(t *testing.T) {
			clock := ledgertest.NewClock()
			s := open(t, postgres.WithIsolation(iso), postgres.WithClock(clock.Now), postgres.WithMaxConns(8))
			ctx := context.Background()
			var ths []ledger.Threshold
			for _, str := range []string{"2", "4", "6", "8"} {
				th, _ := ledger.ParseThreshold("thresholds", str)
				ths = append(ths, th)
			}
			if _, err := s.PutLimit(ctx, ledger.Limit{Name: "g", Capacity: dec("100"), LeakAmount: dec("1"), LeakPer: time.Hour, Thresholds: ths}); err != nil {
				t.Fatal(err)
			}
			var inv *ledger.InvalidError
			if _, _, err := s.Events(ctx, "x1", 10); !errors.As(err, &inv) || inv.Field != "after" {
				t.Fatalf("Events with a malformed cursor: %v, want invalid after", err)
			}
			const buckets, writes = 20, 200
			done := make(chan struct{})
			var seen []ledger.OutboxEvent
			readerDone := make(chan struct{})
			go func() {
				defer close(readerDone)
				cursor := ""
				for {
					select {
					case <-done:
						evs, _ := allEvents(t, s, cursor, 3)
						seen = append(seen, evs...)
						return
					default:
					}
					page, next, err := s.Events(ctx, cursor, 3)
					if err != nil {
						t.Error(err)
						return
					}
					seen = append(seen, page...)
					cursor = next
				}
			}()
			var wg sync.WaitGroup
			for w := range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range writes / 20 {
						ref := ledger.BucketRef{Limit: "g", Key: fmt.Sprintf("b%02d", (w+i)%buckets)}
						if _, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ref, Cost: dec("1")}}, ledger.Idempotency{}); err != nil {
							t.Error(err)
						}
					}
				}()
			}
			wg.Wait()
			close(done)
			<-readerDone
			ids := map[string]bool{}
			per := map[string][]string{}
			for _, ev := range seen {
				if ids[ev.ID] {
					t.Fatalf("event %s listed twice", ev.ID)
				}
				ids[ev.ID] = true
				per[ev.Bucket.Key] = append(per[ev.Bucket.Key], ev.Threshold+"@"+ev.Used.String())
			}
			if len(seen) != buckets*4 {
				t.Fatalf("%d events, want %d", len(seen), buckets*4)
			}
			for k, evs := range per {
				if fmt.Sprint(evs) != "[2@2 4@4 6@6 8@8]" {
					t.Errorf("bucket %s: events %v, want each threshold crossed once, in order", k, evs)
				}
			}
		})
	}
}

// TestPruneKeepsReachedMarks: the pruner deletes a bucket that leaked empty,
// unless it keeps a reached threshold whose recovery its next write must
// emit; that write emits it, and then the bucket goes. Events older than 7
// days are pruned.
func TestPruneKeepsReachedMarks(t *testing.T) {
	clock := ledgertest.NewClock()
	s := open(t, postgres.WithClock(clock.Now))
	ctx := context.Background()
	th, _ := ledger.ParseThreshold("thresholds", "5")
	for _, name := range []string{"plain", "marked"} {
		l := ledger.Limit{Name: name, Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: time.Second}
		if name == "marked" {
			l.Thresholds = []ledger.Threshold{th}
		}
		if _, err := s.PutLimit(ctx, l); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ledger.BucketRef{Limit: name, Key: "k"}, Cost: dec("6")}}, ledger.Idempotency{}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Minute) // both leaked empty
	if st, err := s.Prune(ctx); err != nil || st.EmptyBuckets != 1 {
		t.Fatalf("prune: %+v %v, want only the bucket without a reached threshold deleted", st, err)
	}
	_, cursor := allEvents(t, s, "", 100)
	if _, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ledger.BucketRef{Limit: "marked", Key: "k"}, Cost: dec("1")}}, ledger.Idempotency{}); err != nil {
		t.Fatal(err)
	}
	evs, _ := allEvents(t, s, cursor, 100)
	if len(evs) != 1 || evs[0].Type != ledger.EventThresholdRecovered || !evs[0].Used.Equal(dec("1")) {
		t.Fatalf("the write after the prune: events %+v, want the recovery", evs)
	}
	clock.Advance(8 * 24 * time.Hour)
	if st, err := s.Prune(ctx); err != nil || st.EmptyBuckets != 1 || st.Rows != 2 {
		t.Fatalf("prune after 8 days: %+v %v, want the bucket and both events deleted", st, err)
	}
	if evs, _ := allEvents(t, s, "", 100); len(evs) != 0 {
		t.Fatalf("events after 8 days: %+v", evs)
	}
}

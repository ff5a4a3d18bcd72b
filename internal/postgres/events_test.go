package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// TestThresholdFastPathEdges: budgetd_fillup_batch applies the threshold
// rule without budgetd_cross when the thresholds reached after its first
// and after its last accepted item equal the marks it starts from (no
// event; the bucket's write sets the marks). The edges where that shortcut
// could go wrong, at both isolation levels, each through a one-bucket batch
// and through a batch of two buckets (the limit's row read once for both):
//   - a batch that recovers and crosses again within one call (a leak took
//     the bucket below since its last write): its last item reaches what the
//     marks hold, its first does not;
//   - a new bucket whose first write lands exactly on a threshold (reached:
//     >=), alone and as the last item of a batch;
//   - a bucket exactly at a threshold it has marked: nothing;
//   - marks of another list of thresholds (a PUT changed them): recomputed
//     from the use before without an event and written with the bucket, so
//     that a later fall below is a recovery;
//   - marks of an earlier period: cleared without an event, then crossed
//     again in the new period, also by a bucket whose hold alone reaches the
//     threshold when the period starts.
func TestThresholdFastPathEdges(t *testing.T) {
	for _, iso := range []string{"read-committed", "serializable"} {
		for _, two := range []bool{false, true} {
			name := iso + "/one-bucket"
			if two {
				name = iso + "/two-buckets"
			}
			t.Run(name, func(t *testing.T) { testThresholdFastPathEdges(t, iso, two) })
		}
	}
}

func testThresholdFastPathEdges(t *testing.T, iso string, two bool) {
	clock := ledgertest.NewClock()
	clock.Set(time.Date(2026, 7, 30, 10, 0, 0, 0, time.UTC))
	s := open(t, postgres.WithIsolation(iso), postgres.WithClock(clock.Now))
	ctx := context.Background()
	ths := func(ss ...string) []ledger.Threshold {
		var out []ledger.Threshold
		for _, str := range ss {
			th, err := ledger.ParseThreshold("thresholds", str)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, th)
		}
		return out
	}
	leaky := ledger.Limit{Name: "f", Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: time.Second, Thresholds: ths("50%")}
	monthly := ledger.Limit{Name: "m", Capacity: dec("10"), Period: &ledger.Period{Every: "month", TZ: "UTC"}, Thresholds: ths("5")}
	for _, l := range []ledger.Limit{leaky, monthly} {
		if _, err := s.PutLimit(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	_, cursor := allEvents(t, s, "", 100)
	// batch decides costs on one bucket of limit lim as one call; with two,
	// the same call also charges 1 to the bucket "other" of limit "f".
	batch := func(lim, key string, costs ...string) {
		t.Helper()
		var refs []ledger.BucketRef
		var cs []decimal.Decimal
		for _, c := range costs {
			refs = append(refs, ledger.BucketRef{Limit: lim, Key: key})
			cs = append(cs, dec(c))
		}
		if two {
			refs = append(refs, ledger.BucketRef{Limit: "f", Key: "other"})
			cs = append(cs, dec("1"))
		}
		outs, errs := s.FillupCalls(ctx, refs, cs, make([]ledger.Idempotency, len(cs)))
		for i := range outs {
			if errs[i] != nil || !outs[i].Accepted {
				t.Fatalf("%s/%s %v: item %d: %+v %v", lim, key, costs, i, outs[i], errs[i])
			}
		}
	}
	step := func(what string, do func(), want ...string) {
		t.Helper()
		do()
		evs, next := allEvents(t, s, cursor, 100)
		var got []string
		for _, ev := range evs {
			if ev.Bucket.Key == "other" {
				continue
			}
			got = append(got, fmt.Sprintf("%s %s %s used=%s", ev.Bucket.Key, strings.TrimPrefix(ev.Type, "threshold."), ev.Threshold, ev.Used))
		}
		if strings.Join(got, "; ") != strings.Join(want, "; ") {
			t.Fatalf("%s: events [%s], want [%s]", what, strings.Join(got, "; "), strings.Join(want, "; "))
		}
		cursor = next
	}

	step("a new bucket filled exactly to 50%", func() { batch("f", "exact", "5") }, "exact crossed 50% used=5")
	step("a new bucket whose batch ends exactly at 50%", func() { batch("f", "ends", "2", "3") }, "ends crossed 50% used=5")
	step("fill 6", func() { batch("f", "a", "6") }, "a crossed 50% used=6")
	clock.Advance(3 * time.Second) // a leaks to 3, exact and ends to 2
	step("recover and cross again in one batch", func() { batch("f", "a", "1", "2") },
		"a recovered 50% used=4", "a crossed 50% used=6")
	clock.Advance(2 * time.Second) // 4
	step("a marked bucket filled exactly to its threshold", func() { batch("f", "a", "1") })
	clock.Advance(time.Second) // 4
	step("fill 0.5 below it", func() { batch("f", "a", "0.5") }, "a recovered 50% used=4.5")

	// A new list: the bucket at 4.5 already reaches 30%, marked without an
	// event by the write that finds the list changed.
	leaky.Thresholds = ths("30%", "80%")
	if _, err := s.PutLimit(ctx, leaky); err != nil {
		t.Fatal(err)
	}
	step("the first write under the new list", func() { batch("f", "a", "1") })
	clock.Advance(4 * time.Second) // 1.5: below 30%, which that write marked
	step("the next write below 30%", func() { batch("f", "a", "0.5") }, "a recovered 30% used=2")

	// A new month re-arms: no event at its first write, then crossed again.
	// A hold kept across the start counts in August too: the use before
	// the first write there already reaches 5, and still that write crosses.
	step("fill 6 in July", func() { batch("m", "p", "6") }, "p crossed 5 used=6")
	step("hold 6 in July", func() {
		if out, err := s.Reserve(ctx, ledger.BucketRef{Limit: "m", Key: "q"}, dec("6"), 72*time.Hour, ledger.Idempotency{}, nil); err != nil || !out.Accepted {
			t.Fatalf("reserve: %+v %v", out, err)
		}
	}, "q crossed 5 used=6")
	clock.Set(time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC))
	step("fill 1 in August", func() { batch("m", "p", "1") })
	step("fill 2 and 2 in August", func() { batch("m", "p", "2", "2") }, "p crossed 5 used=5")
	step("fill 1 beside the hold in August", func() { batch("m", "q", "1") }, "q crossed 5 used=7")
}

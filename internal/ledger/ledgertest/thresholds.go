package ledgertest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// thresholds parses a list of thresholds for a LimitSpec.
func thresholds(t *testing.T, ss ...string) []ledger.Threshold {
	t.Helper()
	out := make([]ledger.Threshold, len(ss))
	for i, s := range ss {
		th, err := ledger.ParseThreshold("thresholds", s)
		if err != nil {
			t.Fatalf("threshold %q: %v", s, err)
		}
		out[i] = th
	}
	return out
}

// eventsAfter reads every event after cursor in pages of n and returns them
// with the cursor to continue from.
func (e *env) eventsAfter(cursor string, n int) ([]ledger.OutboxEvent, string) {
	e.t.Helper()
	var all []ledger.OutboxEvent
	for {
		page, next, err := e.svc.Events(e.ctx, cursor, n)
		if err != nil {
			e.t.Fatalf("Events(%q, %d): %v", cursor, n, err)
		}
		if len(page) > n {
			e.t.Fatalf("Events(%q, %d) listed %d", cursor, n, len(page))
		}
		if len(page) == 0 {
			if next != cursor {
				e.t.Fatalf("Events(%q) with nothing new moved the cursor to %q", cursor, next)
			}
			return all, cursor
		}
		all = append(all, page...)
		cursor = next
	}
}

// eventText is the part of an event a test compares: "crossed 80% used=85 cap=100".
func eventText(ev ledger.OutboxEvent) string {
	return fmt.Sprintf("%s %s %s used=%s cap=%s", strings.TrimPrefix(ev.Type, "threshold."), ev.Bucket.Key, ev.Threshold, ev.Used, ev.Capacity)
}

// testThresholds: a write that reaches a threshold emits exactly one
// crossed event, one that leaves it (by drain or release; a leak or a
// period noticed at the next write) a recovered event; percentages follow
// the capacity, amounts do not; a denied charge emits nothing; a periodic
// limit re-arms at each period start without an event; 50 concurrent
// Fillups that cross 80% emit one event; every event is listed once across
// pages, in order.
func testThresholds(t *testing.T, e *env) {
	start := time.Date(2026, 7, 30, 10, 0, 0, 0, time.UTC)
	e.clock.Set(start)
	spec := ledger.LimitSpec{Capacity: dec("100"), Period: &ledger.Period{Every: "month"}, History: true, Thresholds: thresholds(t, "50%", "80%", "90")}
	l, err := e.svc.PutLimit(e.ctx, "spend", spec)
	if err != nil || len(l.Thresholds) != 3 || l.Thresholds[2].String() != "90" {
		t.Fatalf("PutLimit: %+v %v", l, err)
	}
	if got, err := e.svc.GetLimit(e.ctx, "spend"); err != nil || len(got.Thresholds) != 3 || got.Thresholds[0].String() != "50%" {
		t.Fatalf("GetLimit: %+v %v", got, err)
	}
	_, cursor := e.eventsAfter("", 10)
	st := &eventSteps{t: t, e: e, cursor: cursor, r: ref("spend", "team")}
	thresholdsWrites(st)
	thresholdsTermsChange(st, spec)
	thresholdsPaged(t, e)
	thresholdsLeaky(st, start)
}

// eventSteps checks the events of each write of a sequence on bucket r:
// those listed after cursor.
type eventSteps struct {
	t      *testing.T
	e      *env
	cursor string
	r      ledger.BucketRef
}

// step does the write and fails unless it emitted exactly want, at the
// write's time.
func (s *eventSteps) step(what string, do func(), want ...string) {
	t, e := s.t, s.e
	t.Helper()
	do()
	evs, next := e.eventsAfter(s.cursor, 2)
	var got []string
	for _, ev := range evs {
		got = append(got, eventText(ev))
		if ev.Bucket != s.r && ev.Bucket.Limit != "spend" {
			t.Fatalf("%s: event of another bucket %+v", what, ev)
		}
		if ev.ID == "" || !ev.Time.Equal(e.clock.Now().Truncate(time.Microsecond)) {
			t.Fatalf("%s: event id %q time %s, want the write's time %s", what, ev.ID, ev.Time, e.clock.Now())
		}
	}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("%s: events\n %s\nwant\n %s", what, strings.Join(got, "; "), strings.Join(want, "; "))
	}
	s.cursor = next
}

// thresholdsWrites: fillups, a denial, a drain, holds reserved, released
// and committed cross and leave the thresholds of limit spend (50%, 80%,
// 90 of 100), each once.
func thresholdsWrites(st *eventSteps) {
	t, e, r := st.t, st.e, st.r
	st.step("fillup 40", func() { e.fillup(r, "40") })
	st.step("fillup 15", func() { e.fillup(r, "15") }, "crossed team 50% used=55 cap=100")
	st.step("fillup 34.99", func() { e.fillup(r, "34.99") }, "crossed team 80% used=89.99 cap=100")
	st.step("denied 20", func() {
		if d := e.fillup(r, "20"); d.Accepted {
			t.Fatalf("fillup 20 at 89.99 of 100 was accepted")
		}
	})
	st.step("fillup 0.01", func() { e.fillup(r, "0.01") }, "crossed team 90 used=90 cap=100")
	st.step("fillup 0", func() { e.fillup(r, "0") })
	st.step("drain 30", func() {
		if _, err := e.svc.Drain(e.ctx, r, dec("30"), ledger.Idempotency{}, nil); err != nil {
			t.Fatal(err)
		}
	}, "recovered team 80% used=60 cap=100", "recovered team 90 used=60 cap=100")
	var hold string
	st.step("reserve 25", func() { hold = e.reserve(r, "25", time.Hour).Reservation.ID }, "crossed team 80% used=85 cap=100")
	st.step("release", func() {
		if _, err := e.svc.Release(e.ctx, hold, ledger.Idempotency{}, nil); err != nil {
			t.Fatal(err)
		}
	}, "recovered team 80% used=60 cap=100")
	st.step("reserve 30", func() { hold = e.reserve(r, "30", time.Hour).Reservation.ID }, "crossed team 80% used=90 cap=100", "crossed team 90 used=90 cap=100")
	st.step("commit 30", func() {
		if _, err := e.svc.Commit(e.ctx, hold, decimal.NullDecimal{Decimal: dec("30"), Valid: true}, false, ledger.Idempotency{}, nil); err != nil {
			t.Fatal(err)
		}
	})
}

// thresholdsTermsChange: a new capacity moves the percentages and not the
// amounts, a new list marks what the bucket already reaches without an
// event, and the next period re-arms every threshold without one.
func thresholdsTermsChange(st *eventSteps, spec ledger.LimitSpec) {
	t, e, r := st.t, st.e, st.r
	// Capacity 200: the percentages move (50% is 100, 80% is 160), the
	// amount does not; the next write notices.
	spec.Capacity = dec("200")
	if _, err := e.svc.PutLimit(e.ctx, "spend", spec); err != nil {
		t.Fatal(err)
	}
	st.step("fillup 1 at capacity 200", func() { e.fillup(r, "1") }, "recovered team 50% used=91 cap=200", "recovered team 80% used=91 cap=200")
	// A new list of thresholds: what the bucket already reaches is marked
	// without an event, the rest is compared as usual.
	spec.Thresholds = thresholds(t, "45%", "95", "99%")
	if _, err := e.svc.PutLimit(e.ctx, "spend", spec); err != nil {
		t.Fatal(err)
	}
	st.step("fillup 4 under new thresholds", func() { e.fillup(r, "4") }, "crossed team 95 used=95 cap=200")
	// The next month re-arms every threshold without an event.
	e.clock.Set(time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC))
	st.step("fillup 90 in August", func() { e.fillup(r, "90") }, "crossed team 45% used=90 cap=200")
	st.step("fillup 5 in August", func() { e.fillup(r, "5") }, "crossed team 95 used=95 cap=200")
	if evs, _ := e.eventsAfter(st.cursor, 5); len(evs) != 0 {
		t.Fatalf("events after the last: %+v", evs)
	}
}

// thresholdsPaged: every event once across pages of any size, in the order
// of the writes, with its period's start.
func thresholdsPaged(t *testing.T, e *env) {
	all, _ := e.eventsAfter("", 100)
	for _, n := range []int{1, 3} {
		paged, _ := e.eventsAfter("", n)
		if len(paged) != len(all) {
			t.Fatalf("pages of %d listed %d events, one page %d", n, len(paged), len(all))
		}
		for i := range all {
			if paged[i].ID != all[i].ID {
				t.Fatalf("pages of %d: event %d is %s, one page has %s", n, i, paged[i].ID, all[i].ID)
			}
		}
	}
	if all[len(all)-1].PeriodStart.IsZero() || !all[0].PeriodStart.Equal(time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("period_start of the events: %s … %s", all[0].PeriodStart, all[len(all)-1].PeriodStart)
	}
}

// thresholdsLeaky: on a leaky limit the leak below a threshold is noticed
// at the next write, and a multi-bucket call emits for each of its
// buckets.
func thresholdsLeaky(st *eventSteps, start time.Time) {
	t, e := st.t, st.e
	e.clock.Set(start)
	leaky := ledger.LimitSpec{Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: time.Second, Thresholds: thresholds(t, "50%")}
	if _, err := e.svc.PutLimit(e.ctx, "rate", leaky); err != nil {
		t.Fatal(err)
	}
	// The keys share a hash tag: a multi-bucket call in Redis Cluster
	// needs one slot, and the events of buckets of one slot are listed in
	// the order of the call (only the order of each bucket's own events is
	// promised across slots).
	st.r = ref("rate", "{t}a")
	st.step("multi", func() {
		res, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: ref("rate", "{t}a"), Cost: dec("6")}, {Bucket: ref("rate", "{t}b"), Cost: dec("4")}, {Bucket: ref("spend", "{t}m"), Cost: dec("100")}}, ledger.Idempotency{})
		if err != nil || !res.Accepted {
			t.Fatalf("multi-bucket: %+v %v", res, err)
		}
	}, "crossed {t}a 50% used=6 cap=10", "crossed {t}m 45% used=100 cap=200", "crossed {t}m 95 used=100 cap=200")
	e.clock.Advance(2 * time.Second)
	st.step("leak then fillup 0.5", func() { e.fillup(st.r, "0.5") }, "recovered {t}a 50% used=4.5 cap=10")
}

// testThresholdsConcurrent: 50 concurrent Fillups that take a bucket past
// 80% emit exactly one crossed event, and the used it reports is the
// bucket's after the write that crossed.
func testThresholdsConcurrent(t *testing.T, e *env) {
	e.clock.Set(time.Date(2026, 7, 30, 10, 0, 0, 0, time.UTC))
	spec := ledger.LimitSpec{Capacity: dec("100"), LeakAmount: dec("1"), LeakPer: time.Hour, Thresholds: thresholds(t, "80%")}
	if _, err := e.svc.PutLimit(e.ctx, "race", spec); err != nil {
		t.Fatal(err)
	}
	_, cursor := e.eventsAfter("", 100)
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: ref("race", "k"), Cost: dec("2")}}, ledger.Idempotency{}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	evs, _ := e.eventsAfter(cursor, 100)
	if len(evs) != 1 || evs[0].Type != ledger.EventThresholdCrossed || !evs[0].Used.Equal(dec("80")) {
		t.Fatalf("50 concurrent Fillups of 2 past 80 of 100: events %+v, want one crossed at used 80", evs)
	}
	testEventsUnderWriters(t, e)
}

// testEventsUnderWriters: 20 writers charge 20 buckets (keys of different
// hash slots) past 4 thresholds while a reader pages through the events 3
// at a time: every event is listed exactly once, each bucket's in the
// order of its writes. A malformed cursor is refused naming after.
func testEventsUnderWriters(t *testing.T, e *env) {
	spec := ledger.LimitSpec{Capacity: dec("100"), LeakAmount: dec("1"), LeakPer: time.Hour, Thresholds: thresholds(t, "2", "4", "6", "8")}
	if _, err := e.svc.PutLimit(e.ctx, "writers", spec); err != nil {
		t.Fatal(err)
	}
	var inv *ledger.InvalidError
	if _, _, err := e.svc.Events(e.ctx, "x1", 10); !errors.As(err, &inv) || inv.Field != "after" {
		t.Fatalf("Events with a malformed cursor: %v, want invalid after", err)
	}
	_, start := e.eventsAfter("", 100)
	const buckets, writes = 20, 200
	done := make(chan struct{})
	var seen []ledger.OutboxEvent
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		cursor := start
		for {
			select {
			case <-done:
				return
			default:
			}
			page, next, err := e.svc.Events(e.ctx, cursor, 3)
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
				r := ref("writers", fmt.Sprintf("b%02d", (w+i)%buckets))
				if _, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: r, Cost: dec("1")}}, ledger.Idempotency{}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	<-readerDone
	last := start
	if len(seen) > 0 {
		last = seen[len(seen)-1].ID
	}
	rest, _ := e.eventsAfter(last, 3)
	seen = append(seen, rest...)
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
}

package ledgertest

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// periodic puts a limit that resets on calendar periods; every store keeps
// them.
func (e *env) periodic(name, capacity string, p ledger.Period, history bool) {
	e.t.Helper()
	if _, err := e.svc.PutLimit(e.ctx, name, ledger.LimitSpec{Capacity: dec(capacity), Period: &p, History: history}); err != nil {
		e.t.Fatalf("PutLimit(%s, period %+v): %v", name, p, err)
	}
}

func utc(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (e *env) bounds(what string, start, end time.Time, wantStart, wantEnd string) {
	e.t.Helper()
	if !start.Equal(utc(e.t, wantStart)) || !end.Equal(utc(e.t, wantEnd)) {
		e.t.Fatalf("%s: period [%s, %s), want [%s, %s)", what, start.UTC(), end.UTC(), wantStart, wantEnd)
	}
}

// testPeriods: a monthly budget in Europe/Berlin through Fillup, CanAccept,
// Reserve, a reset with the hold alive, Commit charging the new period,
// Drain, history and the limit document.
func testPeriods(t *testing.T, e *env) {
	e.periodic("team-spend", "100", ledger.Period{Every: "month", TZ: "Europe/Berlin"}, true)
	l, err := e.svc.GetLimit(e.ctx, "team-spend")
	if err != nil || l.Period == nil || *l.Period != (ledger.Period{Every: "month", TZ: "Europe/Berlin", StartDay: 1}) || !l.LeakAmount.IsZero() || l.LeakPer != 0 {
		t.Fatalf("limit document %+v %v", l, err)
	}
	r := ref("team-spend", "acme")
	e.clock.Set(utc(t, "2026-01-31T22:30:00Z")) // 23:30 on 31 January in Berlin
	d := e.fillup(r, "60")
	eq(t, "level", d.Level, "60")
	e.bounds("fillup", d.PeriodStart, d.ResetsAt, "2025-12-31T23:00:00Z", "2026-01-31T23:00:00Z")
	d = e.can(r, "50")
	if d.Accepted {
		t.Fatal("50 over 60 of 100 accepted")
	}
	eq(t, "retry_after (to midnight in Berlin)", d.RetryAfter, "1800")
	res := e.reserve(r, "30", 2*time.Hour)
	if !res.Decision.Accepted {
		t.Fatalf("reserve refused: %+v", res.Decision)
	}
	d = e.can(r, "80")
	eq(t, "retry_after (the hold expires after the reset)", d.RetryAfter, "7200")

	e.clock.Set(utc(t, "2026-01-31T23:00:00Z")) // the reset
	st := e.state(r)
	eq(t, "level after the reset", st.Level, "0")
	eq(t, "held after the reset", st.Held, "30")
	e.bounds("state", st.PeriodStart, st.ResetsAt, "2026-01-31T23:00:00Z", "2026-02-28T23:00:00Z")

	e.clock.Advance(10 * time.Minute)
	out, err := e.svc.Commit(e.ctx, res.Reservation.ID, decimal.NewNullDecimal(dec("20")), false, ledger.Idempotency{}, nil)
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	eq(t, "level after a commit in the new period", out.Bucket.Level, "20")
	e.bounds("commit", out.Bucket.PeriodStart, out.Bucket.ResetsAt, "2026-01-31T23:00:00Z", "2026-02-28T23:00:00Z")
	dr, err := e.svc.Drain(e.ctx, r, dec("5"), ledger.Idempotency{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "level after a drain", dr.Bucket.Level, "15")
	d = e.fillup(r, "86")
	if d.Accepted {
		t.Fatal("86 over 15 of 100 accepted")
	}
	eq(t, "retry_after (to 1 March in Berlin)", d.RetryAfter, utcSeconds(t, "2026-01-31T23:10:00Z", "2026-02-28T23:00:00Z"))

	entries, _, err := e.svc.History(e.ctx, r, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	var events []ledger.Event
	for _, en := range entries {
		events = append(events, en.Event)
	}
	want := []ledger.Event{ledger.EventDrain, ledger.EventCommitted, ledger.EventReserved, ledger.EventFillup}
	if len(events) != len(want) {
		t.Fatalf("history %v, want %v", events, want)
	}
	for i := range want {
		if events[i] != want[i] {
			t.Fatalf("history %v, want %v", events, want)
		}
	}

	// A bucket idle for years is read in one step.
	e.clock.Set(utc(t, "2036-02-15T12:00:00Z"))
	if st := e.state(r); !st.Level.IsZero() || !st.Held.IsZero() {
		t.Fatalf("ten years later: %+v", st)
	}
}

// utcSeconds is the whole seconds from one instant to another.
func utcSeconds(t *testing.T, from, to string) string {
	return strconv.FormatInt(int64(utc(t, to).Sub(utc(t, from))/time.Second), 10)
}

// testPeriodsMultiBucket mixes a periodic and a leaky item in one call, all
// or nothing, and replays a call by its Idempotency-Key after a reset.
func testPeriodsMultiBucket(t *testing.T, e *env) {
	e.periodic("month", "100", ledger.Period{Every: "month", TZ: "UTC"}, true)
	e.limit("rate", "10", "1", time.Second, false)
	e.clock.Set(utc(t, "2026-03-31T23:59:00Z"))
	items := []ledger.Item{{Bucket: ref("month", "k"), Cost: dec("95")}, {Bucket: ref("rate", "k"), Cost: dec("5")}}
	res, err := e.svc.Fillup(e.ctx, items, idem("multi-1", "h1"))
	if err != nil || !res.Accepted {
		t.Fatalf("mixed fillup: %+v %v", res, err)
	}
	eq(t, "periodic level", res.Items[0].Level, "95")
	e.bounds("periodic item", res.Items[0].PeriodStart, res.Items[0].ResetsAt, "2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z")
	if !res.Items[1].PeriodStart.IsZero() || !res.Items[1].ResetsAt.IsZero() {
		t.Fatalf("a leaky item has period bounds: %+v", res.Items[1])
	}
	eq(t, "leaky level", res.Items[1].Level, "5")

	res, err = e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: ref("month", "k"), Cost: dec("6")}, {Bucket: ref("rate", "k"), Cost: dec("1")}}, ledger.Idempotency{})
	if err != nil || res.Accepted {
		t.Fatalf("a periodic denial must deny the call: %+v %v", res, err)
	}
	eq(t, "retry_after of the periodic item", res.Items[0].RetryAfter, "60")
	eq(t, "leaky level unchanged", e.state(ref("rate", "k")).Level, "5")

	e.clock.Set(utc(t, "2026-04-01T00:00:00Z"))
	again, err := e.svc.Fillup(e.ctx, items, idem("multi-1", "h1"))
	if err != nil || !again.Replayed {
		t.Fatalf("replay: %+v %v", again, err)
	}
	e.bounds("replayed item", again.Items[0].PeriodStart, again.Items[0].ResetsAt, "2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z")
	eq(t, "replayed level", again.Items[0].Level, "95")
	eq(t, "level in April", e.state(ref("month", "k")).Level, "0")
}

// testPeriodsSwitchKind: a PUT that switches between leak and period keeps
// each bucket's level as of the PUT as its level in the new rule's current
// period; DELETE and a new PUT start empty.
func testPeriodsSwitchKind(t *testing.T, e *env) {
	e.limit("switch", "100", "10", time.Hour, true)
	r := ref("switch", "k")
	e.clock.Set(utc(t, "2026-05-20T10:00:00Z"))
	e.fillup(r, "50")
	e.clock.Advance(time.Hour) // leaks 10
	e.periodic("switch", "100", ledger.Period{Every: "month", TZ: "UTC"}, true)
	st := e.state(r)
	eq(t, "level kept by the switch to a period", st.Level, "40")
	e.bounds("after the switch", st.PeriodStart, st.ResetsAt, "2026-05-01T00:00:00Z", "2026-06-01T00:00:00Z")
	e.clock.Advance(24 * time.Hour)
	eq(t, "no leak under a period", e.state(r).Level, "40")

	// A new zone: the level stays in the new rule's current period.
	e.periodic("switch", "100", ledger.Period{Every: "week", TZ: "Asia/Kolkata", StartDay: 3}, true)
	st = e.state(r)
	eq(t, "level kept by a new period rule", st.Level, "40")
	e.bounds("a week from Wednesday in Kolkata", st.PeriodStart, st.ResetsAt, "2026-05-19T18:30:00Z", "2026-05-26T18:30:00Z")

	e.clock.Set(utc(t, "2026-06-02T00:00:00Z"))
	eq(t, "a new period", e.state(r).Level, "0")
	e.fillup(r, "30")
	e.limit("switch", "100", "10", time.Hour, true)
	st = e.state(r)
	eq(t, "level kept by the switch back to a leak", st.Level, "30")
	if !st.PeriodStart.IsZero() || !st.ResetsAt.IsZero() {
		t.Fatalf("a leaky bucket has period bounds: %+v", st)
	}
	e.clock.Advance(time.Hour)
	eq(t, "leaks from the switch on", e.state(r).Level, "20")

	e.periodic("switch", "100", ledger.Period{Every: "day"}, true)
	if err := e.svc.DeleteLimit(e.ctx, "switch"); err != nil {
		t.Fatal(err)
	}
	e.periodic("switch", "100", ledger.Period{Every: "day"}, true)
	if st := e.state(r); !st.Level.IsZero() || !st.UpdatedAt.IsZero() {
		t.Fatalf("a deleted limit's bucket came back: %+v", st)
	}
}

// testPeriodsConcurrent counts: with the clock frozen a microsecond before a
// reset, exactly ⌊100/7⌋ of many concurrent Fillups are accepted; at the
// reset, exactly as many again.
func testPeriodsConcurrent(t *testing.T, e *env) {
	e.periodic("hot-month", "100", ledger.Period{Every: "month", TZ: "America/New_York"}, true)
	r := ref("hot-month", "k")
	round := func(when string) {
		t.Helper()
		e.clock.Set(utc(t, when))
		const n = 100
		var accepted atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: r, Cost: dec("7")}}, ledger.Idempotency{})
				if err != nil {
					errs <- err
					return
				}
				if res.Accepted {
					accepted.Add(1)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if got := accepted.Load(); got != 14 {
			t.Fatalf("%s: %d of %d concurrent fillups of 7 into 100 accepted, want 14", when, got, n)
		}
		eq(t, "level", e.state(r).Level, "98")
	}
	round("2026-03-01T04:59:59.999999Z") // New York's February ends at 05:00 UTC
	round("2026-03-01T05:00:00Z")
}

package ledgertest

import (
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
)

// RunOverrideExpiry checks that the end of a temporary override that
// changes a bucket's rule settles the bucket at its expires_at, as a DELETE
// of the override at that instant would (SPEC "Terms per customer": a
// change of terms settles the bucket as a PUT of the limit does), with no
// write at the expiry: the next call, a read included, sees the time before
// expires_at under the override's rule and the time after under the rule
// that follows.
func RunOverrideExpiry(t *testing.T, factory Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"Leak", testExpiryLeak},
		{"Chain", testExpiryChain},
		{"Period", testExpiryPeriod},
		{"Window", testExpiryWindow},
		{"Written", testExpiryWritten},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewClock()
			store := factory(t, clock)
			e := &env{t: t, clock: clock, store: store, svc: ledger.NewService(store), ctx: t.Context()}
			tc.fn(t, e)
		})
	}
}

// testExpiryLeak: a temporary slower leak ends at its expiry; reads before,
// at and after it agree with a bucket settled there.
func testExpiryLeak(t *testing.T, e *env) {
	e.limit("l", "100", "10", time.Hour, true)
	t0 := e.clock.Now()
	e.override("l", ledger.Override{Pattern: "k", LeakAmount: dec("1"), LeakPer: time.Hour, ExpiresAt: t0.Add(2 * time.Hour)})
	r := ref("l", "k")
	e.fillup(r, "50")
	e.clock.Set(t0.Add(90 * time.Minute))
	eq(t, "level within the override (1/h)", e.state(r).Level, "48.5")
	e.clock.Set(t0.Add(3 * time.Hour))
	st := e.state(r)
	eq(t, "level 1h after the expiry (2h at 1/h, 1h at 10/h)", st.Level, "38")
	if st.Override != "" {
		t.Errorf("override after its expiry: %q", st.Override)
	}
	if d := e.can(r, "62"); !d.Accepted {
		t.Errorf("CanAccept of the remaining 62: %+v", d)
	}
	if d := e.can(r, "62.01"); d.Accepted {
		t.Errorf("CanAccept past the remaining 62: %+v", d)
	}
	// A key no override covered leaked at the limit's rate throughout.
	e.clock.Set(t0)
	other := ref("l", "other")
	e.fillup(other, "50")
	e.clock.Set(t0.Add(3 * time.Hour))
	eq(t, "level of a key without an override", e.state(other).Level, "20")
}

// testExpiryChain: an exact override ends, the prefix override under it
// applies until it ends too, then the limit: three rates in one idle span.
func testExpiryChain(t *testing.T, e *env) {
	e.limit("l", "100", "10", time.Hour, true)
	t0 := e.clock.Now()
	e.override("l", ledger.Override{Pattern: "k", LeakAmount: dec("2"), LeakPer: time.Hour, ExpiresAt: t0.Add(time.Hour)})
	e.override("l", ledger.Override{Pattern: "k*", LeakAmount: dec("1"), LeakPer: time.Hour, ExpiresAt: t0.Add(2 * time.Hour)})
	k, k2 := ref("l", "k"), ref("l", "k2")
	e.fillup(k, "50")
	e.fillup(k2, "50")
	e.clock.Set(t0.Add(3 * time.Hour))
	eq(t, "k: 1h at 2/h, 1h at 1/h, 1h at 10/h", e.state(k).Level, "37")
	eq(t, "k2: 2h at 1/h, 1h at 10/h", e.state(k2).Level, "38")
	// An expiry that does not change the rule settles nothing: a capacity
	// raise over a bucket whose rule stays the limit's.
	e.override("l", ledger.Override{Pattern: "c", Capacity: capacity("200"), ExpiresAt: t0.Add(4 * time.Hour)})
	c := ref("l", "c")
	e.fillup(c, "150")
	e.clock.Set(t0.Add(5 * time.Hour))
	st := e.state(c)
	eq(t, "level after a capacity raise ended", st.Level, "130")
	eq(t, "capacity after a capacity raise ended", st.Capacity, "100")
}

// testExpiryPeriod: a customer's own billing day ends mid-month; the charge
// made in the customer's previous period does not count in the limit's.
func testExpiryPeriod(t *testing.T, e *env) {
	e.clock.Set(time.Date(2026, 12, 10, 12, 0, 0, 0, time.UTC))
	if _, err := e.svc.PutLimit(e.ctx, "month", ledger.LimitSpec{Capacity: dec("100"), Period: &ledger.Period{Every: "month"}, History: true}); err != nil {
		t.Fatal(err)
	}
	until := time.Date(2026, 12, 20, 0, 0, 0, 0, time.UTC)
	e.override("month", ledger.Override{Pattern: "jp", StartDay: 15, ExpiresAt: until})
	r := ref("month", "jp")
	e.fillup(r, "30") // in jp's period 15 Nov – 15 Dec
	e.clock.Set(time.Date(2026, 12, 16, 0, 0, 0, 0, time.UTC))
	eq(t, "level in jp's next period", e.state(r).Level, "0")
	e.clock.Set(time.Date(2026, 12, 21, 0, 0, 0, 0, time.UTC))
	st := e.state(r)
	eq(t, "level after the override ended (settled at 20 Dec: nothing left)", st.Level, "0")
	if want := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC); !st.PeriodStart.Equal(want) {
		t.Errorf("period_start %s, want the limit's %s", st.PeriodStart, want)
	}
	if d := e.can(r, "100"); !d.Accepted {
		t.Errorf("CanAccept of the whole capacity: %+v", d)
	}
	if d := e.fillup(r, "100"); !d.Accepted {
		t.Errorf("Fillup of the whole capacity: %+v", d)
	}
}

// testExpiryWindow: a shorter window ends after its charge left it; the
// limit's longer window does not bring the charge back.
func testExpiryWindow(t *testing.T, e *env) {
	if _, err := e.svc.PutLimit(e.ctx, "win", ledger.LimitSpec{Capacity: dec("100"), Window: &ledger.Window{Length: time.Hour}, History: true}); err != nil {
		t.Fatal(err)
	}
	t0 := e.clock.Now()
	e.override("win", ledger.Override{Pattern: "s", WindowLength: 10 * time.Minute, ExpiresAt: t0.Add(15 * time.Minute)})
	r := ref("win", "s")
	e.fillup(r, "80")
	e.clock.Set(t0.Add(30 * time.Minute))
	eq(t, "level after the short window ended", e.state(r).Level, "0")
	if d := e.fillup(r, "100"); !d.Accepted {
		t.Errorf("Fillup of the whole capacity: %+v", d)
	}
}

// testExpiryWritten: the settled state is what the next write builds on, and
// a write after the expiry is decided under the limit's rule from then on.
func testExpiryWritten(t *testing.T, e *env) {
	e.limit("l", "100", "10", time.Hour, true)
	t0 := e.clock.Now()
	e.override("l", ledger.Override{Pattern: "k", LeakAmount: dec("1"), LeakPer: time.Hour, ExpiresAt: t0.Add(2 * time.Hour)})
	r := ref("l", "k")
	e.fillup(r, "50")
	e.clock.Set(t0.Add(3 * time.Hour))
	if d := e.fillup(r, "62.5"); d.Accepted {
		t.Errorf("Fillup past the settled remaining 62: %+v", d)
	}
	d := e.fillup(r, "2")
	if !d.Accepted {
		t.Fatalf("Fillup within the settled remaining: %+v", d)
	}
	eq(t, "level after the write", d.Level, "40")
	e.clock.Set(t0.Add(4 * time.Hour))
	eq(t, "level an hour later at the limit's 10/h", e.state(r).Level, "30")
}

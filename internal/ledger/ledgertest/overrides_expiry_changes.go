package ledgertest

import (
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
)

// RunOverrideExpiryChanges checks, beyond RunOverrideExpiry, the writes that
// meet a bucket whose temporary rule change has already ended unsettled: a
// change of terms (a PUT or DELETE of an override, a PUT of the limit)
// settles it at the expiry first, then at the change, and a hold that ended
// before the expiry is recorded once as expired, at its own expiry. Each
// case starts from a leaky limit "l" (capacity 100, 10 an hour, history)
// and a temporary override of "k" leaking 1 an hour until t0+2h, with "k"
// charged 50 at t0: settled at the expiry, "k" is at 48 and leaks 10 an
// hour after it.
func RunOverrideExpiryChanges(t *testing.T, factory Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"PutOverride", testExpiryThenPutOverride},
		{"PutOverrideSameRule", testExpiryThenPutCapacity},
		{"DeleteOverride", testExpiryThenDeleteOverride},
		{"PutLimit", testExpiryThenPutLimit},
		{"Holds", testExpiryHolds},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewClock()
			store := factory(t, clock)
			e := &env{t: t, clock: clock, store: store, svc: ledger.NewService(store), ctx: t.Context()}
			e.limit("l", "100", "10", time.Hour, true)
			t0 := e.clock.Now()
			e.override("l", ledger.Override{Pattern: "k", LeakAmount: dec("1"), LeakPer: time.Hour, ExpiresAt: t0.Add(2 * time.Hour)})
			tc.fn(t, e)
		})
	}
}

// expiryLevel checks the level of "k" at t0+at.
func (e *env) expiryLevel(t0 time.Time, at time.Duration, what, want string) {
	e.t.Helper()
	e.clock.Set(t0.Add(at))
	eq(e.t, what, e.state(ref("l", "k")).Level, want)
}

func testExpiryThenPutOverride(t *testing.T, e *env) {
	t0 := e.clock.Now()
	e.fillup(ref("l", "k"), "50")
	e.clock.Set(t0.Add(3 * time.Hour))
	e.override("l", ledger.Override{Pattern: "k", LeakAmount: dec("5"), LeakPer: time.Hour})
	e.expiryLevel(t0, 4*time.Hour, "48 at the expiry, 38 at the PUT, then 5/h", "33")
}

// testExpiryThenPutCapacity: the PUT leaves the rule at now as it was (the
// limit's), but the override it replaces is the one whose end the bucket
// was not settled at: the store must not lose that end.
func testExpiryThenPutCapacity(t *testing.T, e *env) {
	t0 := e.clock.Now()
	e.fillup(ref("l", "k"), "50")
	e.clock.Set(t0.Add(3 * time.Hour))
	e.override("l", ledger.Override{Pattern: "k", Capacity: capacity("200")})
	e.expiryLevel(t0, 4*time.Hour, "48 at the expiry, then 10/h", "28")
}

func testExpiryThenDeleteOverride(t *testing.T, e *env) {
	t0 := e.clock.Now()
	e.override("l", ledger.Override{Pattern: "k*", LeakAmount: dec("2"), LeakPer: time.Hour})
	e.fillup(ref("l", "k"), "50")
	e.clock.Set(t0.Add(3 * time.Hour))
	if err := e.svc.DeleteOverride(e.ctx, "l", "k*"); err != nil {
		t.Fatal(err)
	}
	e.expiryLevel(t0, 4*time.Hour, "48 at the expiry, 46 at the DELETE under k*, then 10/h", "36")
}

func testExpiryThenPutLimit(t *testing.T, e *env) {
	t0 := e.clock.Now()
	e.fillup(ref("l", "k"), "50")
	e.clock.Set(t0.Add(3 * time.Hour))
	e.limit("l", "100", "20", time.Hour, true)
	e.expiryLevel(t0, 4*time.Hour, "48 at the expiry, 38 at the PUT, then 20/h", "18")
}

// testExpiryHolds: a hold of 20 that ended at t0+1h no longer counts after
// the expiry, and is recorded once as expired at t0+1h.
func testExpiryHolds(t *testing.T, e *env) {
	t0 := e.clock.Now()
	k := ref("l", "k")
	e.fillup(k, "50")
	r := e.reserve(k, "20", time.Hour)
	if !r.Decision.Accepted {
		t.Fatalf("Reserve: %+v", r)
	}
	e.expiryLevel(t0, 3*time.Hour, "48 at the expiry, then 10/h", "38")
	if d := e.fillup(k, "62"); !d.Accepted {
		t.Fatalf("Fillup of the remaining 62: %+v", d)
	}
	res, err := e.svc.Reservation(e.ctx, r.Reservation.ID)
	if err != nil || res.State != ledger.Expired || !res.ResolvedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("reservation after the expiry: %+v %v", res, err)
	}
	h, _, err := e.svc.History(e.ctx, k, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, en := range h {
		if en.Event == ledger.EventExpired {
			n++
			if !en.Time.Equal(t0.Add(time.Hour)) || en.ReservationID != r.Reservation.ID {
				t.Errorf("expired entry %+v", en)
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d expired entries in %+v", n, h)
	}
}

package bucket

import (
	"math/rand/v2"
	"testing"
	"time"
)

// logins is "5 failed logins per minute", with the default precision of 1s.
var logins = Limit{Capacity: d("5"), Window: &Window{Length: time.Minute, Precision: time.Second}}

// TestWindowSteps walks one window bucket through a table of (time, op,
// cost) and checks every decision, level and wait. t0 is the start of a
// slot; a charge counts until a minute after the end of its slot.
func TestWindowSteps(t *testing.T) {
	type step struct {
		at       time.Duration
		op       string
		cost     string
		accepted bool
		level    string
		retry    string
	}
	ms := time.Millisecond
	steps := []step{
		{0, "fill", "2", true, "2", "0"},
		{500 * ms, "fill", "2", true, "4", "0"},             // same slot
		{10 * time.Second, "fill", "1", true, "5", "0"},     // slot 10
		{10*time.Second + 1, "fill", "1", false, "5", "51"}, // slot 0 ages out at 61s
		{30 * time.Second, "can", "2", false, "5", "31"},
		{61*time.Second - time.Microsecond, "can", "1", false, "5", "0.000001"},
		{61 * time.Second, "can", "4", true, "1", "0"},    // slot 0 no longer counts
		{61 * time.Second, "can", "5", false, "1", "10"},  // slot 10 at 71s
		{61 * time.Second, "can", "6", false, "1", "0"},   // never fits
		{65 * time.Second, "fill", "4", true, "5", "0"},   // slot 65
		{65 * time.Second, "drain", "2", true, "3", "0"},  // newest first: slot 65 keeps 2
		{71 * time.Second, "can", "0", true, "2", "0"},    // slot 10 aged out
		{71 * time.Second, "fill", "3", true, "5", "0"},   // slot 71
		{71 * time.Second, "can", "3", false, "5", "61"},  // slot 65 (2) ages out at 126s, slot 71 (3) at 132s
		{70 * time.Second, "can", "0", true, "5", "0"},    // clock back: nothing ages out
		{71 * time.Second, "drain", "4", true, "1", "0"},  // 3 from slot 71, then 1 from slot 65
		{126 * time.Second, "can", "0", true, "0", "0"},   // slot 65 aged out
		{126 * time.Second, "drain", "1", true, "0", "0"}, // nothing counts: nothing to drain
	}
	var s State
	for i, st := range steps {
		now := t0.Add(st.at)
		var dec Decision
		switch st.op {
		case "fill":
			dec, s = Fillup(logins, s, now, d(st.cost))
		case "can":
			dec = CanAccept(logins, s, now, d(st.cost))
		case "drain":
			_, s = Drain(logins, s, now, d(st.cost))
			dec = CanAccept(logins, s, now, Amount{})
		}
		if dec.Accepted != st.accepted || !dec.Level.Equal(d(st.level)) || dec.RetryAfter != sec(st.retry) {
			t.Fatalf("step %d %s %s at %s: accepted=%v level=%s retry=%s, want %v %s %s",
				i, st.op, st.cost, st.at, dec.Accepted, dec.Level, dec.RetryAfter, st.accepted, st.level, st.retry)
		}
		if int64(len(s.Slots)) > logins.Window.Slots()+1 {
			t.Fatalf("step %d: %d slots, more than %d", i, len(s.Slots), logins.Window.Slots()+1)
		}
		if len(s.Slots) > 0 && !sumSlots(s.Slots).Equal(s.Level) {
			t.Fatalf("step %d: level %s is not the sum of the slots %v", i, s.Level, s.Slots)
		}
	}
	if dec := CanAccept(logins, s, t0.Add(126*time.Second), d("6")); !dec.NeverFits || !dec.RetryAfter.IsZero() {
		t.Fatalf("cost above capacity: %+v", dec)
	}
}

// TestWindowHolds checks that a hold counts while active and belongs to no
// slot, that a commit charges the slot of the commit, and that retry_after
// counts both holds expiring and slots aging out.
func TestWindowHolds(t *testing.T) {
	s := State{}
	_, s = Fillup(logins, s, t0, d("2"))
	dec, s := Reserve(logins, s, t0.Add(time.Second), d("3"), t0.Add(20*time.Second))
	if !dec.Accepted || !dec.Held.Equal(d("3")) || !dec.Remaining.IsZero() {
		t.Fatalf("reserve: %+v", dec)
	}
	// 1 fits when the hold expires at 20s, before the charge ages out at 61s.
	if dec := CanAccept(logins, s, t0.Add(2*time.Second), d("1")); dec.Accepted || dec.RetryAfter != sec("18") {
		t.Fatalf("behind a hold: %+v", dec)
	}
	// 4 needs both: the hold gone (20s) and slot 0 aged out (61s).
	if dec := CanAccept(logins, s, t0.Add(2*time.Second), d("4")); dec.Accepted || dec.RetryAfter != sec("59") {
		t.Fatalf("behind a hold and a charge: %+v", dec)
	}
	// Commit 3 at 30s: it counts from slot 30 for a minute after it ends.
	s = Resolve(logins, s, t0.Add(30*time.Second), 0, d("3"))
	if len(s.Holds) != 0 || !s.Level.Equal(d("5")) {
		t.Fatalf("after commit: %+v", s)
	}
	if dec := CanAccept(logins, s, t0.Add(61*time.Second), d("2")); !dec.Accepted || !dec.Level.Equal(d("3")) {
		t.Fatalf("after slot 0 aged out: %+v", dec)
	}
	if dec := CanAccept(logins, s, t0.Add(61*time.Second), d("3")); dec.Accepted || dec.RetryAfter != sec("30") {
		t.Fatalf("the commit counts until 91s: %+v", dec)
	}
}

// TestWindowSwitch checks that a change of rule keeps the level as of the
// change as one charge made then: under a window it ages out a window after.
func TestWindowSwitch(t *testing.T) {
	leaky := Limit{Capacity: d("5"), LeakAmount: d("5"), LeakPer: 10 * time.Second}
	_, s := Fillup(leaky, State{}, t0, d("5"))
	s, _ = Switch(leaky, s, t0.Add(4*time.Second)) // leaked to 3
	if dec := CanAccept(logins, s, t0.Add(4*time.Second), d("2")); !dec.Accepted || !dec.Level.Equal(d("3")) {
		t.Fatalf("switched to a window: %+v", dec)
	}
	if dec := CanAccept(logins, s, t0.Add(4*time.Second), d("3")); dec.Accepted || dec.RetryAfter != sec("61") {
		t.Fatalf("the level as one charge at the switch (slot 4, ages out at 65s): %+v", dec)
	}
	_, s = Fillup(logins, s, t0.Add(30*time.Second), d("1"))
	// And back: the window's level at the switch leaks from then on.
	s, _ = Switch(logins, s, t0.Add(40*time.Second))
	if len(s.Slots) != 0 || !LevelAt(leaky, s, t0.Add(41*time.Second)).Equal(d("3.5")) {
		t.Fatalf("switched back: %+v", s)
	}
	// A window of another precision reads the settled level the same way.
	fine := Limit{Capacity: d("5"), Window: &Window{Length: 30 * time.Second, Precision: 10 * time.Second}}
	_, s = Fillup(logins, State{}, t0.Add(5*time.Second), d("4"))
	s, _ = Switch(logins, s, t0.Add(15*time.Second))
	if dec := CanAccept(fine, s, t0.Add(15*time.Second), d("2")); dec.Accepted || dec.RetryAfter != sec("35") {
		t.Fatalf("4 charged at 15s in slots of 10s counts until 50s: %+v", dec)
	}
}

// TestWindowGuarantee charges random sequences (Fillups, holds committed or
// released, several precisions) on a clock that only moves forward, and
// checks the guarantee in every span of the window's length, not only the
// current one: the charges accepted in it sum to at most the capacity. It
// also checks that no bucket keeps more than length/precision + 1 slots,
// and that an accepted charge counts for at least the window's length.
func TestWindowGuarantee(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 24))
	windows := []Window{
		{time.Second, 100 * time.Millisecond},
		{time.Minute, time.Second},
		{time.Minute, 20 * time.Second},
		{10 * time.Second, 10 * time.Second},
		{30 * time.Second, time.Millisecond},
	}
	type charge struct {
		at     int64
		amount Amount
	}
	for run := range 400 {
		w := windows[run%len(windows)]
		l := Limit{Capacity: AmountOf(r.Int64N(20) + 1), Window: &w}
		var s State
		var charges []charge
		holds := map[int]Amount{}
		n := micros(t0) + r.Int64N(w.Precision.Microseconds())
		for range 300 {
			n += r.Int64N(w.Length.Microseconds() / 8)
			now := time.UnixMicro(n)
			cost := AmountOf(r.Int64N(6))
			switch op := r.IntN(10); {
			case op < 6:
				dec, ns := Fillup(l, s, now, cost)
				s = ns
				if dec.Accepted && cost.Sign() > 0 {
					charges = append(charges, charge{n, cost})
					// It counts for at least the window's length.
					if got := LevelAt(l, s, now.Add(w.Length-time.Microsecond)); got.LessThan(cost) {
						t.Fatalf("run %d: a charge of %s stopped counting before %s (level %s)", run, cost, w.Length, got)
					}
				}
			case op < 8 && cost.Sign() > 0:
				dec, ns := Reserve(l, s, now, cost, now.Add(time.Duration(r.Int64N(int64(w.Length)))))
				s = ns
				if dec.Accepted {
					holds[len(s.Holds)-1] = cost
				}
			case len(s.Holds) > 0:
				i := r.IntN(len(s.Holds))
				h := s.Holds[i]
				if h.ExpiresAt.After(now) {
					actual := AmountOf(r.Int64N(mustFloor(t, h.Amount) + 1))
					if r.IntN(2) == 0 {
						actual = Amount{}
					}
					s = Resolve(l, s, now, i, actual)
					if actual.Sign() > 0 {
						charges = append(charges, charge{n, actual})
					}
				}
			}
			if int64(len(s.Slots)) > w.Slots()+1 {
				t.Fatalf("run %d: %d slots, more than %d", run, len(s.Slots), w.Slots()+1)
			}
		}
		// Every span of length L that starts at a charge: the spans where the
		// sum is largest start at one.
		for i, c := range charges {
			var sum Amount
			for _, o := range charges[i:] {
				if o.at < c.at+w.Length.Microseconds() {
					sum = sum.Add(o.amount)
				}
			}
			if sum.GreaterThan(l.Capacity) {
				t.Fatalf("run %d (%+v): %s accepted in the window from %d, capacity %s", run, w, sum, c.at, l.Capacity)
			}
		}
	}
}

func mustFloor(t *testing.T, a Amount) int64 {
	t.Helper()
	n, ok := a.Floor()
	if !ok {
		t.Fatalf("%s has no floor", a)
	}
	return n
}

// TestWindowRetryAfterIsExact checks on random window buckets that the cost
// is denied one microsecond before retry_after and accepted at it.
func TestWindowRetryAfterIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	w := Window{Length: 10 * time.Second, Precision: time.Second}
	l := Limit{Capacity: d("10"), Window: &w}
	checked := 0
	for range 2000 {
		var s State
		n := micros(t0)
		for range 1 + r.IntN(12) {
			n += r.Int64N(3_000_000)
			now := time.UnixMicro(n)
			if r.IntN(3) == 0 {
				_, s = Reserve(l, s, now, AmountOf(r.Int64N(3)+1), now.Add(time.Duration(r.Int64N(int64(15*time.Second)))+time.Microsecond))
			} else {
				_, s = Fillup(l, s, now, AmountOf(r.Int64N(4)+1))
			}
		}
		now := time.UnixMicro(n + r.Int64N(2_000_000))
		cost := AmountOf(r.Int64N(10) + 1)
		dec := CanAccept(l, s, now, cost)
		if dec.Accepted {
			continue
		}
		wait := dec.RetryAfter.Duration()
		if wait <= 0 {
			t.Fatalf("denied with no wait: %+v", dec)
		}
		if CanAccept(l, s, now.Add(wait-time.Microsecond), cost).Accepted {
			t.Fatalf("accepted before retry_after %s", wait)
		}
		if !CanAccept(l, s, now.Add(wait), cost).Accepted {
			t.Fatalf("denied at retry_after %s", wait)
		}
		checked++
	}
	if checked < 500 {
		t.Fatalf("only %d denials checked", checked)
	}
}

// TestWindowClockBack checks that a clock that steps back ages nothing out
// and that a charge made then goes to the newest slot, so nothing counts
// for less than it would have.
func TestWindowClockBack(t *testing.T) {
	_, s := Fillup(logins, State{}, t0.Add(30*time.Second), d("3"))
	if got := LevelAt(logins, s, t0.Add(95*time.Second)); !got.IsZero() {
		t.Fatalf("level after the window: %s", got)
	}
	_, s = Fillup(logins, s, t0.Add(90*time.Second), d("1")) // slot 30 aged out at 91s? no: 91s > 90s
	if got := LevelAt(logins, s, t0.Add(90*time.Second)); !got.Equal(d("4")) {
		t.Fatalf("level at 90s: %s", got)
	}
	_, s = Fillup(logins, s, t0.Add(20*time.Second), d("1")) // the clock stepped back 70s
	if len(s.Slots) != 2 || s.Slots[1].Index != micros(t0.Add(90*time.Second))/1_000_000 {
		t.Fatalf("the charge behind the clock went to %+v, want the slot of 90s", s.Slots)
	}
	if got := LevelAt(logins, s, t0.Add(20*time.Second)); !got.Equal(d("5")) {
		t.Fatalf("level behind the clock: %s, want 5 (nothing aged out)", got)
	}
	if WindowEnd(logins, s, t0.Add(20*time.Second)) != t0.Add(151*time.Second).UTC() {
		t.Fatalf("window end %s", WindowEnd(logins, s, t0.Add(20*time.Second)))
	}
}

func BenchmarkFillupWindow(b *testing.B) {
	l := Limit{Capacity: d("1000000"), Window: &Window{Length: time.Minute, Precision: time.Second}}
	var s State
	now := t0
	for b.Loop() {
		now = now.Add(100 * time.Millisecond)
		_, s = Fillup(l, s, now, d("1"))
	}
}

package bucket

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

func d(s string) Amount { return MustAmount(s) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestLeaked(t *testing.T) {
	tests := []struct {
		amount string
		per    time.Duration
		dt     time.Duration
		want   string
	}{
		{"1", time.Second, time.Second, "1"},
		{"1", time.Second, 1500 * time.Millisecond, "1.5"},
		{"10", time.Second, time.Microsecond, "0.00001"},
		{"1", 3 * time.Microsecond, time.Microsecond, "0.333333333333"},   // rounded down
		{"2", 3 * time.Microsecond, time.Microsecond, "0.666666666666"},   // rounded down, not up
		{"5000.00", 720 * time.Hour, time.Hour, "6.944444444444"},         // 5000/720
		{"0.000001", 87600 * time.Hour, 24 * time.Hour, "0.000000000273"}, // tiny rate
		{"1", time.Second, -time.Hour, "0"},                               // backwards clock
		{"1", time.Second, 0, "0"},
		{"1000000000000", time.Microsecond, 365 * 24 * time.Hour, "31536000000000000000000000"},
		{"999999.999999", 87600 * time.Hour, 7 * time.Microsecond, "0.000000022196"},
	}
	for _, tc := range tests {
		l := Limit{Capacity: d("1"), LeakAmount: d(tc.amount), LeakPer: tc.per}
		if got := Leaked(l, tc.dt); !got.Equal(d(tc.want)) {
			t.Errorf("Leaked(%s per %s, %s) = %s, want %s", tc.amount, tc.per, tc.dt, got, tc.want)
		}
	}
	// A century at 10^12 per µs passes what an Amount holds, and any level:
	// it saturates at the largest Amount.
	l := Limit{Capacity: d("1"), LeakAmount: d("1000000000000"), LeakPer: time.Microsecond}
	if got := Leaked(l, 100*365*24*time.Hour); got != (Amount{maxInt128}) {
		t.Errorf("Leaked over a century = %s, want the largest Amount", got)
	}
}

// TestSteps walks one bucket through a table of (time, op, cost) and checks
// every decision and level.
func TestSteps(t *testing.T) {
	l := Limit{Capacity: d("10"), LeakAmount: d("1"), LeakPer: time.Second}
	type step struct {
		at       time.Duration
		op       string
		cost     string
		accepted bool
		level    string
		retry    string
	}
	steps := []step{
		{0, "fill", "4", true, "4", "0"},
		{0, "fill", "6", true, "10", "0"},
		{0, "fill", "1", false, "10", "1"},
		{500 * time.Millisecond, "can", "1", false, "9.5", "0.5"},
		{time.Second, "fill", "1", true, "10", "0"},
		{time.Second, "drain", "3", true, "7", "0"},
		{10 * time.Second, "fill", "10", true, "10", "0"}, // leak first, clamp, then add
		{9 * time.Second, "can", "0", true, "10", "0"},    // clock back: no leak, no credit
		{11 * time.Second, "can", "0", true, "9", "0"},
		{11 * time.Second, "fill", "11", false, "9", "0"}, // never fits
	}
	var s State
	for i, st := range steps {
		now := t0.Add(st.at)
		var dec Decision
		switch st.op {
		case "fill":
			dec, s = Fillup(l, s, now, d(st.cost))
		case "can":
			dec = CanAccept(l, s, now, d(st.cost))
		case "drain":
			_, s = Drain(l, s, now, d(st.cost))
			dec = CanAccept(l, s, now, Amount{})
		}
		if dec.Accepted != st.accepted || !dec.Level.Equal(d(st.level)) || dec.RetryAfter != sec(st.retry) {
			t.Fatalf("step %d %s %s at %s: accepted=%v level=%s retry=%s, want %v %s %s",
				i, st.op, st.cost, st.at, dec.Accepted, dec.Level, dec.RetryAfter, st.accepted, st.level, st.retry)
		}
	}
	if dec := CanAccept(l, s, t0.Add(11*time.Second), d("11")); !dec.NeverFits || !dec.RetryAfter.IsZero() {
		t.Fatalf("cost above capacity: %+v", dec)
	}
}

// TestRetryAfterIsExact checks on random buckets that the cost is denied one
// microsecond before retry_after and accepted at it.
func TestRetryAfterIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	amt := func(max int64) Amount { return dd(decimal.New(r.Int64N(max)+1, -int32(r.IntN(7)))) }
	checked := 0
	defer func() {
		if checked < 500 {
			t.Errorf("only %d denied cases were checked", checked)
		}
	}()
	for i := 0; i < 3000; i++ {
		l := Limit{
			Capacity:   amt(1_000_000),
			LeakAmount: amt(1_000_000),
			LeakPer:    time.Duration(r.Int64N(int64(10*time.Hour/time.Microsecond))+1) * time.Microsecond,
		}
		var s State
		now := t0
		for j := 0; j < 5; j++ {
			now = now.Add(time.Duration(r.Int64N(2_000_000)) * time.Microsecond)
			switch r.IntN(3) {
			case 0:
				_, s = Fillup(l, s, now, amt(1_000_000))
			case 1:
				_, s = Reserve(l, s, now, amt(1_000_000), now.Add(time.Duration(r.Int64N(5_000_000)+1)*time.Microsecond))
			default:
				_, s = Fillup(l, s, now, l.Capacity.Sub(LevelAt(l, s, now)).Sub(HeldAt(s, now)))
			}
		}
		cost := amt(1_000_000)
		dec := CanAccept(l, s, now, cost)
		if dec.Accepted || dec.NeverFits {
			continue
		}
		checked++
		wait := dec.RetryAfter.Duration()
		if wait <= 0 {
			t.Fatalf("retry_after %s is not a positive whole number of µs", dec.RetryAfter)
		}
		if early := CanAccept(l, s, now.Add(wait-time.Microsecond), cost); early.Accepted {
			t.Fatalf("case %d: accepted 1µs before retry_after %s (limit %+v state %+v cost %s)", i, dec.RetryAfter, l, s, cost)
		}
		if on := CanAccept(l, s, now.Add(wait), cost); !on.Accepted {
			t.Fatalf("case %d: denied at retry_after %s: %+v (limit %+v state %+v cost %s)", i, dec.RetryAfter, on, l, s, cost)
		}
	}
}

func TestHolds(t *testing.T) {
	l := Limit{Capacity: d("100"), LeakAmount: d("1"), LeakPer: time.Hour}
	dec, s := Reserve(l, State{}, t0, d("80"), t0.Add(time.Minute))
	if !dec.Accepted || !dec.Held.Equal(d("80")) || !dec.Remaining.Equal(d("20")) {
		t.Fatalf("reserve: %+v", dec)
	}
	if dec, _ := Fillup(l, s, t0.Add(30*time.Second), d("21")); dec.Accepted {
		t.Fatal("fillup beside the hold over capacity accepted")
	}
	// retry_after is the hold's expiry, not the leak (which would take 1h).
	if dec := CanAccept(l, s, t0.Add(30*time.Second), d("21")); dec.RetryAfter != sec("30") {
		t.Fatalf("retry_after = %s, want 30", dec.RetryAfter)
	}
	if got := HeldAt(s, t0.Add(time.Minute)); !got.IsZero() {
		t.Fatalf("held at expires_at = %s, want 0", got)
	}
	s = Resolve(l, s, t0.Add(10*time.Second), 0, d("61.2"))
	if len(s.Holds) != 0 || !s.Level.Equal(d("61.2")) {
		t.Fatalf("after commit: %+v", s)
	}
}

// TestSettleReportsExpired: Settle and Expire drop exactly the holds that
// have expired by now (expires_at ≤ now), report them in stored order, and a
// writing transition drops the same holds, keeping every id.
func TestSettleReportsExpired(t *testing.T) {
	l := Limit{Capacity: d("100"), LeakAmount: d("1"), LeakPer: time.Second}
	s := State{Level: d("10"), Updated: t0, Holds: []Hold{
		{ID: "a", Amount: d("1"), ExpiresAt: t0.Add(3 * time.Second)},
		{ID: "b", Amount: d("2"), ExpiresAt: t0.Add(2 * time.Second)},
		{ID: "c", Amount: d("3"), ExpiresAt: t0.Add(5 * time.Second)},
	}}
	now := t0.Add(3 * time.Second)
	ns, expired := Settle(l, s, now)
	if len(expired) != 2 || expired[0].ID != "a" || expired[1].ID != "b" {
		t.Fatalf("Settle expired %+v, want a and b", expired)
	}
	if len(ns.Holds) != 1 || ns.Holds[0].ID != "c" || !ns.Level.Equal(d("7")) || !ns.Updated.Equal(now) {
		t.Fatalf("Settle state %+v", ns)
	}
	es, expired2 := Expire(s, now)
	if len(expired2) != 2 || len(es.Holds) != 1 || !es.Level.Equal(d("10")) || !es.Updated.Equal(t0) {
		t.Fatalf("Expire: %+v, %+v", es, expired2)
	}
	if _, none := Expire(s, t0); none != nil {
		t.Fatalf("Expire at t0 expired %+v", none)
	}
	_, fs := Fillup(l, s, now, d("1"))
	if len(fs.Holds) != 1 || fs.Holds[0].ID != "c" {
		t.Fatalf("Fillup kept %+v, want c", fs.Holds)
	}
	_, rs := Reserve(l, s, now, d("1"), now.Add(time.Second))
	if len(rs.Holds) != 2 || rs.Holds[0].ID != "c" || rs.Holds[1].ID != "" {
		t.Fatalf("Reserve holds %+v, want c and the new one last", rs.Holds)
	}
	if got := Resolve(l, s, now, 2, d("1")); len(got.Holds) != 0 || !got.Level.Equal(d("8")) {
		t.Fatalf("Resolve: %+v", got)
	}
}

// FuzzFillup checks the bucket invariants on arbitrary sequences: the level
// is never negative, an accepted fillup never passes capacity, and a denied
// one changes nothing.
func FuzzFillup(f *testing.F) {
	f.Add(int64(1000), int64(10), int64(1_000_000), []byte{1, 2, 3, 200, 7})
	f.Add(int64(1), int64(1), int64(1), []byte{255, 0, 128})
	f.Fuzz(func(t *testing.T, capacity, amount, per int64, ops []byte) {
		if capacity <= 0 || amount <= 0 || per <= 0 || capacity > 1e18 || amount > 1e18 || per > 3e14 {
			return
		}
		l := Limit{Capacity: dd(decimal.New(capacity, -6)), LeakAmount: dd(decimal.New(amount, -6)), LeakPer: time.Duration(per) * time.Microsecond}
		var s State
		now := t0
		for i, op := range ops {
			now = now.Add(time.Duration(int64(op)-64) * time.Millisecond) // also backwards
			cost := dd(decimal.New(int64(op)*int64(i+1)*997, -6))
			before := s
			var dec Decision
			if op%5 == 0 {
				dec, s = Reserve(l, s, now, cost.Add(dd(decimal.New(1, -6))), now.Add(time.Duration(op)*time.Millisecond+time.Microsecond))
			} else {
				dec, s = Fillup(l, s, now, cost)
			}
			if s.Level.Sign() < 0 || LevelAt(l, s, now).Sign() < 0 {
				t.Fatalf("negative level %s", s.Level)
			}
			if dec.Accepted && LevelAt(l, s, now).Add(HeldAt(s, now)).GreaterThan(l.Capacity) {
				t.Fatalf("accepted past capacity: level %s held %s capacity %s", LevelAt(l, s, now), HeldAt(s, now), l.Capacity)
			}
			if !dec.Accepted && (!s.Level.Equal(before.Level) || !s.Updated.Equal(before.Updated) || len(s.Holds) != len(before.Holds)) {
				t.Fatalf("denied call changed the state: %+v → %+v", before, s)
			}
			if s.Updated.Before(before.Updated) {
				t.Fatalf("updated moved back from %v to %v", before.Updated, s.Updated)
			}
		}
	})
}

func BenchmarkCanAccept(b *testing.B) {
	l := Limit{Capacity: d("5000.00"), LeakAmount: d("5000.00"), LeakPer: 720 * time.Hour}
	_, s := Fillup(l, State{}, t0, d("1234.56"))
	now := t0.Add(time.Hour)
	cost := d("12.37")
	b.ReportAllocs()
	for b.Loop() {
		CanAccept(l, s, now, cost)
	}
}

func BenchmarkFillup(b *testing.B) {
	l := Limit{Capacity: d("1000000000000"), LeakAmount: d("5000.00"), LeakPer: 720 * time.Hour}
	var s State
	now := t0
	cost := d("12.37")
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Millisecond)
		_, s = Fillup(l, s, now, cost)
	}
}

func BenchmarkRetryAfter(b *testing.B) {
	l := Limit{Capacity: d("10"), LeakAmount: d("3"), LeakPer: time.Second}
	_, s := Fillup(l, State{}, t0, d("10"))
	cost := d("1")
	b.ReportAllocs()
	for b.Loop() {
		CanAccept(l, s, t0, cost)
	}
}

// The benchmarks below, with the three above, are the baseline of the rule
// in decimal arithmetic that an exact fixed-point core must beat without
// changing one answer: every transition a store applies, at everyday and at
// extreme magnitudes.

func BenchmarkLeakedExtreme(b *testing.B) {
	l := Limit{Capacity: d("1000000000000"), LeakAmount: d("999999999999.999999"), LeakPer: 87600 * time.Hour}
	dt := 10 * 365 * 24 * time.Hour
	b.ReportAllocs()
	for b.Loop() {
		Leaked(l, dt)
	}
}

func BenchmarkFillupExtreme(b *testing.B) {
	l := Limit{Capacity: d("1000000000000"), LeakAmount: d("0.000001"), LeakPer: 87600 * time.Hour}
	_, s := Fillup(l, State{}, t0, d("999999999999.999999"))
	now := t0.Add(3 * 365 * 24 * time.Hour)
	cost := d("0.000001")
	b.ReportAllocs()
	for b.Loop() {
		Fillup(l, s, now, cost)
	}
}

func BenchmarkDrain(b *testing.B) {
	l := Limit{Capacity: d("5000.00"), LeakAmount: d("5000.00"), LeakPer: 720 * time.Hour}
	_, s := Fillup(l, State{}, t0, d("1234.56"))
	now := t0.Add(time.Hour)
	amount := d("3")
	b.ReportAllocs()
	for b.Loop() {
		Drain(l, s, now, amount)
	}
}

func BenchmarkReserveResolve(b *testing.B) {
	l := Limit{Capacity: d("5000.00"), LeakAmount: d("5000.00"), LeakPer: 720 * time.Hour}
	_, s := Fillup(l, State{}, t0, d("1234.56"))
	now := t0.Add(time.Hour)
	amount, charge := d("80"), d("61.20")
	b.ReportAllocs()
	for b.Loop() {
		_, ns := Reserve(l, s, now, amount, now.Add(10*time.Minute))
		Resolve(l, ns, now.Add(time.Minute), len(ns.Holds)-1, charge)
	}
}

// BenchmarkSettleHolds settles a bucket with 100 holds, half of them expired.
func BenchmarkSettleHolds(b *testing.B) {
	l := Limit{Capacity: d("1000000"), LeakAmount: d("1"), LeakPer: time.Second}
	s := State{Level: d("500"), Updated: t0}
	for i := range 100 {
		s.Holds = append(s.Holds, Hold{ID: "h", Amount: d("1.5"), ExpiresAt: t0.Add(time.Duration(i) * time.Second)})
	}
	now := t0.Add(50 * time.Second)
	b.ReportAllocs()
	for b.Loop() {
		Settle(l, s, now)
	}
}

// dd is the decimal x as an Amount.
func dd(x decimal.Decimal) Amount {
	a, ok := FromDecimal(x)
	if !ok {
		panic("not an amount: " + x.String())
	}
	return a
}

// sec is s seconds as a wait.
func sec(s string) Micros {
	return MicrosOf(decimal.RequireFromString(s).Shift(6).IntPart())
}

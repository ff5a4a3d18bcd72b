package bucket

import (
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// The fixed-point core against math/big: the int128 operations, the text
// and decimal conversions, and the whole leaky rule against a reference
// written in big-number decimals (the rule as it was before the fixed-point
// core), on random and extreme inputs.

func (a int128) big() *big.Int {
	b := new(big.Int).SetUint64(a.hi)
	b.Lsh(b, 64).Or(b, new(big.Int).SetUint64(a.lo))
	if int64(a.hi) < 0 {
		b.Sub(b, new(big.Int).Lsh(big.NewInt(1), 128))
	}
	return b
}

var (
	big127    = new(big.Int).Lsh(big.NewInt(1), 127)
	maxBig128 = new(big.Int).Sub(big127, big.NewInt(1))
)

// randI128 draws a non-negative int128 of a random bit length, often at or
// next to a power of two or the largest value.
func randI128(r *rand.Rand) int128 {
	switch r.IntN(8) {
	case 0:
		return maxInt128
	case 1:
		n := uint(r.IntN(127))
		b := new(big.Int).Lsh(big.NewInt(1), n)
		b.Add(b, big.NewInt(int64(r.IntN(3))-1))
		if b.Sign() < 0 {
			b.SetInt64(0)
		}
		a, _ := amountFromBig(b)
		return a.v
	}
	bitsN := r.IntN(128) // the value has fewer than bitsN bits
	v := int128{hi: r.Uint64(), lo: r.Uint64()}
	if bitsN < 64 {
		v.hi, v.lo = 0, v.lo>>(64-bitsN)
	} else {
		v.hi >>= 128 - bitsN
	}
	return v
}

func randU64(r *rand.Rand) uint64 {
	switch r.IntN(4) {
	case 0:
		return uint64(r.IntN(10)) + 1
	case 1:
		return 1<<64 - 1 - uint64(r.IntN(3))
	}
	return r.Uint64()>>r.IntN(64) | 1
}

func TestInt128Arithmetic(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 200_000 {
		a, b := randI128(r), randI128(r)
		if r.IntN(2) == 0 {
			b = b.neg()
		}
		ab, bb := a.big(), b.big()
		if sum := new(big.Int).Add(ab, bb); sum.CmpAbs(maxBig128) <= 0 && a.add(b).big().Cmp(sum) != 0 {
			t.Fatalf("%d: %v + %v = %v", i, ab, bb, a.add(b).big())
		}
		if diff := new(big.Int).Sub(ab, bb); diff.CmpAbs(maxBig128) <= 0 && a.sub(b).big().Cmp(diff) != 0 {
			t.Fatalf("%d: %v - %v = %v", i, ab, bb, a.sub(b).big())
		}
		if a.cmp(b) != ab.Cmp(bb) {
			t.Fatalf("%d: cmp(%v, %v) = %d", i, ab, bb, a.cmp(b))
		}
		m, d := randU64(r), randU64(r)
		want := new(big.Int).Mul(ab, new(big.Int).SetUint64(m))
		want.Quo(want, new(big.Int).SetUint64(d))
		if want.Cmp(maxBig128) > 0 {
			want.Set(maxBig128)
		}
		if got := mulDiv(a, m, d).big(); got.Cmp(want) != 0 {
			t.Fatalf("%d: mulDiv(%v, %d, %d) = %v, want %v", i, ab, m, d, got, want)
		}
		dv := randI128(r)
		if dv.sign() == 0 {
			dv = int128{lo: 1}
		}
		num := new(big.Int).Mul(ab, new(big.Int).SetUint64(m))
		q, rem := new(big.Int).QuoRem(num, dv.big(), new(big.Int))
		if rem.Sign() != 0 {
			q.Add(q, big.NewInt(1))
		}
		if q.Cmp(maxBig128) > 0 {
			q.Set(maxBig128)
		}
		if got := mulDivCeil(a, m, dv).big(); got.Cmp(q) != 0 {
			t.Fatalf("%d: mulDivCeil(%v, %d, %v) = %v, want %v", i, ab, m, dv.big(), got, q)
		}
	}
}

// randDecimal draws a decimal of up to 12 fractional digits whose units fit
// in an int128, often at the extremes.
func randDecimal(r *rand.Rand) decimal.Decimal {
	v := randI128(r)
	if r.IntN(2) == 0 {
		v = v.neg()
	}
	return decimal.NewFromBigInt(v.big(), -int32(r.IntN(LevelScale+1))).Shift(-int32(0))
}

func TestAmountText(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 100_000 {
		want := randDecimal(r)
		a, ok := FromDecimal(want)
		if !ok {
			// Fewer fractional digits but more integer digits: may not fit.
			if new(big.Int).Abs(want.Shift(LevelScale).BigInt()).Cmp(maxBig128) <= 0 {
				t.Fatalf("%d: FromDecimal(%s) refused", i, want)
			}
			continue
		}
		if !a.Decimal().Equal(want) {
			t.Fatalf("%d: FromDecimal(%s).Decimal() = %s", i, want, a.Decimal())
		}
		if a.String() != want.String() {
			t.Fatalf("%d: String() = %q, want %q", i, a.String(), want.String())
		}
		if p, ok := ParseAmount(want.String()); !ok || p != a {
			t.Fatalf("%d: ParseAmount(%q) = %s, %v", i, want.String(), p, ok)
		}
		if p, ok := ParseAmount(want.StringFixed(LevelScale + 2)); !ok || p != a {
			t.Fatalf("%d: ParseAmount(%q) = %s, %v", i, want.StringFixed(LevelScale+2), p, ok)
		}
		if u, ok := ParseUnits(a.Units()); !ok || u != a || a.Units() != want.Shift(LevelScale).String() {
			t.Fatalf("%d: Units() = %q, want %q", i, a.Units(), want.Shift(LevelScale).String())
		}
	}
	for _, bad := range []string{"", "-", ".", "1.", ".5", "1e3", "1.0000000000001", "0x10", " 1", "1 ",
		"170141183460469231731687303.715884105728", "--1", "1.2.3"} {
		if a, ok := ParseAmount(bad); ok {
			t.Errorf("ParseAmount(%q) = %s, want refused", bad, a)
		}
	}
	if a, ok := ParseAmount("170141183460469231731687303.715884105727"); !ok || a != (Amount{maxInt128}) {
		t.Errorf("the largest Amount does not parse: %s %v", a, ok)
	}
	if _, ok := FromDecimal(decimal.RequireFromString("0.0000000000001")); ok {
		t.Error("FromDecimal took a 13th fractional digit")
	}
	if a, ok := FromDecimal(decimal.RequireFromString("1.50000000000000000000")); !ok || a != MustAmount("1.5") {
		t.Errorf("FromDecimal of trailing zeros = %s, %v", a, ok)
	}
	for _, tc := range []struct {
		us   int64
		want string
	}{{0, "0"}, {1, "0.000001"}, {1_500_000, "1.5"}, {899_957_224, "899.957224"}, {3_000_000, "3"}} {
		if got := MicrosOf(tc.us).String(); got != tc.want {
			t.Errorf("MicrosOf(%d) = %q, want %q", tc.us, got, tc.want)
		}
	}
}

// The reference: the leaky rule in math/big decimals.

func refLevel(l Limit, s State, now time.Time) decimal.Decimal {
	lvl := s.Level.Decimal()
	if lvl.Sign() <= 0 || s.Updated.IsZero() {
		return decimal.Max(lvl, decimal.Zero)
	}
	us := micros(now) - micros(s.Updated)
	if us <= 0 {
		return lvl
	}
	q, _ := l.LeakAmount.Decimal().Mul(decimal.NewFromInt(us)).QuoRem(decimal.NewFromInt(l.LeakPer.Microseconds()), LevelScale)
	return decimal.Max(lvl.Sub(q), decimal.Zero)
}

func refRetryAfter(l Limit, s State, now time.Time, cost decimal.Decimal) decimal.Decimal {
	n := micros(now)
	elapsed := decimal.NewFromInt(n - micros(s.Updated))
	holds := ActiveHolds(s, now)
	slices.SortFunc(holds, byExpiry)
	held := HeldAt(s, now).Decimal()
	var start int64
	for i := 0; ; {
		last := i == len(holds)
		var end int64
		if !last {
			end = micros(holds[i].ExpiresAt) - n
		}
		target := l.Capacity.Decimal().Sub(cost).Sub(held)
		if target.Sign() >= 0 {
			wait := decimal.NewFromInt(start)
			if need := s.Level.Decimal().Sub(target); need.Sign() > 0 {
				num := need.Shift(LevelScale).BigInt()
				num.Mul(num, big.NewInt(l.LeakPer.Microseconds()))
				den := l.LeakAmount.Decimal().Shift(LevelScale).BigInt()
				q, r := new(big.Int).QuoRem(num, den, new(big.Int))
				if r.Sign() != 0 {
					q.Add(q, big.NewInt(1))
				}
				wait = decimal.Max(wait, decimal.NewFromBigInt(q, 0).Sub(elapsed))
			}
			if last || wait.LessThan(decimal.NewFromInt(end)) {
				return wait
			}
		}
		if last {
			return decimal.Zero
		}
		start = end
		for i < len(holds) && micros(holds[i].ExpiresAt)-n == start {
			held = held.Sub(holds[i].Amount.Decimal())
			i++
		}
	}
}

// TestRuleMatchesBigReference compares CanAccept and Fillup with the
// math/big reference on random limits and states: everyday values, values
// at the bounds of docs/rounding.md (amounts of 10^12 with 6 fractional
// digits, levels up to 10^15 with 12, 1000 holds' worth held, per from 1µs
// to 87600h) and idle gaps from a microsecond to a century.
func TestRuleMatchesBigReference(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	input := func() decimal.Decimal { // an API amount: ≤ 10^12, ≤ 6 fractional digits
		switch r.IntN(5) {
		case 0:
			return decimal.New(1, -6)
		case 1:
			return decimal.RequireFromString("1000000000000").Sub(decimal.New(int64(r.IntN(2)), -6))
		}
		return decimal.New(r.Int64N(1_000_000_000_000_000_000)+1, -int32(r.IntN(7))).Shift(-int32(r.IntN(7)))
	}
	mustAmt := func(x decimal.Decimal) Amount {
		if x.GreaterThan(decimal.New(1, 12)) {
			x = decimal.New(1, 12)
		}
		x = x.Truncate(6)
		if x.Sign() <= 0 {
			x = decimal.New(1, -6)
		}
		return dd(x)
	}
	pers := []time.Duration{time.Microsecond, 3 * time.Microsecond, time.Second, time.Hour, 720 * time.Hour, 87600 * time.Hour}
	gaps := []time.Duration{0, time.Microsecond, time.Second, time.Hour, 30 * 24 * time.Hour, 100 * 365 * 24 * time.Hour}
	for i := range 50_000 {
		l := Limit{Capacity: mustAmt(input()), LeakAmount: mustAmt(input()), LeakPer: pers[r.IntN(len(pers))]}
		if r.IntN(3) == 0 {
			l.LeakPer = time.Duration(r.Int64N(int64(87600*time.Hour/time.Microsecond))+1) * time.Microsecond
		}
		var s State
		s.Updated = t0
		level := decimal.New(r.Int64N(1_000_000_000_000_000), 0).Add(decimal.New(r.Int64N(1_000_000_000_000), -12)).
			Shift(-int32(r.IntN(16))).Truncate(LevelScale)
		if r.IntN(4) == 0 {
			level = decimal.New(1, 15).Sub(decimal.New(int64(r.IntN(2)), -12))
		}
		s.Level = dd(level)
		for range r.IntN(4) {
			s.Holds = append(s.Holds, Hold{Amount: mustAmt(input()), ExpiresAt: t0.Add(time.Duration(r.Int64N(int64(48 * time.Hour))))})
		}
		gap := gaps[r.IntN(len(gaps))] + time.Duration(r.Int64N(1_000_000))*time.Microsecond
		now := t0.Add(gap)
		cost := mustAmt(input())

		got := CanAccept(l, s, now, cost)
		lvl := refLevel(l, s, now)
		held := HeldAt(s, now).Decimal()
		fits := lvl.Add(held).Add(cost.Decimal()).LessThanOrEqual(l.Capacity.Decimal())
		if !got.Level.Decimal().Equal(lvl) || got.Accepted != fits {
			t.Fatalf("%d: CanAccept level %s accepted %v, reference %s %v (limit %+v state %+v now +%s cost %s)",
				i, got.Level, got.Accepted, lvl, fits, l, s, gap, cost)
		}
		rem := decimal.Max(l.Capacity.Decimal().Sub(lvl).Sub(held), decimal.Zero)
		if !got.Remaining.Decimal().Equal(rem) {
			t.Fatalf("%d: remaining %s, reference %s", i, got.Remaining, rem)
		}
		if !fits && !cost.GreaterThan(l.Capacity) {
			want := refRetryAfter(l, s, now, cost.Decimal())
			if w := got.RetryAfter.v.big(); w.Cmp(want.BigInt()) != 0 {
				t.Fatalf("%d: retry_after %s µs, reference %s (limit %+v state %+v now +%s cost %s)", i, w, want, l, s, gap, cost)
			}
		}
		d, ns := Fillup(l, s, now, cost)
		if d.Accepted && !cost.IsZero() && !ns.Level.Decimal().Equal(lvl.Add(cost.Decimal())) {
			t.Fatalf("%d: Fillup level %s, reference %s", i, ns.Level, lvl.Add(cost.Decimal()))
		}
	}
}

// FuzzAmount: any text ParseAmount takes is the decimal it reads as, prints
// back as that decimal, and survives the units round trip; text it refuses
// is no decimal of at most 12 fractional digits that fits.
func FuzzAmount(f *testing.F) {
	for _, s := range []string{"0", "1", "-1", "12.37", "0.000000000001", "1.5000000000000", "170141183460469231731687303.715884105727", "1e3", ".5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, ok := ParseAmount(s)
		d, err := decimal.NewFromString(s)
		body := strings.TrimPrefix(s, "-")
		plain := err == nil && body != "" && body[0] >= '0' && body[0] <= '9' && !strings.ContainsAny(body, "eE+- ") && !strings.HasSuffix(body, ".")
		if !ok {
			if plain && d.Exponent() >= -LevelScale && new(big.Int).Abs(d.Shift(LevelScale).BigInt()).Cmp(maxBig128) <= 0 {
				t.Fatalf("ParseAmount(%q) refused the decimal %s", s, d)
			}
			return
		}
		if err != nil || !a.Decimal().Equal(d) || a.String() != d.String() {
			t.Fatalf("ParseAmount(%q) = %s, decimal %s (%v)", s, a, d, err)
		}
		if u, ok := ParseUnits(a.Units()); !ok || u != a {
			t.Fatalf("units round trip of %s: %s", a, a.Units())
		}
	})
}

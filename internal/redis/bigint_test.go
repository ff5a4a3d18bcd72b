package redis

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	goredis "github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"
)

// bigintProbe runs the library's integer routines (arith.lua) on a batch of
// operations: ARGV is a flat list of (op, a, b) triples and the reply is one
// result per triple. "vadd", "vsub" and "vcmp" are the pair-or-bigint
// values. "level" runs the whole leak rule: a = "level|updated|now", b =
// "amount|per", all in the functions' units.
var bigintProbe = goredis.NewScript(luaConstants() + arithLua + `
local out = {}
for i = 1, #ARGV, 3 do
  local op, x, y = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local r
  if op == 'add' then r = bs(bn_add(bn(x), bn(y)))
  elseif op == 'sub' then r = bs(bn_sub(bn(x), bn(y)))
  elseif op == 'mul' then r = bs(bn_mul(bn(x), bn(y)))
  elseif op == 'cmp' then r = tostring(bn_cmp(bn(x), bn(y)))
  elseif op == 'vadd' then r = vs(vadd(nv(x), nv(y)))
  elseif op == 'vsub' then r = vs(vsub(nv(x), nv(y)))
  elseif op == 'vcmp' then r = tostring(vcmp(nv(x), nv(y)))
  elseif op == 'vmin' then r = vs(vmin(nv(x), nv(y)))
  elseif op == 'div' then
    local q, m = bn_divsmall(bn(x), tonumber(y))
    r = bs(q) .. ',' .. fmt(m)
  elseif op == 'held' then
    local holds = {}
    for a in string.gmatch(x, '%d+') do holds[#holds + 1] = { a = a, e = 2 } end
    r = vs(held_sum(holds, 1))
  elseif op == 'level' then
    local l, u, now = string.match(x, '^(%d+)|(%d+)|(%d+)$')
    local a, per = string.match(y, '^(%d+)|(%d+)$')
    local lv, dt = nv(l), tonumber(now) - tonumber(u)
    if vzero(lv) or tonumber(u) == 0 or dt <= 0 then r = vs(lv) else r = vs(leak(leak_params(a, per), lv, dt)) end
  end
  out[#out + 1] = r
end
return out
`)

func bigOf(s string) *big.Int {
	b, ok := new(big.Int).SetString(s, 10)
	if !ok {
		panic(s)
	}
	return b
}

// interesting returns integers that stress the limbs: around 2^53, around
// powers of the limb base, at the largest magnitudes, and random widths.
func interesting(r *rand.Rand) []*big.Int {
	var out []*big.Int
	two53 := new(big.Int).Lsh(big.NewInt(1), 53)
	for _, d := range []int64{-3, -1, 0, 1, 2, 1000, 10_000_001} {
		out = append(out, new(big.Int).Add(two53, big.NewInt(d)))
	}
	// Around the edges of fast.lua's pairs H*10^12 + L: H near 2^52 (its
	// bound) and 2^53, L near 10^12.
	e12 := big.NewInt(1_000_000_000_000)
	for _, h := range []int64{1 << 52, 1 << 53, 1_000_000_000_000_000} {
		hb := new(big.Int).Mul(big.NewInt(h), e12)
		for _, d := range []int64{-1_000_000_000_001, -1_000_000_000_000, -1, 0, 1, 999_999_999_999} {
			out = append(out, new(big.Int).Add(hb, big.NewInt(d)))
		}
	}
	for _, e := range []int64{7, 12, 13, 14, 15, 16, 18, 21, 24, 27, 28, 33, 40} {
		p := new(big.Int).Exp(big.NewInt(10), big.NewInt(e), nil)
		out = append(out, p, new(big.Int).Sub(p, big.NewInt(1)), new(big.Int).Add(p, big.NewInt(1)))
	}
	out = append(out, big.NewInt(0), big.NewInt(1), big.NewInt(9_999_999))
	// 10^12 with 6 fractional digits, in 10^-12 units: 999999999999.999999.
	out = append(out, bigOf("999999999999999999000000"), bigOf("1000000000000000000000000"))
	for i := 0; i < 60; i++ {
		digits := 1 + r.IntN(40)
		b := []byte{byte('1' + r.IntN(9))}
		for j := 1; j < digits; j++ {
			b = append(b, byte('0'+r.IntN(10)))
		}
		out = append(out, bigOf(string(b)))
	}
	return out
}

func TestLuaBigInt(t *testing.T) {
	s := openTest(t, serverURL(t, "BUDGETD_TEST_REDIS"))
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	vals := interesting(r)
	type check struct {
		op, a, b, want string
	}
	var checks []check
	for _, x := range vals {
		for _, y := range vals {
			checks = append(checks,
				check{"add", x.String(), y.String(), new(big.Int).Add(x, y).String()},
				check{"mul", x.String(), y.String(), new(big.Int).Mul(x, y).String()},
				check{"cmp", x.String(), y.String(), fmt.Sprint(x.Cmp(y))},
				check{"vadd", x.String(), y.String(), new(big.Int).Add(x, y).String()},
				check{"vcmp", x.String(), y.String(), fmt.Sprint(x.Cmp(y))},
			)
			if x.Cmp(y) >= 0 {
				checks = append(checks,
					check{"sub", x.String(), y.String(), new(big.Int).Sub(x, y).String()},
					check{"vsub", x.String(), y.String(), new(big.Int).Sub(x, y).String()},
					check{"vmin", x.String(), y.String(), y.String()},
					check{"vmin", y.String(), x.String(), y.String()},
				)
			}
		}
		// Divisors: small, near the longest period (87600h in µs), and the
		// largest the routine allows (9*10^14).
		for _, d := range []int64{1, 7, 999, 1_000_000, 3_600_000_000, 2_592_000_000_000, 10_000_000, 10_000_001, 1 << 40, 315_360_000_000_000, 315_359_999_999_999, 900_000_000_000_000, 899_999_999_999_999} {
			q, m := new(big.Int).QuoRem(x, big.NewInt(d), new(big.Int))
			checks = append(checks, check{"div", x.String(), fmt.Sprint(d), q.String() + "," + m.String()})
		}
	}
	// Sums of holds: up to 1000 amounts of up to 10^12 with 6 fractional
	// digits (units ending in 6 zeros), and amounts of any form.
	for _, n := range []int{1, 2, 999, 1000} {
		for _, form := range []string{"max", "random", "odd"} {
			sum := new(big.Int)
			var parts []string
			for i := 0; i < n; i++ {
				var a *big.Int
				switch form {
				case "max":
					a = bigOf("1000000000000000000000000")
				case "random":
					a = new(big.Int).Mul(big.NewInt(r.Int64N(1_000_000_000_000_000_000)+1), big.NewInt(1_000_000))
				default:
					a = vals[r.IntN(len(vals))]
				}
				sum.Add(sum, a)
				parts = append(parts, a.String())
			}
			checks = append(checks, check{"held", strings.Join(parts, ","), "", sum.String()})
		}
	}
	for start := 0; start < len(checks); start += 1000 {
		batch := checks[start:min(start+1000, len(checks))]
		args := make([]any, 0, 3*len(batch))
		for _, c := range batch {
			args = append(args, c.op, c.a, c.b)
		}
		got, err := bigintProbe.Run(ctx, s.client, []string{"probe"}, args...).StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range batch {
			if got[i] != c.want {
				t.Errorf("%s(%s, %s) = %s, want %s", c.op, c.a, c.b, got[i], c.want)
			}
		}
	}
	t.Logf("%d checks", len(checks))
}

// TestLuaLeakMatchesRule compares the scripts' LevelAt with bucket.LevelAt at
// the supported extremes: amounts of 10^12 with 6 fractional digits, levels up
// to 10^15, periods from 1µs to 87600h, elapsed times up to 10 years.
func TestLuaLeakMatchesRule(t *testing.T) {
	s := openTest(t, serverURL(t, "BUDGETD_TEST_REDIS"))
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	amount := func() decimal.Decimal {
		switch r.IntN(4) {
		case 0:
			return decimal.RequireFromString("999999999999.999999")
		case 1:
			return decimal.RequireFromString("0.000001")
		case 2: // around 2^53 units of 10^-12
			return decimal.New(9007199254740992+r.Int64N(2000)-1000, -12).Truncate(6)
		}
		return decimal.New(r.Int64N(1_000_000_000_000_000_000), -6)
	}
	per := func() time.Duration {
		switch r.IntN(3) {
		case 0:
			return time.Microsecond
		case 1:
			return 87600 * time.Hour
		}
		return time.Duration(1+r.Int64N(315_360_000_000_000)) * time.Microsecond
	}
	updated := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	type check struct {
		a, b string
		want decimal.Decimal
	}
	var checks []check
	for i := 0; i < 3000; i++ {
		l := bucket.Limit{Capacity: ledger.Amount(decimal.New(1, 12)), LeakAmount: ledger.Amount(amount()), LeakPer: per()}
		level := decimal.New(r.Int64N(1<<62), -12)
		switch r.IntN(3) {
		case 0:
			level = decimal.RequireFromString("999999999999999.999999999999")
		case 1:
			level = decimal.New(9007199254740993+r.Int64N(100), -12)
		}
		var dt time.Duration
		switch r.IntN(3) {
		case 0:
			dt = time.Duration(r.Int64N(1000)) * time.Microsecond
		case 1:
			dt = 87600 * time.Hour
		default:
			dt = time.Duration(r.Int64N(int64(87600*time.Hour/time.Microsecond))) * time.Microsecond
		}
		now := updated.Add(dt)
		st := bucket.State{Level: ledger.Amount(level), Updated: updated}
		checks = append(checks, check{
			a:    fmt.Sprintf("%s|%d|%d", units(level), updated.UnixMicro(), now.UnixMicro()),
			b:    fmt.Sprintf("%s|%d", units(l.LeakAmount.Decimal()), l.LeakPer.Microseconds()),
			want: bucket.LevelAt(l, st, now).Decimal(),
		})
		// The store passes the ratio reduced by the gcd (leakRatio).
		ra, rp := leakRatio(ledger.Limit{LeakAmount: l.LeakAmount.Decimal(), LeakPer: l.LeakPer})
		checks = append(checks, check{a: checks[len(checks)-1].a, b: ra + "|" + rp, want: checks[len(checks)-1].want})
	}
	for start := 0; start < len(checks); start += 200 { // short calls: Redis serves others meanwhile
		batch := checks[start:min(start+200, len(checks))]
		args := make([]any, 0, 3*len(batch))
		for _, c := range batch {
			args = append(args, "level", c.a, c.b)
		}
		got, err := bigintProbe.Run(ctx, s.client, []string{"probe"}, args...).StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range batch {
			lvl, err := fromUnits(got[i])
			if err != nil || !lvl.Equal(c.want) {
				t.Errorf("level(%s; %s) = %s, want %s", c.a, c.b, got[i], units(c.want))
			}
		}
	}
}

// TestLuaLeakFastPathBoundary straddles the bounds of fast.lua's leak: the
// product amount*dt just below, at and above 2^53 (fast path, and the "empty
// anyway" shortcut or the big integers above it), level*per just below and
// above 2^53, levels beyond 2^53 units and up to 10^15, periods of 1µs and
// 87600h, long idle gaps. Every answer must equal bucket.LevelAt.
func TestLuaLeakFastPathBoundary(t *testing.T) {
	s := openTest(t, serverURL(t, "BUDGETD_TEST_REDIS"))
	ctx := context.Background()
	r := rand.New(rand.NewPCG(5, 6))
	const two53 = int64(1) << 53
	updated := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	type check struct {
		a, b string
		want decimal.Decimal
	}
	var checks []check
	add := func(amountUnits int64, per time.Duration, levelUnits *big.Int, dt int64) {
		l := bucket.Limit{Capacity: ledger.Amount(decimal.New(1, 12)), LeakAmount: ledger.Amount(decimal.New(amountUnits, -12)), LeakPer: per}
		level := decimal.NewFromBigInt(levelUnits, -12)
		now := updated.Add(time.Duration(dt) * time.Microsecond)
		want := bucket.LevelAt(l, bucket.State{Level: ledger.Amount(level), Updated: updated}, now)
		a := fmt.Sprintf("%s|%d|%d", levelUnits, updated.UnixMicro(), now.UnixMicro())
		checks = append(checks, check{a, fmt.Sprintf("%d|%d", amountUnits, per.Microseconds()), want.Decimal()})
		ra, rp := leakRatio(ledger.Limit{LeakAmount: l.LeakAmount.Decimal(), LeakPer: per})
		checks = append(checks, check{a, ra + "|" + rp, want.Decimal()})
	}
	amounts := []int64{1, 7, 1_000_000, 999_999_000_000, 1_000_000_000_000, 123_456_789_000_000, 999_999_999_999_000_000}
	pers := []time.Duration{time.Microsecond, 3 * time.Microsecond, time.Second, 7 * time.Second, time.Hour, 87600 * time.Hour}
	levels := []*big.Int{big.NewInt(1), big.NewInt(999_999_999_999), big.NewInt(1_000_000_000_000),
		big.NewInt(two53 - 1), big.NewInt(two53), big.NewInt(two53 + 1),
		bigOf("4503599627370495999999999999"), bigOf("4503599627370496000000000000"), // H = 2^52 - 1, 2^52
		bigOf("1000000000000000000000000000"), bigOf("999999999999999999999999999")}
	for _, a := range amounts {
		for _, per := range pers {
			for _, lv := range levels {
				// dt around 2^53 / amount: amount*dt just below and above 2^53.
				edge := two53 / a
				// dt around level*per/amount: just before and after empty.
				drain := new(big.Int).Quo(new(big.Int).Mul(lv, big.NewInt(per.Microseconds())), big.NewInt(a))
				dts := []int64{1, 2, 999, edge - 1, edge, edge + 1, 315_360_000_000_000, 1 + r.Int64N(1<<40)}
				if drain.IsInt64() && drain.Int64() < 1<<51 {
					d := drain.Int64()
					dts = append(dts, d-1, d, d+1)
				}
				for _, dt := range dts {
					if dt > 0 && dt <= 315_360_000_000_000 {
						add(a, per, lv, dt)
					}
				}
			}
		}
	}
	for start := 0; start < len(checks); start += 1000 {
		batch := checks[start:min(start+1000, len(checks))]
		args := make([]any, 0, 3*len(batch))
		for _, c := range batch {
			args = append(args, "level", c.a, c.b)
		}
		got, err := bigintProbe.Run(ctx, s.client, []string{"probe"}, args...).StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range batch {
			lvl, err := fromUnits(got[i])
			if err != nil || !lvl.Equal(c.want) {
				t.Errorf("level(%s; %s) = %s, want %s", c.a, c.b, got[i], units(c.want))
			}
		}
	}
	t.Logf("%d checks", len(checks))
}

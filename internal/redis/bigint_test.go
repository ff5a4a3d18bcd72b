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
	goredis "github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"
)

// bigintProbe runs the scripts' integer routines on a batch of operations:
// ARGV is a flat list of (op, a, b) triples and the reply is one result per
// triple. "level" runs the whole leak rule: a = "level|updated|now", b =
// "amount|per", all in the scripts' units.
var bigintProbe = goredis.NewScript(bigintLua + "\n" + bucketLua + `
local out = {}
for i = 1, #ARGV, 3 do
  local op, x, y = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local r
  if op == 'add' then r = bs(bn_add(bn(x), bn(y)))
  elseif op == 'sub' then r = bs(bn_sub(bn(x), bn(y)))
  elseif op == 'mul' then r = bs(bn_mul(bn(x), bn(y)))
  elseif op == 'cmp' then r = tostring(bn_cmp(bn(x), bn(y)))
  elseif op == 'div' then
    local q, m = bn_divsmall(bn(x), tonumber(y))
    r = bs(q) .. ',' .. fmt(m)
  elseif op == 'held' then
    local st = { holds = {} }
    for a in string.gmatch(x, '%d+') do st.holds[#st.holds + 1] = { a = a, e = 2 } end
    r = bs(held_at(st, 1))
  elseif op == 'level' then
    local l, u, now = string.match(x, '^(%d+)|(%d+)|(%d+)$')
    local a, per = string.match(y, '^(%d+)|(%d+)$')
    local c = { amt = bn(a), per = tonumber(per) }
    r = bs(level_at(c, { l = bn(l), u = tonumber(u) }, tonumber(now)))
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
	for _, e := range []int64{7, 12, 14, 18, 21, 24, 27, 28, 33, 40} {
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
			)
			if x.Cmp(y) >= 0 {
				checks = append(checks, check{"sub", x.String(), y.String(), new(big.Int).Sub(x, y).String()})
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
	for start := 0; start < len(checks); start += 3000 {
		batch := checks[start:min(start+3000, len(checks))]
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
		l := bucket.Limit{Capacity: decimal.New(1, 12), LeakAmount: amount(), LeakPer: per()}
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
		st := bucket.State{Level: level, Updated: updated}
		checks = append(checks, check{
			a:    fmt.Sprintf("%s|%d|%d", units(level), updated.UnixMicro(), now.UnixMicro()),
			b:    fmt.Sprintf("%s|%d", units(l.LeakAmount), l.LeakPer.Microseconds()),
			want: bucket.LevelAt(l, st, now),
		})
	}
	args := make([]any, 0, 3*len(checks))
	for _, c := range checks {
		args = append(args, "level", c.a, c.b)
	}
	got, err := bigintProbe.Run(ctx, s.client, []string{"probe"}, args...).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range checks {
		lvl, err := fromUnits(got[i])
		if err != nil || !lvl.Equal(c.want) {
			t.Errorf("level(%s; %s) = %s, want %s", c.a, c.b, got[i], units(c.want))
		}
	}
}

package bucket

import (
	"math"
	"math/big"
	"math/bits"
	"strconv"
	"time"

	"github.com/shopspring/decimal"
)

// Amount is an exact decimal with at most LevelScale (12) fractional digits:
// a signed 128-bit count of 10^-12 units. Every amount and level the rule
// handles fits many times over (docs/rounding.md), so the rule computes in
// integers, with no allocation and no rounding but the two the rounding rule
// names. The zero value is 0; Amounts are comparable with ==, since each
// value has one representation.
//
// Decimals stay at the edges: FromDecimal, ParseAmount and ParseUnits read
// one, and String, Append, Units and Decimal write one.
type Amount struct{ v int128 }

// unit is 10^LevelScale: the units in 1.
const unit = 1_000_000_000_000

// pow10 holds 10^0 … 10^19.
var pow10 = func() (p [20]uint64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// AmountOf returns the whole number n as an Amount.
func AmountOf(n int64) Amount {
	neg := n < 0
	u := uint64(n)
	if neg {
		u = -u
	}
	hi, lo := bits.Mul64(u, unit)
	a := Amount{int128{hi, lo}}
	if neg {
		a.v = a.v.neg()
	}
	return a
}

// FromDecimal returns d as an Amount, and false when d has a nonzero digit
// past the LevelScale-th fractional one or does not fit. Every amount the API
// accepts and every level a store keeps converts exactly and, for
// coefficients of up to 18 digits, without allocating.
func FromDecimal(d decimal.Decimal) (Amount, bool) {
	exp := int(d.Exponent())
	if d.NumDigits() <= 18 && exp >= -LevelScale && exp <= 6 {
		c := d.CoefficientInt64()
		neg := c < 0
		u := uint64(c)
		if neg {
			u = -u
		}
		hi, lo := bits.Mul64(u, pow10[LevelScale+exp])
		if hi>>63 != 0 {
			return Amount{}, false
		}
		a := Amount{int128{hi, lo}}
		if neg {
			a.v = a.v.neg()
		}
		return a, true
	}
	return fromBig(d.Coefficient(), exp)
}

// fromBig is FromDecimal for a coefficient c scaled by 10^exp of any size.
func fromBig(c *big.Int, exp int) (Amount, bool) {
	shift := exp + LevelScale
	if shift >= 0 {
		c.Mul(c, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(shift)), nil))
	} else {
		q, r := new(big.Int).QuoRem(c, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(-shift)), nil), new(big.Int))
		if r.Sign() != 0 {
			return Amount{}, false
		}
		c = q
	}
	return amountFromBig(c)
}

// amountFromBig returns the integer c of units as an Amount, and false when
// it does not fit.
func amountFromBig(c *big.Int) (Amount, bool) {
	if c.BitLen() > 127 {
		return Amount{}, false
	}
	m := new(big.Int).Abs(c)
	lo := new(big.Int).And(m, new(big.Int).SetUint64(1<<64-1)).Uint64()
	hi := new(big.Int).Rsh(m, 64).Uint64()
	a := Amount{int128{hi, lo}}
	if c.Sign() < 0 {
		a.v = a.v.neg()
	}
	return a, true
}

// MustAmount returns the decimal s as an Amount and panics when ParseAmount
// refuses it: for constants and tests.
func MustAmount(s string) Amount {
	a, ok := ParseAmount(s)
	if !ok {
		panic("bucket: not an amount: " + strconv.Quote(s))
	}
	return a
}

// ParseAmount reads a decimal in plain notation (an optional '-', digits, and
// an optional '.' with digits), and reports false for anything else, for a
// nonzero digit past the LevelScale-th fractional one, or for a value that
// does not fit. It is the reader of stores' text; the API's stricter input
// rule is package ledger's.
func ParseAmount(s string) (Amount, bool) {
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	intPart, frac := s, ""
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			intPart, frac = s[:i], s[i+1:]
			if frac == "" {
				return Amount{}, false
			}
			break
		}
	}
	for len(frac) > LevelScale && frac[len(frac)-1] == '0' {
		frac = frac[:len(frac)-1]
	}
	if intPart == "" || len(frac) > LevelScale {
		return Amount{}, false
	}
	v, ok := digits(int128{}, intPart)
	if !ok {
		return Amount{}, false
	}
	// v × 10^12 + frac × 10^(12 − len(frac))
	v, ok = v.mul64(unit)
	if !ok {
		return Amount{}, false
	}
	f, ok := digits(int128{}, frac)
	if !ok {
		return Amount{}, false
	}
	f, _ = f.mul64(pow10[LevelScale-len(frac)])
	v = v.add(f)
	if v.sign() < 0 {
		return Amount{}, false
	}
	if neg {
		v = v.neg()
	}
	return Amount{v}, true
}

// ParseUnits reads an integer count of 10^-12 units (an optional '-' and
// digits), as the Redis store keeps amounts.
func ParseUnits(s string) (Amount, bool) {
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	if s == "" {
		return Amount{}, false
	}
	v, ok := digits(int128{}, s)
	if !ok {
		return Amount{}, false
	}
	if neg {
		v = v.neg()
	}
	return Amount{v}, true
}

// digits appends the decimal digits of s to v ≥ 0 and reports false for a
// non-digit or an overflow past 2^127 − 1.
func digits(v int128, s string) (int128, bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return int128{}, false
		}
		var ok bool
		if v, ok = v.mul64(10); !ok {
			return int128{}, false
		}
		v = v.add(int128{lo: uint64(c - '0')})
		if v.sign() < 0 {
			return int128{}, false
		}
	}
	return v, true
}

// Add returns a + b.
func (a Amount) Add(b Amount) Amount { return Amount{a.v.add(b.v)} }

// Sub returns a − b.
func (a Amount) Sub(b Amount) Amount { return Amount{a.v.sub(b.v)} }

// Cmp returns -1, 0 or +1 as a is less than, equal to or greater than b.
func (a Amount) Cmp(b Amount) int { return a.v.cmp(b.v) }

// Sign returns -1, 0 or +1 as a is negative, zero or positive.
func (a Amount) Sign() int { return a.v.sign() }

// IsZero reports whether a is 0.
func (a Amount) IsZero() bool { return a.v == int128{} }

// LessThan reports whether a < b.
func (a Amount) LessThan(b Amount) bool { return a.v.cmp(b.v) < 0 }

// GreaterThan reports whether a > b.
func (a Amount) GreaterThan(b Amount) bool { return a.v.cmp(b.v) > 0 }

// LessThanOrEqual reports whether a ≤ b.
func (a Amount) LessThanOrEqual(b Amount) bool { return a.v.cmp(b.v) <= 0 }

// GreaterThanOrEqual reports whether a ≥ b.
func (a Amount) GreaterThanOrEqual(b Amount) bool { return a.v.cmp(b.v) >= 0 }

// Floor returns a rounded down to a whole number, and false when that
// passes an int64.
func (a Amount) Floor() (int64, bool) {
	v := a.v
	neg := v.sign() < 0
	if neg {
		v = v.neg()
	}
	q, r := v.divRem64(unit)
	if neg && r != 0 {
		q = q.add(int128{lo: 1})
	}
	if q.hi != 0 || q.lo > 1<<63-1 {
		return 0, false
	}
	if neg {
		return -int64(q.lo), true
	}
	return int64(q.lo), true
}

// Equal reports whether a = b.
func (a Amount) Equal(b Amount) bool { return a == b }

// MinAmount returns the lesser of a and b.
func MinAmount(a, b Amount) Amount {
	if a.LessThan(b) {
		return a
	}
	return b
}

// MaxAmount returns the greater of a and b.
func MaxAmount(a, b Amount) Amount {
	if a.GreaterThan(b) {
		return a
	}
	return b
}

// String returns a in plain notation with trailing fractional zeros removed,
// as the API writes amounts: "5000", "9.5", "0.000000000001".
func (a Amount) String() string { return string(a.Append(make([]byte, 0, 24))) }

// Append appends a.String() to b.
func (a Amount) Append(b []byte) []byte { return appendScaled(b, a.v, LevelScale) }

// Units returns a as an integer count of 10^-12 units, as the Redis store
// keeps amounts.
func (a Amount) Units() string { return string(a.AppendUnits(make([]byte, 0, 24))) }

// AppendUnits appends a.Units() to b.
func (a Amount) AppendUnits(b []byte) []byte { return appendScaled(b, a.v, 0) }

// Decimal returns a as a decimal.Decimal.
func (a Amount) Decimal() decimal.Decimal { return toDecimal(a.v, LevelScale) }

// toDecimal returns v × 10^-scale as a decimal.Decimal, trailing zeros
// dropped from the coefficient.
func toDecimal(v int128, scale int) decimal.Decimal {
	if v.sign() == 0 {
		return decimal.Zero
	}
	neg := v.sign() < 0
	m := v
	if neg {
		m = m.neg()
	}
	for scale > 0 {
		q, r := m.divRem64(10)
		if r != 0 {
			break
		}
		m, scale = q, scale-1
	}
	if m.hi == 0 && m.lo < 1<<63 {
		c := int64(m.lo)
		if neg {
			c = -c
		}
		return decimal.New(c, int32(-scale))
	}
	c := new(big.Int).SetUint64(m.hi)
	c.Lsh(c, 64).Or(c, new(big.Int).SetUint64(m.lo))
	if neg {
		c.Neg(c)
	}
	return decimal.NewFromBigInt(c, int32(-scale))
}

// appendScaled appends v × 10^-scale in plain notation, trailing fractional
// zeros removed.
func appendScaled(b []byte, v int128, scale int) []byte {
	if v.sign() < 0 {
		b = append(b, '-')
		v = v.neg()
	}
	// The digits of v, least significant first, 19 at a time, then zeros
	// up to one integer digit.
	var buf [48]byte
	i := len(buf)
	for {
		q, r := v.divRem64(pow10[19])
		v = q
		if v == (int128{}) {
			for r >= 10 {
				i--
				buf[i] = byte('0' + r%10)
				r /= 10
			}
			i--
			buf[i] = byte('0' + r)
			break
		}
		for range 19 {
			i--
			buf[i] = byte('0' + r%10)
			r /= 10
		}
	}
	for len(buf)-i <= scale {
		i--
		buf[i] = '0'
	}
	ds := buf[i:]
	intLen := len(ds) - scale
	frac := ds[intLen:]
	for len(frac) > 0 && frac[len(frac)-1] == '0' {
		frac = frac[:len(frac)-1]
	}
	b = append(b, ds[:intLen]...)
	if len(frac) > 0 {
		b = append(b, '.')
		b = append(b, frac...)
	}
	return b
}

// Micros is a wait in whole microseconds, kept in 128 bits: the time a tiny
// leak rate takes to drain a large level can pass what an int64 or a
// time.Duration holds. The API writes it in seconds.
type Micros struct{ v int128 }

// MicrosOf returns n microseconds.
func MicrosOf(n int64) Micros { return Micros{i128(n)} }

// IsZero reports whether m is no wait at all.
func (m Micros) IsZero() bool { return m.v == int128{} }

// Cmp returns -1, 0 or +1 as m is shorter than, equal to or longer than o.
func (m Micros) Cmp(o Micros) int { return m.v.cmp(o.v) }

// Equal reports whether m = o.
func (m Micros) Equal(o Micros) bool { return m == o }

// String returns m in seconds, in plain notation with at most 6 fractional
// digits and no trailing zeros: "899.957224", "1", "0".
func (m Micros) String() string { return string(m.Append(make([]byte, 0, 24))) }

// Append appends m.String() to b.
func (m Micros) Append(b []byte) []byte { return appendScaled(b, m.v, 6) }

// Seconds returns m in seconds as a decimal.Decimal.
func (m Micros) Seconds() decimal.Decimal { return toDecimal(m.v, 6) }

// CeilSeconds returns m rounded up to whole seconds, as the Retry-After
// header carries it, and false when that passes an int64.
func (m Micros) CeilSeconds() (int64, bool) {
	q, r := m.v.divRem64(1_000_000)
	if r != 0 {
		q = q.add(int128{lo: 1})
	}
	if q.hi != 0 || q.lo > 1<<63-1 {
		return 0, false
	}
	return int64(q.lo), true
}

// Duration returns m as a time.Duration, saturating at the longest one.
func (m Micros) Duration() time.Duration {
	if m.v.hi != 0 || m.v.lo > uint64(math.MaxInt64/int64(time.Microsecond)) {
		return math.MaxInt64
	}
	return time.Duration(m.v.lo) * time.Microsecond
}

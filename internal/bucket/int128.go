package bucket

import "math/bits"

// int128 is a signed 128-bit integer in two's complement: the exact
// arithmetic under Amount and Micros. Every supported magnitude fits with
// room to spare (docs/rounding.md: levels up to 10^15 with 12 fractional
// digits are below 2^90), so sums and differences of the values the rule
// handles never overflow; the two products that could (the leak and the
// time a leak takes) are computed in 192 bits by mulDiv and leakTime.
type int128 struct {
	hi uint64
	lo uint64
}

// maxInt128 is 2^127 − 1, where a product too large to matter saturates.
var maxInt128 = int128{hi: 1<<63 - 1, lo: 1<<64 - 1}

func i128(n int64) int128 { return int128{hi: uint64(n >> 63), lo: uint64(n)} }

func (a int128) add(b int128) int128 {
	lo, c := bits.Add64(a.lo, b.lo, 0)
	hi, _ := bits.Add64(a.hi, b.hi, c)
	return int128{hi, lo}
}

func (a int128) sub(b int128) int128 {
	lo, c := bits.Sub64(a.lo, b.lo, 0)
	hi, _ := bits.Sub64(a.hi, b.hi, c)
	return int128{hi, lo}
}

func (a int128) neg() int128 { return int128{}.sub(a) }

func (a int128) sign() int {
	switch {
	case int64(a.hi) < 0:
		return -1
	case a.hi == 0 && a.lo == 0:
		return 0
	}
	return 1
}

func (a int128) cmp(b int128) int {
	switch {
	case int64(a.hi) < int64(b.hi):
		return -1
	case int64(a.hi) > int64(b.hi):
		return 1
	case a.lo < b.lo:
		return -1
	case a.lo > b.lo:
		return 1
	}
	return 0
}

// mul64 returns a × m for a ≥ 0 and whether it fits in int128.
func (a int128) mul64(m uint64) (int128, bool) {
	p, ok := mul192(a, m)
	if !ok || p[2] != 0 || int64(p[1]) < 0 {
		return maxInt128, false
	}
	return int128{p[1], p[0]}, true
}

// mul192 returns a × m as three 64-bit words, least significant first, for
// a ≥ 0.
func mul192(a int128, m uint64) ([3]uint64, bool) {
	if a.sign() < 0 {
		return [3]uint64{}, false
	}
	h1, l0 := bits.Mul64(a.lo, m)
	h2, l1 := bits.Mul64(a.hi, m)
	mid, c := bits.Add64(h1, l1, 0)
	return [3]uint64{l0, mid, h2 + c}, true
}

// mulDiv returns floor(a × m / d) for a ≥ 0, d > 0, saturating at
// maxInt128 when the quotient does not fit.
func mulDiv(a int128, m, d uint64) int128 {
	p, _ := mul192(a, m)
	if p[2] == 0 && p[1] == 0 { // the common case: the product fits 64 bits
		return int128{lo: p[0] / d}
	}
	if p[2] >= d {
		return maxInt128
	}
	q1, r := bits.Div64(p[2], p[1], d)
	q0, _ := bits.Div64(r, p[0], d)
	if int64(q1) < 0 {
		return maxInt128
	}
	return int128{q1, q0}
}

// divRem64 returns a / d and a % d for a ≥ 0 and d > 0.
func (a int128) divRem64(d uint64) (int128, uint64) {
	q1, r := bits.Div64(0, a.hi, d)
	q0, r := bits.Div64(r, a.lo, d)
	return int128{q1, q0}, r
}

// cmpU compares a and b as unsigned 128-bit integers.
func cmpU(a, b int128) int {
	switch {
	case a.hi < b.hi:
		return -1
	case a.hi > b.hi:
		return 1
	case a.lo < b.lo:
		return -1
	case a.lo > b.lo:
		return 1
	}
	return 0
}

// mulDivCeil returns ceil(a × m / d) for a ≥ 0 and d > 0, saturating at
// maxInt128 when the quotient does not fit.
func mulDivCeil(a int128, m uint64, d int128) int128 {
	p, _ := mul192(a, m)
	if d.hi == 0 {
		if p[2] >= d.lo {
			return maxInt128
		}
		q1, r := bits.Div64(p[2], p[1], d.lo)
		q0, r := bits.Div64(r, p[0], d.lo)
		q := int128{q1, q0}
		if r != 0 {
			q = q.add(int128{lo: 1})
		}
		if q.sign() < 0 {
			return maxInt128
		}
		return q
	}
	// A divisor of two words: shift and subtract, bit by bit. The remainder
	// stays below d < 2^127, so shifting it left never loses a bit.
	var q, r int128
	for i := 191; i >= 0; i-- {
		bit := p[i/64] >> (i % 64) & 1
		r = int128{hi: r.hi<<1 | r.lo>>63, lo: r.lo<<1 | bit}
		if q.hi>>63 != 0 {
			return maxInt128 // the quotient passed 2^127
		}
		q = int128{hi: q.hi<<1 | q.lo>>63, lo: q.lo << 1}
		if cmpU(r, d) >= 0 {
			r = r.sub(d)
			q.lo |= 1
		}
	}
	if r.sign() != 0 {
		q = q.add(int128{lo: 1})
	}
	if q.sign() < 0 {
		return maxInt128
	}
	return q
}

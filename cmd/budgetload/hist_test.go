package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestBuckets: every value lands in a bucket whose range holds it, the
// buckets are contiguous, and none is wider than 1/128 of its values.
func TestBuckets(t *testing.T) {
	prevHi := int64(-1)
	for i := range histBuckets - 1 {
		lo, hi := bucketRange(i)
		if lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", i, lo, prevHi)
		}
		if float64(hi-lo+1) > math.Max(1, float64(lo)/half) {
			t.Fatalf("bucket %d [%d,%d] is wider than 1/%d", i, lo, hi, half)
		}
		for _, v := range []int64{lo, hi, (lo + hi) / 2} {
			if got := bucketOf(v); got != i {
				t.Fatalf("bucketOf(%d) = %d, want %d", v, got, i)
			}
		}
		prevHi = hi
	}
	for _, v := range []int64{-5, 0, 1, 255, 256, 257, 1e6, 1e9, 1 << 41, math.MaxInt64} {
		i := bucketOf(v)
		if i < 0 || i >= histBuckets {
			t.Fatalf("bucketOf(%d) = %d out of range", v, i)
		}
	}
}

// TestQuantiles compares the histogram's percentiles with the exact ones of
// the same data: never below, at most one bucket (0.8%) above.
func TestQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, dist := range []struct {
		name string
		gen  func() time.Duration
	}{
		{"uniform µs", func() time.Duration { return time.Duration(rng.IntN(1000)) * time.Microsecond }},
		{"lognormal", func() time.Duration { return time.Duration(math.Exp(rng.NormFloat64()*1.5 + 13)) }},
		{"bimodal", func() time.Duration {
			if rng.IntN(100) == 0 {
				return time.Duration(50+rng.IntN(50)) * time.Millisecond
			}
			return time.Duration(300+rng.IntN(200)) * time.Microsecond
		}},
		{"tiny", func() time.Duration { return time.Duration(rng.IntN(300)) }},
	} {
		h := newHistogram()
		vals := make([]int64, 100_000)
		for i := range vals {
			d := dist.gen()
			vals[i] = int64(d)
			h.record(d)
		}
		slices.Sort(vals)
		for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999, 0.9999, 1} {
			rank := max(1, int(math.Ceil(q*float64(len(vals)))))
			exact := vals[rank-1]
			got := int64(h.quantile(q))
			if got < exact || float64(got-exact) > math.Max(1, float64(exact)/half) {
				t.Errorf("%s: q%g = %d, exact %d", dist.name, q, got, exact)
			}
		}
		if h.max != vals[len(vals)-1] || h.min != vals[0] || h.total != uint64(len(vals)) {
			t.Errorf("%s: min %d max %d total %d", dist.name, h.min, h.max, h.total)
		}
	}
}

func TestMerge(t *testing.T) {
	a, b, all := newHistogram(), newHistogram(), newHistogram()
	for i := range 1000 {
		d := time.Duration(i*i) * time.Microsecond
		all.record(d)
		if i%3 == 0 {
			a.record(d)
		} else {
			b.record(d)
		}
	}
	a.merge(b)
	a.merge(newHistogram())
	if a.counts != all.counts || a.total != all.total || a.min != all.min || a.max != all.max || a.sum != all.sum {
		t.Fatal("merged histogram differs from one that recorded everything")
	}
	for _, q := range []float64{.5, .99, .999} {
		if a.quantile(q) != all.quantile(q) {
			t.Fatalf("q%g differs", q)
		}
	}
	if newHistogram().quantile(.99) != 0 || newHistogram().mean() != 0 {
		t.Fatal("empty histogram")
	}
}

func TestParseMix(t *testing.T) {
	m, err := parseMix("fillup=70,can=20,reserve=5,multi=5")
	if err != nil || m != [numOps]int{70, 20, 5, 5} {
		t.Fatalf("%v %v", m, err)
	}
	if m, err := parseMix("fillup=100"); err != nil || m != [numOps]int{100, 0, 0, 0} || mixString(m) != "fillup=100" {
		t.Fatalf("%v %v", m, err)
	}
	for _, bad := range []string{"", "fillup", "fillup=x", "drain=5", "fillup=0", "fillup=-1"} {
		if _, err := parseMix(bad); err == nil {
			t.Errorf("parseMix(%q) accepted", bad)
		}
	}
}

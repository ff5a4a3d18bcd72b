package main

import (
	"math"
	"math/bits"
	"time"
)

// A histogram counts latencies in log-linear buckets, as HdrHistogram does:
// values below 2^subBits nanoseconds have a bucket each; above, every power
// of two is split into half of 2^subBits equal buckets, so a bucket is never
// wider than 1/2^(subBits-1) of its values (0.8% with subBits 8). Recording
// is an array increment: no allocation, no lock (each worker has its own).
type histogram struct {
	counts [histBuckets]uint64
	total  uint64
	sum    int64 // nanoseconds, for the mean
	min    int64
	max    int64
}

const (
	subBits = 8
	half    = 1 << (subBits - 1)
	// maxShift bounds the values kept apart: 2^(maxShift+subBits) ns is
	// about 70 minutes; longer latencies land in the last bucket.
	maxShift    = 34
	histBuckets = (maxShift+1)*half + half
)

// bucketOf is the index of the bucket that holds v nanoseconds.
func bucketOf(v int64) int {
	if v < 0 {
		v = 0
	}
	e := bits.Len64(uint64(v)) - subBits
	if e <= 0 {
		return int(v)
	}
	if e > maxShift {
		return histBuckets - 1
	}
	return e*half + int(v>>e)
}

// bucketRange is the smallest and largest value that bucket i holds.
func bucketRange(i int) (lo, hi int64) {
	if i < 2*half {
		return int64(i), int64(i)
	}
	e := i/half - 1
	m := int64(i - e*half)
	return m << e, (m+1)<<e - 1
}

func newHistogram() *histogram { return &histogram{min: math.MaxInt64} }

// record counts one latency.
func (h *histogram) record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	h.counts[bucketOf(v)]++
	h.total++
	h.sum += v
	if v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
}

// merge adds o's counts to h.
func (h *histogram) merge(o *histogram) {
	if o.total == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.sum += o.sum
	h.min = min(h.min, o.min)
	h.max = max(h.max, o.max)
}

// reset forgets everything recorded (after the warm-up).
func (h *histogram) reset() { *h = histogram{min: math.MaxInt64} }

// quantile is the latency below or at which a fraction q of the recorded
// values lie: the upper end of the bucket that holds the ⌈q·n⌉-th smallest
// value (never above the largest value seen), so it errs high by at most one
// bucket width — a percentile is never reported better than it was.
func (h *histogram) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.total)))
	rank = max(1, min(rank, h.total))
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			_, hi := bucketRange(i)
			return time.Duration(min(max(hi, h.min), h.max))
		}
	}
	return time.Duration(h.max)
}

// mean is the average latency.
func (h *histogram) mean() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.sum / int64(h.total))
}

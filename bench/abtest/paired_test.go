package main

import (
	"math"
	"testing"
)

func TestBinomCDF(t *testing.T) {
	// P(X ≤ 9) and P(X ≤ 10) for X ~ Binomial(31, ½): the 95% interval of
	// the median of 31 values is their 10th to 22nd.
	for _, tc := range []struct {
		n, j int
		want float64
	}{{31, 9, 0.014725}, {31, 10, 0.035378}, {6, 0, 0.015625}, {4, 4, 1}} {
		if got := binomCDF(tc.n, tc.j); math.Abs(got-tc.want) > 1e-6 {
			t.Errorf("binomCDF(%d, %d) = %.6f, want %.6f", tc.n, tc.j, got, tc.want)
		}
	}
}

func TestMedianInterval(t *testing.T) {
	v := make([]float64, 31)
	for i := range v {
		v[i] = float64(31 - i) // 31 … 1, unsorted on purpose
	}
	med, lo, hi, ok := medianInterval(v)
	if !ok || med != 16 || lo != 10 || hi != 22 {
		t.Errorf("medianInterval(1…31) = %v [%v, %v] %v, want 16 [10, 22] true", med, lo, hi, ok)
	}
	if _, _, _, ok := medianInterval([]float64{1, 2, 3, 4, 5}); ok {
		t.Error("an interval of 5 values: no order statistics make 95%")
	}
	if med, lo, hi, ok := medianInterval([]float64{3, 1, 2, 6, 5, 4}); !ok || med != 3.5 || lo != 1 || hi != 6 {
		t.Errorf("medianInterval(1…6) = %v [%v, %v] %v, want 3.5 [1, 6] true", med, lo, hi, ok)
	}
}

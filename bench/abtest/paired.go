package main

import (
	"fmt"
	"math"
	"slices"
)

// The paired figures: a round runs every binary once, close together in
// time, so the ratio of a binary's ns/op to the first's in the same round
// cancels most of the machine's drift between rounds. Their median comes
// with a distribution-free 95% interval (the order statistics a binomial
// count gives), which says whether a difference as small as 1% is shown.

// medianInterval returns the median of v and the 95% interval of the
// median: the k-th smallest and k-th largest value, k the largest for
// which fewer than k of n values fall below the true median with
// probability at most 2.5%. ok is false when n is too small for one (n < 6).
func medianInterval(v []float64) (med, lo, hi float64, ok bool) {
	s := slices.Sorted(slices.Values(v))
	n := len(s)
	if n == 0 {
		return 0, 0, 0, false
	}
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	k := 0 // the interval is s[k-1] … s[n-k]
	for j := 0; j < n; j++ {
		if binomCDF(n, j) > 0.025 {
			break
		}
		k = j + 1
	}
	if k == 0 {
		return med, 0, 0, false
	}
	return med, s[k-1], s[n-k], true
}

// binomCDF is P(X ≤ j) for X ~ Binomial(n, ½).
func binomCDF(n, j int) float64 {
	var p float64
	for i := 0; i <= j; i++ {
		lg, _ := math.Lgamma(float64(n + 1))
		li, _ := math.Lgamma(float64(i + 1))
		lr, _ := math.Lgamma(float64(n - i + 1))
		p += math.Exp(lg - li - lr - float64(n)*math.Ln2)
	}
	return p
}

// pairedRatios is, round by round, a's f over base's f.
func pairedRatios(a, base []sample, f func(sample) float64) []float64 {
	var r []float64
	for i := range min(len(a), len(base)) {
		r = append(r, f(a[i])/f(base[i]))
	}
	return r
}

// printPaired writes the table of paired ratios against the first binary.
func printPaired(bins []binary, names []string, got map[string]map[string][]sample) {
	if len(bins) < 2 {
		return
	}
	fmt.Printf("\n| benchmark | binary | ns/op ÷ %s, paired by round: median [95%% interval] | CPU ns/op ÷ %s |\n| --- | --- | --- | --- |\n", bins[0].name, bins[0].name)
	for _, bn := range names {
		base := got[bins[0].name][bn]
		for _, b := range bins[1:] {
			fmt.Printf("| %s | %s | %s | %s |\n", bn, b.name,
				interval(pairedRatios(got[b.name][bn], base, func(x sample) float64 { return x.ns })),
				interval(pairedRatios(got[b.name][bn], base, func(x sample) float64 { return x.cpuNs })))
		}
	}
}

func interval(v []float64) string {
	med, lo, hi, ok := medianInterval(v)
	if !ok {
		return fmt.Sprintf("%.3f [too few rounds for an interval]", med)
	}
	return fmt.Sprintf("%.3f [%.3f, %.3f]", med, lo, hi)
}

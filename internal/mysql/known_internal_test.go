package mysql

import (
	"fmt"
	"testing"
)

// TestKnown: the filter of buckets seen never says "not seen" of a bucket
// added, and of a million added it says "seen" of few buckets never added
// (each costs its batch a read, as without presumption), nor confuses one
// limit's bucket with the same key of another.
func TestKnown(t *testing.T) {
	k := newKnown(knownBits)
	const n = 1_000_000
	for i := range n {
		k.add(7, fmt.Sprint("k", i))
	}
	for i := range n {
		if !k.has(7, fmt.Sprint("k", i)) {
			t.Fatalf("k%d added, not seen", i)
		}
	}
	wrong := 0
	for i := range n / 10 {
		if k.has(7, fmt.Sprint("new", i)) {
			wrong++
		}
		if k.has(8, fmt.Sprint("k", i)) {
			wrong++
		}
	}
	// Three bits of 8 Mbit for each of a million buckets: (1-e^(-3/8))^3,
	// about 3.1% of the buckets never added are taken as seen.
	if rate := float64(wrong) / float64(2*n/10); rate > 0.05 {
		t.Errorf("%.1f%% of buckets never added taken as seen, want at most 5%%", 100*rate)
	}
}

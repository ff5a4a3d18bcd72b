package bucket

import (
	"testing"
	"time"
)

// The rule's hot operations allocate nothing (issue 28: bucket Fillup 0
// allocs), on a leaky limit and at its extremes as BenchmarkFillup and
// BenchmarkFillupExtreme run them, and a CanAccept.
func TestFillupAllocatesNothing(t *testing.T) {
	leaky := Limit{Capacity: d("1000000000000"), LeakAmount: d("5000.00"), LeakPer: 720 * time.Hour}
	extreme := Limit{Capacity: d("1000000000000"), LeakAmount: d("0.000001"), LeakPer: 87600 * time.Hour}
	_, full := Fillup(extreme, State{}, t0, d("999999999999.999999"))
	later := t0.Add(3 * 365 * 24 * time.Hour)
	var s State
	now := t0
	for name, f := range map[string]func(){
		"Fillup": func() {
			now = now.Add(time.Millisecond)
			_, s = Fillup(leaky, s, now, d("12.37"))
		},
		"FillupExtreme": func() { Fillup(extreme, full, later, d("0.000001")) },
		"CanAccept":     func() { CanAccept(leaky, s, now, d("1")) },
	} {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s allocates %v times per call", name, n)
		}
	}
}

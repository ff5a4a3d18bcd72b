package main

import (
	"testing"

	"github.com/shopspring/decimal"
)

// expectedCrossings names each threshold once, at the running sum of the
// first accepted charge that reaches it, also when one charge crosses both.
func TestExpectedCrossings(t *testing.T) {
	d := func(s string) decimal.Decimal { return decimal.RequireFromString(s) }
	cases := []struct {
		costs []string
		want  []crossing
	}{
		{[]string{"100.001", "300.001"}, nil},
		{[]string{"499.999", "0.001", "299.999"}, []crossing{{"50%", d("500")}}},
		{[]string{"400.001", "150.001", "300.001"}, []crossing{{"50%", d("550.002")}, {"80%", d("850.003")}}},
		{[]string{"20.001", "900.001"}, []crossing{{"50%", d("920.002")}, {"80%", d("920.002")}}},
	}
	for _, c := range cases {
		var costs []decimal.Decimal
		for _, s := range c.costs {
			costs = append(costs, d(s))
		}
		got := expectedCrossings(costs)
		if len(got) != len(c.want) {
			t.Errorf("%v: got %v, want %v", c.costs, got, c.want)
			continue
		}
		for i := range got {
			if got[i].threshold != c.want[i].threshold || !got[i].used.Equal(c.want[i].used) {
				t.Errorf("%v: got %v, want %v", c.costs, got, c.want)
			}
		}
	}
}

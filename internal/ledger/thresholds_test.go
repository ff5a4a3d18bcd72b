package ledger

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

func TestParseThreshold(t *testing.T) {
	good := map[string]string{"80%": "80%", "12.5%": "12.5%", "200%": "200%", "0.01%": "0.01%", "4500.00": "4500", "0.000001": "0.000001", "1000000000000": "1000000000000"}
	for in, want := range good {
		th, err := ParseThreshold("t", in)
		if err != nil || th.String() != want {
			t.Errorf("ParseThreshold(%q) = %v %v, want %s", in, th, err, want)
		}
	}
	for _, in := range []string{"0%", "200.01%", "1.005%", "%", "80 %", "-5%", "+5%", "1e2%", "0", "-1", "1e3", "0.0000001", "1000000000001", "", "80%%", ".5%"} {
		if _, err := ParseThreshold("t", in); err == nil {
			t.Errorf("ParseThreshold(%q) accepted", in)
		}
	}
}

func TestValidateThresholds(t *testing.T) {
	p := func(ss ...string) []Threshold {
		out := make([]Threshold, len(ss))
		for i, s := range ss {
			out[i], _ = ParseThreshold("t", s)
		}
		return out
	}
	if err := ValidateThresholds(p("1%", "2%", "3%", "4%", "5%", "6%", "7%", "8")); err != nil {
		t.Errorf("8 thresholds: %v", err)
	}
	for _, bad := range [][]Threshold{p("1%", "2%", "3%", "4%", "5%", "6%", "7%", "8%", "9%"), p("80%", "80.00%"), p("5", "5.0"), {{}}, {{Percent: decimal.NewFromInt(5), Amount: decimal.NewFromInt(5)}}} {
		if err := ValidateThresholds(bad); err == nil {
			t.Errorf("ValidateThresholds(%v) accepted", bad)
		}
	}
	if err := ValidateThresholds(p("80%", "80")); err != nil {
		t.Errorf("a percentage and an amount of the same number: %v", err)
	}
}

// TestCross walks the threshold rule through a table: crossings and
// recoveries once each, the re-arm of a new period, and a new list of
// thresholds taking the marks the use before the write already reaches.
func TestCross(t *testing.T) {
	th := func(ss ...string) []Threshold {
		out := make([]Threshold, len(ss))
		for i, s := range ss {
			out[i], _ = ParseThreshold("t", s)
		}
		return out
	}
	l := Limit{Capacity: decimal.NewFromInt(100), Thresholds: th("50%", "80%", "90")}
	jul, aug := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC)
	sep, oct := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	nov := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	steps := []struct {
		limit         Limit
		before, after string
		capacity      string
		period        time.Time
		want          string
	}{
		{l, "0", "49.99", "100", jul, ""},
		{l, "49.99", "50", "100", jul, "+0"},
		{l, "50", "95", "100", jul, "+1 +2"},
		{l, "95", "95", "100", jul, ""},
		{l, "95", "85", "100", jul, "-2"},
		{l, "85", "10", "200", jul, "-0 -1"},
		{l, "10", "190", "200", jul, "+0 +1 +2"},
		{l, "0", "10", "200", aug, ""}, // re-armed: no recovery
		{l, "10", "100", "200", aug, "+0 +2"},
		{Limit{Capacity: decimal.NewFromInt(200), Thresholds: th("40%", "99")}, "100", "100", "200", aug, ""}, // new list: marked as reached
		{Limit{Capacity: decimal.NewFromInt(200), Thresholds: th("40%", "99")}, "100", "50", "200", aug, "-0 -1"},
		{Limit{Capacity: decimal.NewFromInt(200)}, "50", "150", "200", aug, ""},
		// The list put again a period later: marks of another list (none)
		// are taken from the use before, whatever their period, so what
		// the bucket already reaches emits nothing.
		{l, "60", "70", "100", sep, ""},
		{l, "70", "80", "100", sep, "+1"},
		// A list changed in the new period of an earlier list's marks: the
		// same; the period after, the same list re-arms.
		{Limit{Capacity: decimal.NewFromInt(100), Thresholds: th("50%")}, "85", "86", "100", oct, ""},
		{Limit{Capacity: decimal.NewFromInt(100), Thresholds: th("50%")}, "0", "60", "100", nov, "+0"},
		{Limit{Capacity: decimal.NewFromInt(100)}, "60", "61", "100", nov, ""},
	}
	var m Marks
	for i, st := range steps {
		var cs []Crossing
		m, cs = Cross(st.limit, m, decimal.RequireFromString(st.before), decimal.RequireFromString(st.after), decimal.RequireFromString(st.capacity), st.period)
		var got []string
		for _, c := range cs {
			got = append(got, fmt.Sprintf("%s%d", map[bool]string{true: "+", false: "-"}[c.Crossed], c.Index))
		}
		if strings.Join(got, " ") != st.want {
			t.Fatalf("step %d (%s → %s of %s): %q, want %q (marks %+v)", i, st.before, st.after, st.capacity, strings.Join(got, " "), st.want, m)
		}
	}
	if m != (Marks{}) {
		t.Fatalf("a limit without thresholds keeps marks %+v", m)
	}
}

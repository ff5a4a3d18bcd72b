package quota

import (
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/dunglas/httpsfv"
)

func TestSFString(t *testing.T) {
	for _, s := range []string{"team-spend", `a"b\c`, ""} {
		sf := string(appendSFString(nil, s))
		item, err := httpsfv.UnmarshalItem([]string{sf})
		if err != nil || item.Value != s {
			t.Errorf("%q written as %s reads back as %v (%v)", s, sf, item.Value, err)
		}
	}
}

// TestLeakSeconds: the seconds a level takes to leak, rounded up and clamped
// to the 15 digits a structured-field integer allows.
func TestLeakSeconds(t *testing.T) {
	a := bucket.MustAmount
	for _, tc := range []struct {
		amount, leak string
		per          time.Duration
		want         int64
	}{
		{"100", "10", time.Second, 10},
		{"12.5", "0.3", time.Second, 42}, // 41.67 rounded up
		{"1", "3", time.Second, 1},       // 0.33 rounded up
		{"5000", "5000", 720 * time.Hour, 2592000},
		{"0.000001", "1000000000000", time.Microsecond, 1}, // tiny but not zero
		{"0", "1", time.Second, 0},
		{"1000000000000", "0.000001", 87600 * time.Hour, MaxInt}, // 3.1536e26 s, clamped
		{"999999999999", "1000000", time.Hour, 3600000000},       // 3599999999.9964 s
	} {
		got := Clamp(bucket.LeakTime(bucket.Limit{LeakAmount: a(tc.leak), LeakPer: tc.per}, a(tc.amount)).CeilSeconds())
		if got != tc.want {
			t.Errorf("%s at %s per %s: %d s, want %d", tc.amount, tc.leak, tc.per, got, tc.want)
		}
	}
	if n := Clamp(-5, true); n != 0 {
		t.Errorf("negative: %d", n)
	}
}

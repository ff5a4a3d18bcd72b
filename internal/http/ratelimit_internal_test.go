package http

import (
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/dunglas/httpsfv"
	"github.com/shopspring/decimal"
)

func TestSFString(t *testing.T) {
	for _, s := range []string{"team-spend", `a"b\c`, ""} {
		item, err := httpsfv.UnmarshalItem([]string{sfString(s)})
		if err != nil || item.Value != s {
			t.Errorf("%q written as %s reads back as %v (%v)", s, sfString(s), item.Value, err)
		}
	}
}

func TestLeakSeconds(t *testing.T) {
	d := decimal.RequireFromString
	for _, tc := range []struct {
		amount, leak string
		per          time.Duration
		want         string
	}{
		{"100", "10", time.Second, "10"},
		{"12.5", "0.3", time.Second, "42"}, // 41.67 rounded up
		{"1", "3", time.Second, "1"},       // 0.33 rounded up
		{"5000", "5000", 720 * time.Hour, "2592000"},
		{"0.000001", "1000000000000", time.Microsecond, "1"}, // tiny but not zero
		{"0", "1", time.Second, "0"},
		{"1000000000000", "0.000001", 87600 * time.Hour, "315360000000000000000000000"},
	} {
		got := leakSeconds(ledger.Limit{LeakAmount: d(tc.leak), LeakPer: tc.per}, d(tc.amount))
		if got.String() != tc.want {
			t.Errorf("%s at %s per %s: %s s, want %s", tc.amount, tc.leak, tc.per, got, tc.want)
		}
	}
	if h := headerInt(d("315360000000000000000000000")); h != "999999999999999" {
		t.Errorf("clamp: %s", h)
	}
	if h := headerInt(d("12.9")); h != "12" {
		t.Errorf("truncate: %s", h)
	}
}

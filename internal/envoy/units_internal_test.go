package envoy

import (
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/shopspring/decimal"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
)

// TestCurrentLimitUnit: the unit nearest a limit's time scale — a calendar
// period's own (a quarter is three months), else the longest unit not
// longer than the leak period or window, times the units it spans.
func TestCurrentLimitUnit(t *testing.T) {
	const (
		second = rlsv3.RateLimitResponse_RateLimit_SECOND
		minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
		hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
		week   = rlsv3.RateLimitResponse_RateLimit_WEEK
		month  = rlsv3.RateLimitResponse_RateLimit_MONTH
		year   = rlsv3.RateLimitResponse_RateLimit_YEAR
	)
	leak := func(per time.Duration) ledger.Limit { return ledger.Limit{LeakAmount: decimal.New(1, 0), LeakPer: per} }
	for _, tc := range []struct {
		name string
		l    ledger.Limit
		unit rlsv3.RateLimitResponse_RateLimit_Unit
		mult uint32 // 0: no multiplier
	}{
		{"leak per 1s", leak(time.Second), second, 0},
		{"leak per 100ms", leak(100 * time.Millisecond), second, 0},
		{"leak per 10s", leak(10 * time.Second), second, 10},
		{"leak per 90s", leak(90 * time.Second), minute, 2},
		{"leak per 720h", leak(720 * time.Hour), month, 0},
		{"leak per 2h", leak(2 * time.Hour), hour, 2},
		{"window 10m", ledger.Limit{Window: &ledger.Window{Length: 10 * time.Minute, Precision: time.Minute}}, minute, 10},
		{"week", ledger.Limit{Period: &ledger.Period{Every: "week", TZ: "UTC"}}, week, 0},
		{"quarter", ledger.Limit{Period: &ledger.Period{Every: "quarter", TZ: "UTC", StartDay: 1}}, month, 3},
		{"year", ledger.Limit{Period: &ledger.Period{Every: "year", TZ: "UTC"}}, year, 0},
	} {
		rl := currentLimit("x", tc.l, bucket.Decision{Capacity: bucket.MustAmount("12.9")})
		if rl.GetUnit() != tc.unit || rl.GetUnitMultiplier().GetValue() != tc.mult || rl.GetRequestsPerUnit() != 12 {
			t.Errorf("%s: %s × %d, %d per unit; want %s × %d, 12", tc.name, rl.GetUnit(), rl.GetUnitMultiplier().GetValue(), rl.GetRequestsPerUnit(), tc.unit, tc.mult)
		}
	}
}

package ledger

import (
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/shopspring/decimal"
)

// TestCarryAt is the rule of rollover case by case: which period the
// bucket was last written in decides between what it stored, its unused
// capacity and the whole capacity; the capacity in force at the end is
// asked only when needed, and what is carried is rounded down to the
// amount scale.
func TestCarryAt(t *testing.T) {
	l := Limit{Capacity: decimal.NewFromInt(100), Period: &Period{Every: "month", TZ: "UTC"}, Rollover: &Rollover{Max: decimal.NewFromInt(30)}}
	dec := decimal.RequireFromString
	at := func(s string) time.Time { v, _ := time.Parse(time.RFC3339, s); return v }
	now := at("2026-12-05T09:00:00Z")
	dec1 := at("2026-12-01T00:00:00Z").UnixMicro()
	nov1 := at("2026-11-01T00:00:00Z").UnixMicro()
	for _, c := range []struct {
		name      string
		limit     Limit
		updated   string
		level     string
		stored    Carry
		capacity  string // in force at the end of November; "" when it must not be asked
		unused    string
		period    int64
		received  string
		effective string
	}{
		{"never written", l, "", "0", Carry{}, "", "0", 0, "0", "100"},
		{"no rollover", Limit{Capacity: l.Capacity, Period: l.Period}, "2026-11-20T00:00:00Z", "10", Carry{}, "", "0", 0, "0", "100"},
		{"written in November", l, "2026-11-20T00:00:00Z", "90", Carry{}, "100", "10", dec1, "10", "110"},
		{"capped at max", l, "2026-11-30T23:59:59Z", "10", Carry{}, "100", "90", dec1, "30", "130"},
		{"over capacity", l, "2026-11-20T00:00:00Z", "120", Carry{}, "100", "0", dec1, "0", "100"},
		{"the capacity in force then", l, "2026-11-20T00:00:00Z", "90", Carry{}, "150", "60", dec1, "30", "130"},
		{"November untouched", l, "2026-10-31T23:59:59Z", "100", Carry{}, "100", "100", dec1, "30", "130"},
		{"written in December: stored", l, "2026-12-02T00:00:00Z", "500", Carry{Unused: bucket.MustAmount("12.5"), Period: dec1}, "", "12.5", dec1, "12.5", "112.5"},
		{"stored for another period", l, "2026-12-02T00:00:00Z", "5", Carry{Unused: bucket.MustAmount("12.5"), Period: nov1}, "", "0", dec1, "0", "100"},
		{"rounded down", l, "2026-11-20T00:00:00Z", "89.9999991", Carry{}, "100", "10", dec1, "10", "110"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var s bucket.State
			if c.updated != "" {
				s = bucket.State{Level: bucket.MustAmount(c.level), Updated: at(c.updated)}
			}
			asked := false
			got := CarryAt(c.limit, s, c.stored, now, func(end time.Time) decimal.Decimal {
				asked = true
				if !end.Equal(at("2026-12-01T00:00:00Z")) {
					t.Errorf("asked for the capacity at %v, want the end of November", end)
				}
				return dec(c.capacity)
			})
			if asked != (c.capacity != "") {
				t.Errorf("capacity asked: %v", asked)
			}
			if !got.Unused.Decimal().Equal(dec(c.unused)) || got.Period != c.period {
				t.Errorf("CarryAt = %+v (unused %s), want unused %s in period %d", got, got.Unused, c.unused, c.period)
			}
			e := c.limit.WithRollover(got)
			if !e.Received.Equal(dec(c.received)) || !e.Capacity.Equal(dec(c.effective)) {
				t.Errorf("WithRollover: received %s capacity %s, want %s and %s", e.Received, e.Capacity, c.received, c.effective)
			}
		})
	}
}

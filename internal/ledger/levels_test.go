package ledger

import (
	"strconv"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/shopspring/decimal"
)

// TestStartLevel: the least start level from which a cut history ends at
// the level now, exact to the last digit, and fast enough for MaxReplay
// entries (the bisection replays them about a hundred times).
func TestStartLevel(t *testing.T) {
	l := bucket.Limit{Capacity: bucket.MustAmount("1000000"), LeakAmount: bucket.MustAmount("10"), LeakPer: time.Hour}
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var entries []Entry
	for i := range MaxReplay {
		entries = append(entries, Entry{ID: strconv.Itoa(i), Time: t0.Add(time.Duration(i) * time.Minute), Event: EventFillup, Amount: decimal.RequireFromString("0.2")})
	}
	entries = append(entries, Entry{Time: t0.Add(MaxReplay * time.Minute), Event: EventDrain, Amount: decimal.RequireFromString("1.5")})
	now := t0.Add(MaxReplay*time.Minute + time.Hour)
	start := bucket.MustAmount("1234.567890123457")
	target := replayEnd(l, start, entries, now)
	began := time.Now()
	got := startLevel(l, entries, now, target)
	if got != start {
		t.Errorf("start level %s, want %s", got, start)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("bisection over %d entries took %v", len(entries), d)
	}
	// A period start in between: no start level reaches the target; zero.
	p := Period{Every: "month", TZ: "UTC", StartDay: 1}
	monthly := Limit{Capacity: decimal.NewFromInt(100), Period: &p}
	one := []Entry{{Time: t0, Event: EventFillup, Amount: decimal.NewFromInt(5)}}
	if got := startLevel(monthly.Rule(), one, t0.AddDate(0, 1, 1), bucket.MustAmount("7")); !got.IsZero() {
		t.Errorf("unreachable target: start %s", got)
	}
}

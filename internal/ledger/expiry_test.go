package ledger

import (
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/shopspring/decimal"
)

// A bucket written under a temporary leak override and read after its
// expiry leaks at the override's rate up to expires_at and at the limit's
// after: 100 at t0, 5/s for 10s, then 1/s for 10s, is 40 (not 80).
func TestSettleExpiriesLeak(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	l := Limit{Capacity: decimal.NewFromInt(1000), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Second}
	var s Overrides
	s.Put(Override{Pattern: "k", LeakAmount: decimal.NewFromInt(5), LeakPer: time.Second, ExpiresAt: t0.Add(10 * time.Second)})
	st := bucket.State{Level: Amount(decimal.NewFromInt(100)), Updated: t0}
	now := t0.Add(20 * time.Second)
	ns, _ := s.SettleExpiries(l, "k", st, now)
	got := bucket.LevelAt(s.Effective(l, "k", now).Rule(), ns, now)
	if want := Amount(decimal.NewFromInt(40)); got.Cmp(want) != 0 {
		t.Fatalf("level = %v, want %v", got, want)
	}
	// Before the expiry nothing changes.
	if ns, _ := s.SettleExpiries(l, "k", st, t0.Add(5*time.Second)); !ns.Updated.Equal(t0) {
		t.Fatalf("settled before the expiry: %v", ns.Updated)
	}
}

// A chain of expired overrides is walked: the exact one (5/s to t0+10s),
// then the prefix one (2/s to t0+15s), then the limit's 1/s: 100 → 50 → 40
// → 35 at t0+20s.
func TestSettleExpiriesChain(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	l := Limit{Capacity: decimal.NewFromInt(1000), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Second}
	var s Overrides
	s.Put(Override{Pattern: "k", LeakAmount: decimal.NewFromInt(5), LeakPer: time.Second, ExpiresAt: t0.Add(10 * time.Second)})
	s.Put(Override{Pattern: "*", LeakAmount: decimal.NewFromInt(2), LeakPer: time.Second, ExpiresAt: t0.Add(15 * time.Second)})
	st := bucket.State{Level: Amount(decimal.NewFromInt(100)), Updated: t0}
	now := t0.Add(20 * time.Second)
	ns, _ := s.SettleExpiries(l, "k", st, now)
	got := bucket.LevelAt(l.Rule(), ns, now)
	if want := Amount(decimal.NewFromInt(35)); got.Cmp(want) != 0 {
		t.Fatalf("level = %v, want %v", got, want)
	}
}

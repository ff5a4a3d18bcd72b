package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/shopspring/decimal"
)

// TestFastPathDifferential replays random Fillups and Drains with pinned
// times against the store and the pure rule, on limits chosen so that the
// scripts keep crossing the bounds of fast.lua: leak amount × elapsed just
// below and above 2^53 (the reduced ratio), levels around 2^53 units and up to
// 10^24, periods of 1µs to 87600h, long idle gaps. After every step the
// stored state (the level the script computed) must equal the rule's exactly.
func TestFastPathDifferential(t *testing.T) {
	clock := ledgertest.NewClock()
	s := openTest(t, serverURL(t, "BUDGETD_TEST_REDIS"), WithClock(clock.Now))
	ctx := context.Background()
	svc := ledger.NewService(s)
	shapes := []struct {
		capacity, amount string
		per              time.Duration
	}{
		{"9007.199254", "0.000001", time.Microsecond},                  // a = 10^6: a·dt = 2^53 after ~9·10^9 µs
		{"1000000000000", "1000", time.Second},                         // a/p = 10^9/1: crosses at dt ≈ 9 s; levels ≫ 2^53
		{"1000000000000", "999999999999.999999", 3 * time.Microsecond}, // a has 24 digits: big integers
		{"9007.199255", "9007.199254", ledger.MaxPer},                  // level around 2^53 units
		{"500", "7", 13 * time.Microsecond},                            // a = 7·10^12: crosses at dt ≈ 1287 µs
		{"1000000000000", "0.000007", 87600 * time.Hour},               // tiny leak, huge level
	}
	for i, sh := range shapes {
		t.Run(fmt.Sprintf("%s_%s_per_%s", sh.capacity, sh.amount, sh.per), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(i)+7, 99))
			name := fmt.Sprintf("fp%d", i)
			if _, err := svc.PutLimit(ctx, name, ledger.LimitSpec{Capacity: decimal.RequireFromString(sh.capacity),
				LeakAmount: decimal.RequireFromString(sh.amount), LeakPer: sh.per}); err != nil {
				t.Fatal(err)
			}
			l := bucket.Limit{Capacity: ledger.Amount(decimal.RequireFromString(sh.capacity)), LeakAmount: ledger.Amount(decimal.RequireFromString(sh.amount)), LeakPer: sh.per}
			ra, _ := leakRatio(ledger.Limit{LeakAmount: l.LeakAmount.Decimal(), LeakPer: l.LeakPer})
			edge := int64(1<<53) / max(decimal.RequireFromString(ra).IntPart(), 1) // a·dt = 2^53
			ref := ledger.BucketRef{Limit: name, Key: "k"}
			// Times stay below 2^53 µs (year 2255), as Redis TIME does.
			clock.Set(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
			var st bucket.State
			for step := 0; step < 400; step++ {
				var dt int64
				switch rng.IntN(7) {
				case 0:
					dt = 0
				case 1:
					dt = min(edge-2+rng.Int64N(5), 365*24*3600*1_000_000)
				case 2:
					dt = rng.Int64N(min(sh.per.Microseconds(), 30*24*3600*1_000_000) + 1)
				case 3:
					dt = rng.Int64N(2 * 365 * 24 * 3600 * 1_000_000) // up to two years idle
				default:
					dt = rng.Int64N(2000)
				}
				clock.Advance(time.Duration(max(dt, 0)) * time.Microsecond)
				now := clock.Now()
				where := fmt.Sprintf("step %d dt %dµs", step, dt)
				// Costs that fill the bucket to about its capacity, or less.
				free := l.Capacity.Sub(bucket.LevelAt(l, st, now))
				cost := decimal.New(rng.Int64N(max(free.Decimal().Shift(6).IntPart(), 0)+2), -6)
				if rng.IntN(3) == 0 {
					cost = decimal.New(rng.Int64N(1000), -6)
				}
				cost = decimal.Min(cost, ledger.MaxAmount)
				if rng.IntN(6) == 0 {
					removed, ns := bucket.Drain(l, st, now, ledger.Amount(cost))
					got, err := s.Drain(ctx, ref, cost, ledger.Idempotency{}, nil)
					if err != nil {
						t.Fatalf("%s drain: %v", where, err)
					}
					if !got.Removed.Equal(removed.Decimal()) {
						t.Fatalf("%s drain %s removed %s, want %s", where, cost, got.Removed, removed)
					}
					if cost.Sign() > 0 {
						st = ns
					}
				} else {
					want, ns := bucket.Fillup(l, st, now, ledger.Amount(cost))
					got, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: cost}}, ledger.Idempotency{})
					if err != nil {
						t.Fatalf("%s fillup: %v", where, err)
					}
					if got.Accepted != want.Accepted {
						t.Fatalf("%s fillup %s accepted %v, want %v", where, cost, got.Accepted, want.Accepted)
					}
					if want.Accepted && cost.Sign() > 0 {
						st = ns
					}
				}
				sn, err := s.Inspect(ctx, ref)
				if err != nil {
					t.Fatal(err)
				}
				if !sn.State.Level.Equal(st.Level) || !sn.State.Updated.Equal(st.Updated) {
					t.Fatalf("%s: stored level %s at %s, want %s at %s", where, sn.State.Level, sn.State.Updated, st.Level, st.Updated)
				}
			}
		})
	}
}

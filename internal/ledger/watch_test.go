package ledger_test

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// Watch.Cross answers as Cross for random lists, capacities, uses and
// marks, including uses one unit of the amount scale either side of a
// level, marks of another list or period, and the largest capacities.
func TestWatchAgreesWithCross(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	unit := decimal.New(1, -bucket.LevelScale)
	pick := func(ss ...string) string { return ss[rng.IntN(len(ss))] }
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for n := range 20000 {
		var l ledger.Limit
		seen := map[string]bool{}
		for range 1 + rng.IntN(ledger.MaxThresholds) {
			s := pick("50%", "80%", "33.33%", "200%", "0.01%", "99.99%", "4500", "0.000001", "1000000000000", "7.5")
			if seen[s] {
				continue
			}
			seen[s] = true
			th, err := ledger.ParseThreshold("thresholds", s)
			if err != nil {
				t.Fatal(err)
			}
			l.Thresholds = append(l.Thresholds, th)
		}
		capacity := decimal.RequireFromString(pick("100", "5000", "0.000003", "1234.567891", "1000000000000"))
		w := ledger.NewWatch(l, capacity)
		use := func() decimal.Decimal {
			th := l.Thresholds[rng.IntN(len(l.Thresholds))].Level(capacity).RoundCeil(bucket.LevelScale)
			switch rng.IntN(4) {
			case 0:
				return th.Sub(unit)
			case 1:
				return th
			case 2:
				return th.Add(unit)
			}
			return decimal.NewFromInt(rng.Int64N(10000))
		}
		amount := func(d decimal.Decimal) (bucket.Amount, bool) {
			if d.Sign() < 0 || d.GreaterThan(ledger.MaxLevel) {
				return bucket.Amount{}, false
			}
			return bucket.FromDecimal(d)
		}
		before, after := use(), use()
		ab, ok1 := amount(before)
		aa, ok2 := amount(after)
		if !ok1 || !ok2 {
			continue
		}
		marks := ledger.Marks{Sig: []uint32{0, ledger.ThresholdSig(l.Thresholds), 12345}[rng.IntN(3)], Above: uint8(rng.IntN(256)) & (1<<len(l.Thresholds) - 1)}
		period := []time.Time{{}, start}[rng.IntN(2)]
		if rng.IntN(2) == 0 {
			marks.Period = start.UnixMicro()
		}
		wantM, wantC := ledger.Cross(l, marks, before, after, capacity, period)
		gotM, gotC := w.Cross(marks, ab, aa, period)
		if gotM != wantM || !reflect.DeepEqual(gotC, wantC) {
			t.Fatalf("case %d: thresholds %v capacity %s marks %+v before %s after %s: Watch %+v %v, Cross %+v %v",
				n, l.Thresholds, capacity, marks, before, after, gotM, gotC, wantM, wantC)
		}
	}
}

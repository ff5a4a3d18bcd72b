package ledger

import (
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/shopspring/decimal"
)

// Watch is a limit's thresholds made ready for a write path whose uses are
// fixed-point amounts (the memory store's): the list's signature and each
// threshold's level at one capacity, rounded up to the amount scale. A use
// has at most bucket.LevelScale decimals, so it reaches a level exactly when
// it reaches the level rounded up: Watch.Cross answers as Cross does, but
// does the decimal work once (NewWatch) instead of at every write, and
// compares without allocating.
type Watch struct {
	Capacity decimal.Decimal // the capacity the levels are of
	sig      uint32
	levels   [MaxThresholds]bucket.Amount
	never    uint8 // bit i: level i is beyond every amount, so never reached
	n        int
}

// NewWatch computes the levels of l's thresholds at capacity.
func NewWatch(l Limit, capacity decimal.Decimal) *Watch {
	w := &Watch{Capacity: capacity, sig: ThresholdSig(l.Thresholds), n: len(l.Thresholds)}
	for i, t := range l.Thresholds {
		a, ok := bucket.FromDecimal(t.Level(capacity).RoundCeil(bucket.LevelScale))
		if !ok {
			w.never |= 1 << i
			continue
		}
		w.levels[i] = a
	}
	return w
}

// Cross is Cross for uses given as amounts: marks are the bucket's, before
// and after its use (level + held) before and after the write.
func (w *Watch) Cross(marks Marks, before, after bucket.Amount, periodStart time.Time) (Marks, []Crossing) {
	if w.sig == 0 {
		return Marks{}, nil
	}
	reaches := func(i int, use bucket.Amount) bool {
		return w.never&(1<<i) == 0 && use.GreaterThanOrEqual(w.levels[i])
	}
	return crossMarks(w.sig, w.n, marks, periodStart,
		func(i int) bool { return reaches(i, before) }, func(i int) bool { return reaches(i, after) })
}

// Prepare computes l's Watch at its capacity once, for a store that keeps
// the limit in memory and runs the threshold rule itself at every write.
func (l *Limit) Prepare() {
	l.watch = nil
	if len(l.Thresholds) > 0 {
		l.watch = NewWatch(*l, l.Capacity)
	}
}

// WatchAt returns l's thresholds ready at capacity: what Prepare computed
// when capacity is l's own, a new Watch otherwise.
func (l Limit) WatchAt(capacity decimal.Decimal) *Watch {
	if l.watch != nil && l.watch.Capacity.Equal(capacity) {
		return l.watch
	}
	return NewWatch(l, capacity)
}

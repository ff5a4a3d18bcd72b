// Package bucket is the exact leaky-bucket rule of budgetd and nothing else.
//
// A bucket's level leaks continuously at a rate given as an amount per period.
// Every function here is pure: it takes the limit, the bucket's state and the
// instant "now" and returns a decision and, for writes, a new state. There is no
// clock, no lock and no I/O. This package is the reference that every store
// (memory, PostgreSQL, Redis) must agree with to the last digit; the rounding
// rule is written down in docs/rounding.md.
//
// The rule, in order: leak first (rounded down to LevelScale fractional
// digits), clamp at zero, then add. Time is counted in whole microseconds and a
// clock that moves backwards counts as no time at all.
//
// A limit with a calendar Period follows the periodic variant instead
// (docs/periods.md): the level does not leak; it is the stored level when the
// bucket was last written in the period containing now (or later), and zero
// otherwise. Holds belong to no period.
package bucket

import (
	"math/big"
	"sort"
	"time"

	"github.com/budgetd/budgetd/internal/calendar"
	"github.com/shopspring/decimal"
)

// LevelScale is the number of fractional digits a level carries. The leak over
// a time step is rounded down to this many digits, so levels are exact
// decimals with at most LevelScale fractional digits.
const LevelScale = 12

// Limit is the policy of a bucket: its capacity and either its leak rate,
// given as LeakAmount per LeakPer (a whole number of microseconds), or, when
// Period is not nil, the calendar period at whose start the level returns to
// zero (the leak fields are then unused).
type Limit struct {
	Capacity   decimal.Decimal
	LeakAmount decimal.Decimal
	LeakPer    time.Duration
	Period     *calendar.Period
}

// Hold is an amount reserved in a bucket until ExpiresAt. A hold counts in
// the bucket's use while now < ExpiresAt and does not leak. ID is the store's
// name for the hold; the rule only carries it through, so that a store can
// tell which of its holds a transition kept or expired.
type Hold struct {
	ID        string
	Amount    decimal.Decimal
	ExpiresAt time.Time
}

// State is the stored state of one bucket: its level as of Updated and its
// holds. A zero State is an empty bucket that was never written. Holds that
// have expired by "now" are ignored by every function here.
type State struct {
	Level   decimal.Decimal
	Updated time.Time
	Holds   []Hold
}

// Decision is the answer to "would this cost be accepted now?".
//
// Level, Held, Remaining and Capacity describe the bucket after the call when
// it was accepted and as it is now otherwise. RetryAfter is the wait, in
// seconds with microsecond precision rounded up, until the cost would fit if no
// other traffic arrived; it is zero when the call was accepted or when the cost
// can never fit (NeverFits: cost > capacity).
type Decision struct {
	Accepted   bool
	Level      decimal.Decimal
	Held       decimal.Decimal
	Remaining  decimal.Decimal
	Capacity   decimal.Decimal
	RetryAfter decimal.Decimal
	NeverFits  bool
	// At is the instant the decision was made ("now").
	At time.Time
	// PeriodStart and ResetsAt bound the calendar period that contains now,
	// for a periodic limit; both are zero for a leaky limit.
	PeriodStart time.Time
	ResetsAt    time.Time
}

// micros returns t as whole microseconds since the Unix epoch; the zero time
// counts as "long ago".
func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// Leaked is the amount that leaks from a bucket of limit l over d, rounded
// down to LevelScale digits: floor(LeakAmount × d / LeakPer). A negative d
// leaks nothing.
func Leaked(l Limit, d time.Duration) decimal.Decimal {
	us := d.Microseconds()
	if us <= 0 {
		return decimal.Zero
	}
	q, _ := l.LeakAmount.Mul(decimal.NewFromInt(us)).QuoRem(decimal.NewFromInt(l.LeakPer.Microseconds()), LevelScale)
	return q
}

// LevelAt is the bucket's level at now: the stored level minus what leaked
// since it was written, never below zero. For a periodic limit it is the
// stored level when the bucket was written in the period that contains now
// (or later: a stored time ahead of the clock counts as the current period),
// and zero otherwise.
func LevelAt(l Limit, s State, now time.Time) decimal.Decimal {
	if l.Period != nil {
		start, _ := l.Period.Bounds(now)
		return periodLevel(s, start)
	}
	if s.Level.Sign() <= 0 || s.Updated.IsZero() {
		return decimal.Max(s.Level, decimal.Zero)
	}
	dt := time.Duration(micros(now)-micros(s.Updated)) * time.Microsecond
	lvl := s.Level.Sub(Leaked(l, dt))
	if lvl.Sign() < 0 {
		return decimal.Zero
	}
	return lvl
}

// periodLevel is the level of a periodic bucket in the period that starts
// at start: one comparison, however many periods the bucket sat idle.
func periodLevel(s State, start time.Time) decimal.Decimal {
	if s.Level.Sign() <= 0 || s.Updated.IsZero() || micros(s.Updated) < micros(start) {
		return decimal.Zero
	}
	return s.Level
}

// HeldAt is the sum of the holds that are still active at now.
func HeldAt(s State, now time.Time) decimal.Decimal {
	sum := decimal.Zero
	n := micros(now)
	for _, h := range s.Holds {
		if micros(h.ExpiresAt) > n {
			sum = sum.Add(h.Amount)
		}
	}
	return sum
}

// ActiveHolds returns the holds of s that are still active at now.
func ActiveHolds(s State, now time.Time) []Hold {
	var out []Hold
	n := micros(now)
	for _, h := range s.Holds {
		if micros(h.ExpiresAt) > n {
			out = append(out, h)
		}
	}
	return out
}

// CanAccept answers whether adding cost at now would be accepted, without
// changing anything. A cost of zero is always accepted.
func CanAccept(l Limit, s State, now time.Time, cost decimal.Decimal) Decision {
	var level decimal.Decimal
	var start, end time.Time
	if l.Period != nil {
		start, end = l.Period.Bounds(now)
		level = periodLevel(s, start)
	} else {
		level = LevelAt(l, s, now)
	}
	held := HeldAt(s, now)
	d := Decision{
		Level:       level,
		Held:        held,
		Capacity:    l.Capacity,
		Remaining:   remaining(l.Capacity, level, held),
		NeverFits:   cost.GreaterThan(l.Capacity),
		PeriodStart: start,
		ResetsAt:    end,
		At:          now,
	}
	if cost.Sign() == 0 || level.Add(held).Add(cost).LessThanOrEqual(l.Capacity) {
		d.Accepted = true
		d.NeverFits = false
		return d
	}
	if !d.NeverFits {
		if l.Period != nil {
			d.RetryAfter = periodRetryAfter(l, s, now, level, end, cost)
		} else {
			d.RetryAfter = retryAfter(l, s, now, cost)
		}
	}
	return d
}

// Every transition below that writes (Fillup and Reserve when accepted with a
// positive amount, Drain when it removes something, Resolve, Settle) first
// settles the bucket to now: the level leaks to now, Updated moves to now
// (never backwards) and the holds of Expired(s, now) are dropped, in that
// order. A store records exactly those holds as expired; Settle and Expire
// return them.

// Fillup adds cost to the bucket when it fits and returns the decision and
// the new state. A denied call, or a cost of zero, returns s unchanged.
func Fillup(l Limit, s State, now time.Time, cost decimal.Decimal) (Decision, State) {
	d := CanAccept(l, s, now, cost)
	if !d.Accepted || cost.Sign() == 0 {
		return d, s
	}
	ns := settle(l, s, now)
	ns.Level = ns.Level.Add(cost)
	d.Level = ns.Level
	d.Remaining = remaining(l.Capacity, d.Level, d.Held)
	return d, ns
}

// Reserve adds a hold of amount until expires when it fits, like Fillup, and
// returns the decision and the new state. The level is settled to now. The
// new hold is the last of the new state's Holds, with an empty ID for the
// store to fill in.
func Reserve(l Limit, s State, now time.Time, amount decimal.Decimal, expires time.Time) (Decision, State) {
	d := CanAccept(l, s, now, amount)
	if !d.Accepted {
		return d, s
	}
	ns := settle(l, s, now)
	ns.Holds = append(ns.Holds, Hold{Amount: amount, ExpiresAt: expires})
	d.Held = d.Held.Add(amount)
	d.Remaining = remaining(l.Capacity, d.Level, d.Held)
	return d, ns
}

// Resolve ends the hold at index i of s.Holds and adds charge to the level
// (zero for a release). The level may pass capacity: a commit with overrun is
// the only way that happens. It returns the new state.
func Resolve(l Limit, s State, now time.Time, i int, charge decimal.Decimal) State {
	ns := settle(l, s, now)
	holds := make([]Hold, 0, len(ns.Holds))
	for j, h := range s.Holds {
		if j != i && micros(h.ExpiresAt) > micros(now) {
			holds = append(holds, h)
		}
	}
	ns.Holds = holds
	ns.Level = ns.Level.Add(charge)
	return ns
}

// Drain lowers the level by amount, clamped at zero, and returns what was
// actually removed and the new state. A zero amount, or a bucket whose level
// is zero now, changes nothing.
func Drain(l Limit, s State, now time.Time, amount decimal.Decimal) (decimal.Decimal, State) {
	if amount.Sign() <= 0 || LevelAt(l, s, now).Sign() == 0 {
		return decimal.Zero, s
	}
	ns := settle(l, s, now)
	removed := decimal.Min(amount, ns.Level)
	ns.Level = ns.Level.Sub(removed)
	return removed, ns
}

// Settle returns s with its level leaked to now, Updated moved to now (never
// backwards) and its expired holds dropped, and returns those holds, in the
// order of s.Holds.
func Settle(l Limit, s State, now time.Time) (State, []Hold) {
	return settle(l, s, now), Expired(s, now)
}

// Expire drops the holds of s that have expired by now and returns them, in
// the order of s.Holds; the level and Updated stay as they are. Dropping
// them changes no answer: every function here ignores expired holds.
func Expire(s State, now time.Time) (State, []Hold) {
	expired := Expired(s, now)
	if len(expired) == 0 {
		return s, nil
	}
	s.Holds = ActiveHolds(s, now)
	return s, expired
}

// Expired returns the holds of s that have expired by now (ExpiresAt ≤ now),
// in the order of s.Holds: the holds that a transition writing at now drops.
func Expired(s State, now time.Time) []Hold {
	var out []Hold
	n := micros(now)
	for _, h := range s.Holds {
		if micros(h.ExpiresAt) <= n {
			out = append(out, h)
		}
	}
	return out
}

func settle(l Limit, s State, now time.Time) State {
	ns := State{Level: LevelAt(l, s, now), Updated: s.Updated, Holds: ActiveHolds(s, now)}
	if now.After(ns.Updated) {
		ns.Updated = now.Truncate(time.Microsecond)
	}
	return ns
}

func remaining(capacity, level, held decimal.Decimal) decimal.Decimal {
	r := capacity.Sub(level).Sub(held)
	if r.Sign() < 0 {
		return decimal.Zero
	}
	return r
}

// retryAfter is the earliest wait, in seconds rounded up to the microsecond,
// after which level + held + cost ≤ capacity holds with no other traffic. The
// held amount falls as holds expire, so the wait is searched segment by
// segment between expiries. It assumes cost ≤ capacity.
//
// The leak is measured from the state's last write, exactly as LevelAt will
// measure it then, so the answer is never early and never late.
func retryAfter(l Limit, s State, now time.Time, cost decimal.Decimal) decimal.Decimal {
	n := micros(now)
	elapsed := decimal.NewFromInt(n - micros(s.Updated))
	holds := ActiveHolds(s, now)
	sort.Slice(holds, func(i, j int) bool { return holds[i].ExpiresAt.Before(holds[j].ExpiresAt) })
	held := decimal.Zero
	for _, h := range holds {
		held = held.Add(h.Amount)
	}
	var start int64
	for i := 0; ; {
		// Segment [start, end): holds[i:] are active; the last one is unbounded.
		last := i == len(holds)
		var end int64
		if !last {
			end = micros(holds[i].ExpiresAt) - n
		}
		target := l.Capacity.Sub(cost).Sub(held)
		if target.Sign() >= 0 {
			wait := decimal.NewFromInt(start)
			if need := s.Level.Sub(target); need.Sign() > 0 {
				wait = decimal.Max(wait, leakTime(l, need).Sub(elapsed))
			}
			if last || wait.LessThan(decimal.NewFromInt(end)) {
				return wait.Shift(-6)
			}
		}
		if last {
			// Unreachable while cost ≤ capacity: the last segment has no holds.
			return decimal.Zero
		}
		start = end
		for i < len(holds) && micros(holds[i].ExpiresAt)-n == start {
			held = held.Sub(holds[i].Amount)
			i++
		}
	}
}

// periodRetryAfter is retryAfter for a periodic limit whose level at now is
// level and whose period ends at end: the first of the hold expiries and the
// period's end (each ≥ now) at which level(t) + held(t) + cost ≤ capacity,
// where level(t) is level before end and zero from end on. It assumes
// cost ≤ capacity, so the latest of those instants always fits.
func periodRetryAfter(l Limit, s State, now time.Time, level decimal.Decimal, end time.Time, cost decimal.Decimal) decimal.Decimal {
	n, e := micros(now), max(micros(end), micros(now))
	if level.Sign() > 0 && micros(s.Updated) >= e {
		// Written ahead of the clock, in a later period: the level stays until
		// that period ends, so waiting for this one's end would be early.
		_, later := l.Period.Bounds(s.Updated)
		e = micros(later)
	}
	holds := ActiveHolds(s, now)
	sort.Slice(holds, func(i, j int) bool { return holds[i].ExpiresAt.Before(holds[j].ExpiresAt) })
	held := HeldAt(s, now)
	at := make([]int64, 0, len(holds)+1)
	for _, h := range holds {
		at = append(at, micros(h.ExpiresAt))
	}
	at = append(at, e)
	sort.Slice(at, func(i, j int) bool { return at[i] < at[j] })
	i := 0
	for _, t := range at {
		for i < len(holds) && micros(holds[i].ExpiresAt) <= t {
			held = held.Sub(holds[i].Amount)
			i++
		}
		lvl := level
		if t >= e {
			lvl = decimal.Zero
		}
		if lvl.Add(held).Add(cost).LessThanOrEqual(l.Capacity) {
			return decimal.NewFromInt(t - n).Shift(-6)
		}
	}
	return decimal.NewFromInt(at[len(at)-1] - n).Shift(-6) // unreachable while cost ≤ capacity
}

// leakTime is the least whole number of microseconds d with Leaked(l, d) ≥
// need, for need > 0 with at most LevelScale digits: ceil(need × per / amount).
// It may exceed int64 for tiny rates, so it is returned as a decimal.
func leakTime(l Limit, need decimal.Decimal) decimal.Decimal {
	// Integers scaled by 10^LevelScale make the division exact.
	num := need.Shift(LevelScale).BigInt()
	num.Mul(num, big.NewInt(l.LeakPer.Microseconds()))
	den := l.LeakAmount.Shift(LevelScale).BigInt()
	q, r := new(big.Int).QuoRem(num, den, new(big.Int))
	if r.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return decimal.NewFromBigInt(q, 0)
}

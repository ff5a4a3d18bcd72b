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
//
// A limit with a rolling Window follows the window variant (window.go,
// docs/windows.md): every charge counts for the window's length, summed in
// slots, and the level is the sum of the charges that still count.
package bucket

import (
	"slices"
	"time"

	"github.com/budgetd/budgetd/internal/calendar"
)

// LevelScale is the number of fractional digits a level carries. The leak over
// a time step is rounded down to this many digits, so levels are exact
// decimals with at most LevelScale fractional digits.
const LevelScale = 12

// Limit is the policy of a bucket: its capacity and either its leak rate,
// given as LeakAmount per LeakPer (a whole number of microseconds), or, when
// Period is not nil, the calendar period at whose start the level returns to
// zero (the leak fields are then unused), or, when Window is not nil, the
// rolling window in which every charge counts (the leak fields are unused).
type Limit struct {
	Capacity   Amount
	LeakAmount Amount
	LeakPer    time.Duration
	Period     *calendar.Period
	Window     *Window
	// Mode is what the limit does with a cost that does not fit its
	// capacity; Ceiling is, for Shadow and Soft, the most level + held may
	// reach by an accepted charge (unused for Enforce, where it is the
	// capacity).
	Mode    Mode
	Ceiling Amount
}

// Mode is what a limit does with a cost that does not fit its capacity.
type Mode uint8

// The modes. Enforce denies such a cost. Shadow decides as Enforce would but
// accepts and charges the cost anyway (up to its Ceiling, the largest level a
// store keeps), marking the decision ShadowDenied. Soft accepts while level +
// held stays within its Ceiling (capacity × (1 + grace)) and marks an
// accepted charge that ends above capacity OverCapacity.
const (
	Enforce Mode = iota
	Shadow
	Soft
)

// admit is the most level + held may reach by an accepted charge.
func (l *Limit) admit() Amount {
	if l.Mode == Enforce {
		return l.Capacity
	}
	return l.Ceiling
}

// Hold is an amount reserved in a bucket until ExpiresAt. A hold counts in
// the bucket's use while now < ExpiresAt and does not leak. ID is the store's
// name for the hold; the rule only carries it through, so that a store can
// tell which of its holds a transition kept or expired.
type Hold struct {
	ID        string
	Amount    Amount
	ExpiresAt time.Time
}

// State is the stored state of one bucket: its level as of Updated and its
// holds. A zero State is an empty bucket that was never written. Holds that
// have expired by "now" are ignored by every function here.
//
// A window bucket also keeps its Slots (window.go); Level is then their sum
// at Updated.
type State struct {
	Level   Amount
	Updated time.Time
	Holds   []Hold
	Slots   []Slot
}

// Decision is the answer to "would this cost be accepted now?".
//
// Level, Held, Remaining and Capacity describe the bucket after the call when
// it was accepted and as it is now otherwise. RetryAfter is the wait, in
// whole microseconds rounded up, until the cost would fit if no other traffic
// arrived; it is zero when the call was accepted or when the cost can never
// fit (NeverFits: cost > capacity).
type Decision struct {
	Accepted   bool
	Level      Amount
	Held       Amount
	Remaining  Amount
	Capacity   Amount
	RetryAfter Micros
	NeverFits  bool
	// At is the instant the decision was made ("now").
	At time.Time
	// PeriodStart and ResetsAt bound the calendar period that contains now,
	// for a periodic limit; both are zero for a leaky limit.
	PeriodStart time.Time
	ResetsAt    time.Time
	// ShadowDenied marks an accepted positive cost that Enforce would have
	// denied, on a Shadow limit; OverCapacity marks an accepted positive
	// cost that ends above capacity, on a Soft limit. For CanAccept they
	// say what a charge of the cost would be marked.
	ShadowDenied bool
	OverCapacity bool
	// ClearsAt is, for a window limit, the instant from which none of the
	// bucket's charges counts any more (At when none counts); zero for the
	// other kinds.
	ClearsAt time.Time
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
// leaks nothing. A leak too large for an Amount (far above any level: 10^12
// per microsecond for a century) saturates at the largest Amount.
func Leaked(l Limit, d time.Duration) Amount {
	us := d.Microseconds()
	if us <= 0 {
		return Amount{}
	}
	return Amount{leakOver(l, us)}
}

// leakOver is the leak over us > 0 microseconds, in units.
func leakOver(l Limit, us int64) int128 {
	return mulDiv(l.LeakAmount.v, uint64(us), uint64(l.LeakPer.Microseconds()))
}

// LevelAt is the bucket's level at now: the stored level minus what leaked
// since it was written, never below zero. For a periodic limit it is the
// stored level when the bucket was written in the period that contains now
// (or later: a stored time ahead of the clock counts as the current period),
// and zero otherwise.
func LevelAt(l Limit, s State, now time.Time) Amount {
	if l.Window != nil {
		return windowLevel(l.Window, &s, micros(now))
	}
	if l.Period != nil {
		start, _ := l.Period.Bounds(now)
		return periodLevel(s, start)
	}
	return leakyLevelAt(l, s, micros(now))
}

// leakyLevelAt is LevelAt of a leaky limit at n microseconds since the epoch.
func leakyLevelAt(l Limit, s State, n int64) Amount {
	if s.Level.Sign() <= 0 || s.Updated.IsZero() {
		return MaxAmount(s.Level, Amount{})
	}
	us := n - micros(s.Updated)
	if us <= 0 {
		return s.Level
	}
	leaked := leakOver(l, us)
	if leaked.cmp(s.Level.v) >= 0 {
		return Amount{}
	}
	return Amount{s.Level.v.sub(leaked)}
}

// periodLevel is the level of a periodic bucket in the period that starts
// at start: one comparison, however many periods the bucket sat idle.
func periodLevel(s State, start time.Time) Amount {
	if s.Level.Sign() <= 0 || s.Updated.IsZero() || micros(s.Updated) < micros(start) {
		return Amount{}
	}
	return s.Level
}

// HeldAt is the sum of the holds that are still active at now.
func HeldAt(s State, now time.Time) Amount { return heldAt(s, micros(now)) }

// heldAt is HeldAt at n microseconds since the epoch.
func heldAt(s State, n int64) Amount {
	var sum Amount
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
func CanAccept(l Limit, s State, now time.Time, cost Amount) (d Decision) {
	decide(&l, &s, now, cost, &d)
	return d
}

// decide is CanAccept writing into *d (the transitions call it on their own
// result, so that the decision is built once, in place).
func decide(l *Limit, s *State, now time.Time, cost Amount, d *Decision) {
	var end time.Time
	n := micros(now)
	if l.Window != nil {
		d.Level = windowLevel(l.Window, s, n)
		d.ClearsAt = WindowEnd(*l, *s, now)
	} else if l.Period != nil {
		d.PeriodStart, end = l.Period.Bounds(now)
		d.ResetsAt = end
		d.Level = periodLevel(*s, d.PeriodStart)
	} else {
		d.Level = leakyLevelAt(*l, *s, n)
	}
	if len(s.Holds) > 0 {
		d.Held = heldAt(*s, n)
	}
	d.Capacity = l.Capacity
	d.Remaining = remaining(l.Capacity, d.Level, d.Held)
	d.At = now
	if cost.IsZero() {
		d.Accepted = true
		return
	}
	used := d.Level.Add(d.Held).Add(cost)
	if used.Cmp(l.Capacity) <= 0 {
		d.Accepted = true
		return
	}
	if used.Cmp(l.admit()) <= 0 {
		d.Accepted = true
		d.markOver(l.Mode)
		return
	}
	d.NeverFits = cost.GreaterThan(l.admit())
	if !d.NeverFits {
		if l.Window != nil {
			d.RetryAfter = windowRetryAfter(l, s, n, cost)
		} else if l.Period != nil {
			d.RetryAfter = periodRetryAfter(*l, *s, now, d.Level, end, cost)
		} else {
			d.RetryAfter = retryAfter(*l, *s, now, cost)
		}
	}
}

// markOver marks d, an accepted positive cost that ends above capacity, as
// mode marks it.
func (d *Decision) markOver(mode Mode) {
	d.ShadowDenied = mode == Shadow
	d.OverCapacity = mode == Soft
}

// Charged is the decision of an accepted Fillup or Reserve of cost as seen
// from the state s after it (what CanAccept answers with a zero cost there),
// marked as l's mode marks a positive cost that ended above capacity: the
// answer a store's snapshot of the charge gives.
func Charged(l Limit, s State, now time.Time, cost Amount) Decision {
	var d Decision
	decide(&l, &s, now, Amount{}, &d)
	if cost.Sign() > 0 && d.Level.Add(d.Held).Cmp(l.Capacity) > 0 {
		d.markOver(l.Mode)
	}
	return d
}

// Every transition below that writes (Fillup and Reserve when accepted with a
// positive amount, Drain when it removes something, Resolve, Settle) first
// settles the bucket to now: the level leaks to now, Updated moves to now
// (never backwards) and the holds of Expired(s, now) are dropped, in that
// order. A store records exactly those holds as expired; Settle and Expire
// return them. The level at now is computed once per call.

// Fillup adds cost to the bucket when it fits and returns the decision and
// the new state. A denied call, or a cost of zero, returns s unchanged.
func Fillup(l Limit, s State, now time.Time, cost Amount) (d Decision, ns State) {
	decide(&l, &s, now, cost, &d)
	if !d.Accepted || cost.IsZero() {
		return d, s
	}
	ns = settled(&l, s, now, d.Level)
	ns.Level = ns.Level.Add(cost)
	if l.Window != nil {
		ns.Slots = chargeSlot(l.Window, ns.Slots, s.Updated, micros(now), cost)
		d.ClearsAt = time.UnixMicro(l.Window.expiry(ns.Slots[len(ns.Slots)-1].Index)).UTC()
	}
	d.Level = ns.Level
	d.Remaining = remaining(l.Capacity, d.Level, d.Held)
	return d, ns
}

// Reserve adds a hold of amount until expires when it fits, like Fillup, and
// returns the decision and the new state. The level is settled to now. The
// new hold is the last of the new state's Holds, with an empty ID for the
// store to fill in.
func Reserve(l Limit, s State, now time.Time, amount Amount, expires time.Time) (d Decision, ns State) {
	decide(&l, &s, now, amount, &d)
	if !d.Accepted {
		return d, s
	}
	ns = settled(&l, s, now, d.Level)
	ns.Holds = append(ns.Holds, Hold{Amount: amount, ExpiresAt: expires})
	d.Held = d.Held.Add(amount)
	d.Remaining = remaining(l.Capacity, d.Level, d.Held)
	return d, ns
}

// Resolve ends the hold at index i of s.Holds and adds charge to the level
// (zero for a release). The level may pass capacity: a commit with overrun is
// the only way that happens. It returns the new state.
func Resolve(l Limit, s State, now time.Time, i int, charge Amount) State {
	ns := settle(l, s, now)
	holds := make([]Hold, 0, len(ns.Holds))
	for j, h := range s.Holds {
		if j != i && micros(h.ExpiresAt) > micros(now) {
			holds = append(holds, h)
		}
	}
	ns.Holds = holds
	ns.Level = ns.Level.Add(charge)
	if l.Window != nil {
		ns.Slots = chargeSlot(l.Window, ns.Slots, s.Updated, micros(now), charge)
	}
	return ns
}

// Charge settles s to now and adds amount to it without a check: what an
// accepted Fillup or a commit did, for a replay of a bucket's history.
func Charge(l Limit, s State, now time.Time, amount Amount) State {
	ns := settle(l, s, now)
	ns.Level = ns.Level.Add(amount)
	if l.Window != nil {
		ns.Slots = chargeSlot(l.Window, ns.Slots, s.Updated, micros(now), amount)
	}
	return ns
}

// Drain lowers the level by amount, clamped at zero, and returns what was
// actually removed and the new state. A zero amount, or a bucket whose level
// is zero now, changes nothing.
func Drain(l Limit, s State, now time.Time, amount Amount) (Amount, State) {
	if amount.Sign() <= 0 {
		return Amount{}, s
	}
	level := LevelAt(l, s, now)
	if level.IsZero() {
		return Amount{}, s
	}
	ns := settled(&l, s, now, level)
	removed := MinAmount(amount, ns.Level)
	ns.Level = ns.Level.Sub(removed)
	if l.Window != nil {
		// A refund undoes the most recent spend: newest charges first.
		ns.Slots = drainSlots(ns.Slots, removed)
	}
	return removed, ns
}

// Settle returns s with its level leaked to now, Updated moved to now (never
// backwards) and its expired holds dropped, and returns those holds, in the
// order of s.Holds.
func Settle(l Limit, s State, now time.Time) (State, []Hold) {
	return settle(l, s, now), Expired(s, now)
}

// Switch settles s to now under the limit old, the rule in force until now,
// and returns it in the form every rule reads as the same level written at
// now: a leaky bucket's level at its last write, a periodic bucket's level
// in the current period, a window's single charge made now. A store calls it
// for each bucket when a PUT changes the rule (SameRule is false), and
// records the holds it returns as expired.
func Switch(old Limit, s State, now time.Time) (State, []Hold) {
	ns, expired := Settle(old, s, now)
	ns.Slots = nil
	return ns, expired
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
	return settled(&l, s, now, LevelAt(l, s, now))
}

// settled is s settled to now, given its level at now. A window bucket
// keeps the slots that still count (in a new slice).
func settled(l *Limit, s State, now time.Time, level Amount) State {
	ns := State{Level: level, Updated: s.Updated, Holds: ActiveHolds(s, now)}
	if l.Window != nil {
		ns.Slots = settledSlots(l.Window, &s, micros(now))
	}
	if now.After(ns.Updated) {
		ns.Updated = now.Round(0) // no monotonic reading, as Truncate
		if now.Nanosecond()%1000 != 0 {
			ns.Updated = now.Truncate(time.Microsecond)
		}
	}
	return ns
}

func remaining(capacity, level, held Amount) Amount {
	r := capacity.Sub(level).Sub(held)
	if r.Sign() < 0 {
		return Amount{}
	}
	return r
}

// byExpiry orders holds by ExpiresAt.
func byExpiry(a, b Hold) int { return a.ExpiresAt.Compare(b.ExpiresAt) }

// retryAfter is the earliest wait, in microseconds rounded up, after which
// level + held + cost ≤ capacity (the mode's ceiling, for Shadow and Soft)
// holds with no other traffic. The held amount falls as holds expire, so the
// wait is searched segment by segment between expiries. It assumes cost fits
// that bound.
//
// The leak is measured from the state's last write, exactly as LevelAt will
// measure it then, so the answer is never early and never late.
func retryAfter(l Limit, s State, now time.Time, cost Amount) Micros {
	n := micros(now)
	elapsed := i128(n - micros(s.Updated))
	holds := ActiveHolds(s, now)
	slices.SortStableFunc(holds, byExpiry)
	var held Amount
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
		target := l.admit().Sub(cost).Sub(held)
		if target.Sign() >= 0 {
			wait := i128(start)
			if need := s.Level.Sub(target); need.Sign() > 0 {
				if w := leakTime(l, need).sub(elapsed); w.cmp(wait) > 0 {
					wait = w
				}
			}
			if last || wait.cmp(i128(end)) < 0 {
				return Micros{wait}
			}
		}
		if last {
			// Unreachable while cost ≤ capacity: the last segment has no holds.
			return Micros{}
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
func periodRetryAfter(l Limit, s State, now time.Time, level Amount, end time.Time, cost Amount) Micros {
	n, e := micros(now), max(micros(end), micros(now))
	if level.Sign() > 0 && micros(s.Updated) >= e {
		// Written ahead of the clock, in a later period: the level stays until
		// that period ends, so waiting for this one's end would be early.
		_, later := l.Period.Bounds(s.Updated)
		e = micros(later)
	}
	holds := ActiveHolds(s, now)
	slices.SortStableFunc(holds, byExpiry)
	held := HeldAt(s, now)
	at := make([]int64, 0, len(holds)+1)
	for _, h := range holds {
		at = append(at, micros(h.ExpiresAt))
	}
	at = append(at, e)
	slices.Sort(at)
	i := 0
	for _, t := range at {
		for i < len(holds) && micros(holds[i].ExpiresAt) <= t {
			held = held.Sub(holds[i].Amount)
			i++
		}
		lvl := level
		if t >= e {
			lvl = Amount{}
		}
		if lvl.Add(held).Add(cost).Cmp(l.admit()) <= 0 {
			return MicrosOf(t - n)
		}
	}
	return MicrosOf(at[len(at)-1] - n) // unreachable while cost ≤ capacity
}

// LeakTime is the least whole number of microseconds in which amount leaks
// from a bucket of the leaky limit l (zero for amount ≤ 0 or a limit that
// does not leak): how long a full bucket, or a level, takes to empty.
func LeakTime(l Limit, amount Amount) Micros {
	if amount.Sign() <= 0 || l.LeakAmount.Sign() <= 0 || l.Period != nil || l.Window != nil {
		return Micros{}
	}
	return Micros{leakTime(l, amount)}
}

// leakTime is the least whole number of microseconds d with Leaked(l, d) ≥
// need, for need > 0: ceil(need × per / amount), exact in 192 bits. It may
// exceed int64 for tiny rates, hence 128 bits; it saturates at the largest
// int128 only past any wait a supported limit can ask for.
func leakTime(l Limit, need Amount) int128 {
	return mulDivCeil(need.v, uint64(l.LeakPer.Microseconds()), l.LeakAmount.v)
}

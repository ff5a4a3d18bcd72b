package bucket

import (
	"slices"
	"time"
)

// Window is a rolling window (docs/windows.md): every charge accepted counts
// from the moment it is accepted until Length after the end of its slot.
// Slots are Precision long and cut from the Unix epoch; Precision divides
// Length. Both are whole microseconds.
//
// The guarantee: in every span of Length, the charges accepted in it sum to
// at most the capacity. A charge accepted at t counts at every instant of
// [t, t+Length), so when the last charge of a span is accepted every earlier
// charge of that span still counts in the level it is checked against.
type Window struct {
	Length    time.Duration
	Precision time.Duration
}

// Slots is the number of slots in a window's length.
func (w Window) Slots() int64 { return int64(w.Length / w.Precision) }

// Slot is the sum of the charges made in one slot of a window: the slot
// [Index × Precision, (Index+1) × Precision) in microseconds since the epoch.
type Slot struct {
	Index int64
	Sum   Amount
}

// A window bucket's State keeps its counting slots in Slots, oldest first,
// and Level as their sum at Updated. A state with no slots and a positive
// Level (a bucket settled under another rule, by a PUT that changed the
// limit) reads as one charge of Level made at Updated. Every window
// transition writes at most Length/Precision + 1 slots: those that still
// count at the later of now and Updated.

// windowNow is the instant, in microseconds, at which a window bucket is
// read: now, or the bucket's last write when the clock is behind it (a clock
// that steps back ages nothing out).
func windowNow(s *State, n int64) int64 { return max(n, micros(s.Updated)) }

// slotOf is the index of the slot that contains n.
func (w *Window) slotOf(n int64) int64 { return n / w.Precision.Microseconds() }

// expiry is the instant, in microseconds, from which the charges of slot i
// no longer count: Length after the end of the slot.
func (w *Window) expiry(i int64) int64 {
	return (i+1)*w.Precision.Microseconds() + w.Length.Microseconds()
}

// windowSlots returns the slots of s as the rule reads them: its Slots, or
// the single charge of a state settled under another rule.
func windowSlots(w *Window, s *State) []Slot {
	if len(s.Slots) > 0 || s.Level.Sign() <= 0 || s.Updated.IsZero() {
		return s.Slots
	}
	return []Slot{{Index: w.slotOf(micros(s.Updated)), Sum: s.Level}}
}

// windowLevel is the sum of the charges of s that still count at n.
func windowLevel(w *Window, s *State, n int64) Amount {
	ne := windowNow(s, n)
	var sum Amount
	for _, sl := range windowSlots(w, s) {
		if w.expiry(sl.Index) > ne {
			sum = sum.Add(sl.Sum)
		}
	}
	return sum
}

// settledSlots returns a new slice of the slots of s that still count at n
// (none of zero sum), oldest first.
func settledSlots(w *Window, s *State, n int64) []Slot {
	ne := windowNow(s, n)
	all := windowSlots(w, s)
	out := make([]Slot, 0, len(all)+1)
	for _, sl := range all {
		if w.expiry(sl.Index) > ne && sl.Sum.Sign() > 0 {
			out = append(out, sl)
		}
	}
	return out
}

// chargeSlot adds amount to the slot of the later of n and the bucket's last
// write in slots (settled, oldest first) and returns them. The slot is never
// older than the newest one kept, so a clock that stepped back charges the
// newest slot, which counts the longest.
func chargeSlot(w *Window, slots []Slot, updated time.Time, n int64, amount Amount) []Slot {
	if amount.Sign() <= 0 {
		return slots
	}
	i := w.slotOf(max(n, micros(updated)))
	if k := len(slots); k > 0 && slots[k-1].Index >= i {
		slots[k-1].Sum = slots[k-1].Sum.Add(amount)
		return slots
	}
	return append(slots, Slot{Index: i, Sum: amount})
}

// drainSlots removes amount from the newest slots first and returns the
// slots left (none of zero sum).
func drainSlots(slots []Slot, amount Amount) []Slot {
	for k := len(slots) - 1; k >= 0 && amount.Sign() > 0; k-- {
		take := MinAmount(amount, slots[k].Sum)
		slots[k].Sum = slots[k].Sum.Sub(take)
		amount = amount.Sub(take)
	}
	return slices.DeleteFunc(slots, func(sl Slot) bool { return sl.Sum.Sign() <= 0 })
}

// sumSlots is the sum of slots.
func sumSlots(slots []Slot) Amount {
	var sum Amount
	for _, sl := range slots {
		sum = sum.Add(sl.Sum)
	}
	return sum
}

// windowRetryAfter is the earliest wait, in microseconds, after which
// level(t) + held(t) + cost ≤ capacity with no other traffic: the level falls
// as slots age out and the held amount as holds expire, so the answer is one
// of those instants. It assumes cost ≤ capacity, which the latest of them
// always satisfies.
func windowRetryAfter(l *Limit, s *State, n int64, cost Amount) Micros {
	w := l.Window
	ne := windowNow(s, n)
	var slots []Slot
	var level Amount
	for _, sl := range windowSlots(w, s) {
		if w.expiry(sl.Index) > ne {
			slots = append(slots, sl)
			level = level.Add(sl.Sum)
		}
	}
	holds := ActiveHolds(*s, time.UnixMicro(n))
	slices.SortStableFunc(holds, byExpiry)
	held := heldAt(*s, n)
	i, j := 0, 0
	for i < len(slots) || j < len(holds) {
		// The next instant at which something stops counting.
		t := int64(-1)
		if i < len(slots) {
			t = w.expiry(slots[i].Index)
		}
		if j < len(holds) && (t < 0 || micros(holds[j].ExpiresAt) < t) {
			t = micros(holds[j].ExpiresAt)
		}
		for i < len(slots) && w.expiry(slots[i].Index) <= t {
			level = level.Sub(slots[i].Sum)
			i++
		}
		for j < len(holds) && micros(holds[j].ExpiresAt) <= t {
			held = held.Sub(holds[j].Amount)
			j++
		}
		if level.Add(held).Add(cost).Cmp(l.admit()) <= 0 {
			return MicrosOf(t - n)
		}
	}
	return Micros{} // unreachable while cost ≤ capacity
}

// WindowEnd is the instant from which none of the charges of a window
// bucket counts any more (at or before now when none counts); the zero time
// for a limit that is not a window.
func WindowEnd(l Limit, s State, now time.Time) time.Time {
	if l.Window == nil {
		return time.Time{}
	}
	ne := windowNow(&s, micros(now))
	end := ne
	for _, sl := range windowSlots(l.Window, &s) {
		if e := l.Window.expiry(sl.Index); e > end {
			end = e
		}
	}
	if end == ne {
		return now
	}
	return time.UnixMicro(end).UTC()
}

// SlotEnds returns, oldest first, the instants at which the charges of a
// window bucket stop counting, one per slot that counts at its last write
// (nil for a limit that is not a window): where its level drops.
func SlotEnds(l Limit, s State) []time.Time {
	if l.Window == nil {
		return nil
	}
	ne := micros(s.Updated)
	var out []time.Time
	for _, sl := range windowSlots(l.Window, &s) {
		if e := l.Window.expiry(sl.Index); e > ne && sl.Sum.Sign() > 0 {
			out = append(out, time.UnixMicro(e).UTC())
		}
	}
	return out
}

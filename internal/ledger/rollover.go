package ledger

import (
	"fmt"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/shopspring/decimal"
)

// Rollover is a periodic limit's rollover (SPEC "Terms per customer"): the
// capacity a bucket left unused at the end of a period is carried into the
// next period only, at most Max.
type Rollover struct {
	Max decimal.Decimal
}

// Carry is what a store keeps with a bucket of a limit with rollover, once
// the bucket is written in a period: Unused, the capacity it left unused at
// the end of the period before (uncapped by Rollover.Max, at least zero, at
// most AmountScale fractional digits), received in the period that starts
// at Period (Unix microseconds). The zero Carry carries nothing.
type Carry struct {
	Unused bucket.Amount
	Period int64
}

// RolloverStore is a Store that serves rollover: it decides every call on
// a bucket of a limit with rollover with the rollover the bucket receives
// added to its capacity (CarryAt, Limit.WithRollover), keeps each bucket's
// Carry with its state from its first write in a period on, and does not
// prune a bucket that may still pass rollover on. A store that is not one
// refuses a limit with rollover (ErrNotServed).
type RolloverStore interface {
	Store
	// ServesRollover marks the store as a RolloverStore.
	ServesRollover()
}

// CarryAt is the rule of rollover, the same for every store: the Carry of
// a bucket in the period that contains now. l is the bucket's terms at now
// (the limit with its override applied), s its stored state and stored the
// Carry the store kept with it; capacityAt(end) returns the capacity in
// force at the end of the period that ends at end (the override's or the
// limit's, without grants or rollover), and is called only when the
// bucket's last write lies in an earlier period.
//
//   - A bucket never written, or a limit without rollover, carries nothing.
//   - A bucket written in the current period (or, after a clock step back,
//     in a later one) carries what was stored for this period: its level at
//     the end of the period before is gone. A Carry kept for another period
//     (a PUT that changed the period rule settled the bucket) is none.
//   - A bucket last written in the period before carries that period's
//     capacity minus its level there, at least zero.
//   - A bucket last written earlier charged nothing in the period before,
//     which carries its whole capacity.
//
// Unused is rounded down to AmountScale fractional digits (a level may have
// more, after a PUT that switched a leaky limit to a periodic one), so
// that an effective capacity stays an amount.
func CarryAt(l Limit, s bucket.State, stored Carry, now time.Time, capacityAt func(end time.Time) decimal.Decimal) Carry {
	if l.Period == nil || l.Rollover == nil || s.Updated.IsZero() {
		return Carry{}
	}
	cp := l.Period.stored()
	start, _ := cp.Bounds(now)
	c := Carry{Period: start.UnixMicro()}
	written := s.Updated.UnixMicro()
	if written >= c.Period {
		if stored.Period == c.Period {
			return stored
		}
		return c
	}
	capacity := capacityAt(start)
	prev, _ := cp.Bounds(start.Add(-time.Microsecond))
	unused := capacity
	if written >= prev.UnixMicro() {
		unused = capacity.Sub(s.Level.Decimal())
	}
	if unused.Sign() <= 0 {
		return c
	}
	c.Unused = Amount(unused.Truncate(AmountScale))
	return c
}

// WithRollover returns l, a bucket's effective limit, with the rollover it
// receives by c added to its capacity (at most Rollover.Max) and recorded
// in Received, and c in Carry for the store to keep at its write. A limit
// without rollover is returned as it is.
func (l Limit) WithRollover(c Carry) Limit {
	if l.Rollover == nil || l.Period == nil {
		return l
	}
	l.Carry = c
	r := bucket.MinAmount(c.Unused, Amount(l.Rollover.Max))
	if r.Sign() > 0 {
		l.Received = r.Decimal()
		l.Capacity = l.Capacity.Add(l.Received)
	}
	return l
}

// PassesOn reports whether a bucket of l (its effective terms) written at
// updated may still pass rollover on, so that a store must not prune it: a
// bucket that was written carries into each next period, even an untouched
// one, while its limit has rollover above zero.
func (l Limit) PassesOn(updated time.Time) bool {
	return l.Period != nil && l.Rollover != nil && l.Rollover.Max.Sign() > 0 && !updated.IsZero()
}

// validateRollover checks a limit's rollover: only on a periodic limit, its
// max a non-negative amount. Errors name rollover or rollover.max.
func validateRollover(r *Rollover, periodic bool) error {
	if r == nil {
		return nil
	}
	if !periodic {
		return invalid(CodeInvalidRequest, "rollover", "rollover is only for a periodic limit")
	}
	return checkAmount("rollover.max", r.Max, false)
}

// ServesRollover reports whether st is or wraps (through Unwrap methods) a
// RolloverStore.
func ServesRollover(st Store) bool {
	_, ok := As[RolloverStore](st)
	return ok
}

// servesRollover returns an error wrapping ErrNotServed unless the store
// serves rollover.
func (s *Service) servesRollover() error {
	if !ServesRollover(s.store) {
		return fmt.Errorf("rollover: %w", ErrNotServed)
	}
	return nil
}

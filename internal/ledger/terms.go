package ledger

import (
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/shopspring/decimal"
)

// TermsInput is everything a bucket's terms are computed from (TermsAt):
// what a store keeps, read at one instant. It holds no store types: a store
// fills it from its own rows or records.
type TermsInput struct {
	// Limit is the limit as stored: its own capacity, rule, mode,
	// thresholds and rollover, and UpdatedAt, its revision.
	Limit Limit
	// Key is the bucket's key.
	Key string
	// Overrides resolves the limit's overrides for Key at any instant (the
	// store's index of them); nil for a limit without overrides.
	Overrides Resolver
	// State is the bucket's state as stored; its zero Updated is a bucket
	// never written (or not looked up).
	State bucket.State
	// Carry is what the store keeps with the bucket for rollover.
	Carry Carry
	// Grants are the bucket's grants; expired ones may be among them and
	// count for nothing.
	Grants []Grant
	// Now is the instant of the call, from the store's clock.
	Now time.Time
}

// Terms is what the bucket rule is for one bucket at one instant (SPEC
// "Terms per customer"), and the span in which it holds.
type Terms struct {
	// Limit is the effective limit: the override that resolves applied
	// (Override.Apply, Limit.Override naming it), the rollover received
	// added to its capacity (Limit.Received, Limit.Carry) and the active
	// grants added too (Limit.Grants). Limit.Rule() is the bucket rule to
	// decide with; Limit.Ceiling() the mode's ceiling.
	Limit Limit
	// State is the bucket's state settled through the ends of temporary
	// rule changes since its last write (SettleExpiries); Settled reports
	// that the settling changed it, and Expired are the holds it expired
	// there, which the store records as expired. A store writes State at
	// the bucket's next write, as a decision's starting state.
	State   bucket.State
	Settled bool
	Expired []bucket.Hold
	// Revision is the stored limit's revision (its UpdatedAt) and
	// OverrideVersion the applied override's (its UpdatedAt, zero for
	// none): a store that resolves terms outside its own atomic step checks
	// them there.
	Revision        time.Time
	OverrideVersion time.Time
	// ValidUntil is the first instant after Now at which the terms change
	// by themselves (the applied override or an active grant expires, or,
	// with rollover, the period ends and another carry is received); zero
	// when they never do. At every instant in [Now, ValidUntil) TermsAt of
	// the same input gives the same terms.
	ValidUntil time.Time
}

// Overridden reports whether an override applied: the pattern of it is
// Limit.Override, its revision OverrideVersion.
func (t *Terms) Overridden() bool { return t.Limit.Override != "" }

// Watch is the terms' thresholds ready at the effective capacity, nil for
// a limit without thresholds: what Prepare computed when that is the
// limit's own capacity, a new Watch otherwise.
func (t *Terms) Watch() *Watch {
	if len(t.Limit.Thresholds) == 0 {
		return nil
	}
	return t.Limit.WatchAt(t.Limit.Capacity)
}

// Ceiling is the most level + held may reach by an accepted charge under
// the terms (Limit.Ceiling of the effective limit).
func (t *Terms) Ceiling() decimal.Decimal { return t.Limit.Ceiling() }

// mayExpire is what a Resolver may offer to answer cheaply that a bucket
// last written at updated (Unix microseconds) has no end of a temporary
// rule change to settle by now (ovset.Set.MayExpire).
type mayExpire interface {
	MayExpire(key string, updated int64, now time.Time) bool
}

// TermsAt is the terms of one bucket at in.Now, the one rule every store
// takes them from, in this order:
//
//  1. The bucket's state is settled at each instant since its last write at
//     which the override in force expired and the rule changed
//     (SettleExpiries).
//  2. The override that resolves for the key at Now is applied
//     (Override.Apply).
//  3. With rollover, the carry the bucket receives in the current period
//     (CarryAt, with the capacity in force at the end of the period before:
//     the override's that resolved at its last microsecond) is added
//     (Limit.WithRollover).
//  4. The active grants are added (ActiveGrants, Limit.WithGrants).
//
// It does no I/O and reads no clock.
func TermsAt(in *TermsInput) (t Terms) {
	base, ov := &in.Limit, in.Overrides
	t.Limit, t.State, t.Revision = *base, in.State, base.UpdatedAt
	if ov != nil {
		if updated := in.State.Updated; !updated.IsZero() {
			if h, ok := ov.(mayExpire); !ok || h.MayExpire(in.Key, updated.UnixMicro(), in.Now) {
				st, expired := SettleExpiries(ov, *base, in.Key, in.State, in.Now)
				t.Settled = !st.Updated.Equal(updated) || len(expired) > 0
				t.State, t.Expired = st, expired
			}
		}
		if o, ok := ov.Resolve(in.Key, in.Now); ok {
			t.Limit = o.Apply(*base)
			t.OverrideVersion = o.UpdatedAt
			t.ValidUntil = o.ExpiresAt
		}
	}
	if t.Limit.Rollover != nil && t.Limit.Period != nil && !t.State.Updated.IsZero() {
		capacityAt := func(end time.Time) decimal.Decimal {
			at := end.Add(-time.Microsecond)
			if ov != nil {
				if o, ok := ov.Resolve(in.Key, at); ok {
					return o.Apply(*base).Capacity
				}
			}
			return base.Capacity
		}
		t.Limit = t.Limit.WithRollover(CarryAt(t.Limit, t.State, in.Carry, in.Now, capacityAt))
		_, end := t.Limit.Period.stored().Bounds(in.Now)
		t.ValidUntil = earliest(t.ValidUntil, end)
	}
	if len(in.Grants) > 0 {
		var sum decimal.Decimal
		for _, g := range in.Grants {
			if g.ActiveAt(in.Now) {
				sum = sum.Add(g.Amount)
				t.ValidUntil = earliest(t.ValidUntil, g.ExpiresAt)
			}
		}
		t.Limit = t.Limit.WithGrants(sum)
	}
	return t
}

// earliest is the earlier of a and b, where a zero time is no bound.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

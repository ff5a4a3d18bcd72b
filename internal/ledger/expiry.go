package ledger

import (
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
)

// SettleExpiries settles st, the state of key's bucket last written at
// st.Updated under l as the overrides applied to it then, at each instant T
// in (st.Updated, now] at which the override in force expired and the rule
// changed: from the old rule to the new one at T, as a PUT of the limit does
// (bucket.Switch). It walks the chain when the next override also expired.
// It returns the settled state and the holds the switches expired. In the
// common case (no override with an expiry applied at st.Updated, or it has
// not expired by now) st is returned unchanged at the cost of one Resolve.
func (s *Overrides) SettleExpiries(l Limit, key string, st bucket.State, now time.Time) (bucket.State, []bucket.Hold) {
	return SettleExpiries(s, l, key, st, now)
}

// Resolver resolves the override that applies to a key at an instant, as
// Overrides.Resolve does; a store with its own set of overrides implements it
// to reuse SettleExpiries.
type Resolver interface {
	Resolve(key string, now time.Time) (Override, bool)
}

// SettleExpiries is Overrides.SettleExpiries over any Resolver.
func SettleExpiries(s Resolver, l Limit, key string, st bucket.State, now time.Time) (bucket.State, []bucket.Hold) {
	if st.Updated.IsZero() {
		return st, nil
	}
	var expired []bucket.Hold
	t := st.Updated
	for {
		o, ok := s.Resolve(key, t)
		if !ok || o.ExpiresAt.IsZero() || o.ExpiresAt.After(now) {
			return st, expired
		}
		old := o.Apply(l)
		t = o.ExpiresAt
		next := l
		if n, ok := s.Resolve(key, t); ok {
			next = n.Apply(l)
		}
		if !old.SameRule(next) {
			ns, ex := bucket.Switch(old.Rule(), st, t)
			st, expired = ns, append(expired, ex...)
		}
	}
}

package ledger

import "time"

// Span is what a store that checks a bucket's terms inside its own atomic
// step, rather than computing them there (PostgreSQL's functions, Redis's
// scripts), needs beside TermsAt's: the instants in which the override
// that resolves for the key stays the one it resolved at, and the last
// instant at which the bucket's rule changed by an override's expiry.
type Span struct {
	// From and Until bound the instants [From, Until) at which the same
	// override (or none) resolves for the key; zero is unbounded. Overrides
	// only end between two changes of the set, so it changes only when the
	// one in force expires: From is the latest such expiry at or before the
	// instant asked, Until the expiry of the one in force.
	From, Until time.Time
	// LastSwitch is the latest instant at or before From at which the
	// override in force expired and the rule changed (SettleExpiries'
	// switches); zero for none. A bucket last written before it is to be
	// settled (SettleExpiries) before anything is decided on it; one written
	// at or after it has nothing to settle until Until.
	LastSwitch time.Time
}

// SpanAt is the Span of key's terms at now under the overrides s of l. It
// walks the chain of overrides in force from the earliest instant: one
// Resolve when the override in force now (or none) has been so from the
// start, one more per expiry crossed.
func SpanAt(s Resolver, l Limit, key string, now time.Time) (sp Span) {
	var t time.Time
	o, ok := s.Resolve(key, t)
	for ok && !o.ExpiresAt.IsZero() && !o.ExpiresAt.After(now) {
		old := o.Apply(l)
		t = o.ExpiresAt
		sp.From = t
		o, ok = s.Resolve(key, t)
		next := l
		if ok {
			next = o.Apply(l)
		}
		if !old.SameRule(next) {
			sp.LastSwitch = t
		}
	}
	if ok {
		sp.Until = o.ExpiresAt
	}
	return sp
}

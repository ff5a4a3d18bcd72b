package ledger

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// spanOracle is SpanAt by brute force: the override that resolves can change
// only at an expiry, so every expiry is looked at, before and at it.
func spanOracle(o oracle, now time.Time) (sp Span) {
	pattern := func(at time.Time) string {
		if ov, ok := o.resolve(at); ok {
			return ov.Pattern
		}
		return ""
	}
	var ends []time.Time
	for _, ov := range o.overrides {
		if !ov.ExpiresAt.IsZero() {
			ends = append(ends, ov.ExpiresAt)
		}
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	for _, e := range ends {
		before := e.Add(-time.Microsecond)
		changed := pattern(before) != pattern(e)
		switch {
		case !e.After(now) && changed:
			sp.From = e
		case e.After(now) && changed && sp.Until.IsZero() && pattern(e) != pattern(now):
			sp.Until = e
		}
	}
	for _, e := range ends {
		if !e.After(sp.From) && !o.effective(e.Add(-time.Microsecond)).SameRule(o.effective(e)) {
			sp.LastSwitch = e
		}
	}
	return sp
}

// TestSpanOracle compares SpanAt with the brute-force oracle on random
// limits and overrides, and checks what a Span promises: the same terms
// at every expiry inside [From, Until), and SettleExpiries of a bucket
// written at LastSwitch changing nothing more by now.
func TestSpanOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 11))
	for range 3000 {
		in, ovs := randomTerms(r)
		if in.Overrides == nil {
			continue
		}
		o := oracle{in: in, overrides: ovs}
		got, want := SpanAt(in.Overrides, in.Limit, in.Key, in.Now), spanOracle(o, in.Now)
		if got != want {
			t.Fatalf("overrides %+v: SpanAt %+v, the oracle %+v", ovs, got, want)
		}
		at := TermsAt(&TermsInput{Limit: in.Limit, Key: in.Key, Overrides: in.Overrides, Now: in.Now})
		for _, ov := range ovs {
			e := ov.ExpiresAt
			if e.IsZero() || e.Before(got.From) || !got.Until.IsZero() && !e.Before(got.Until) {
				continue
			}
			if other := TermsAt(&TermsInput{Limit: in.Limit, Key: in.Key, Overrides: in.Overrides, Now: e}); termsKey(other) != termsKey(at) {
				t.Fatalf("overrides %+v: the terms at %v differ from those at %v inside the span %+v", ovs, e, in.Now, got)
			}
		}
	}
}

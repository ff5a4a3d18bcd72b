package ledger

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/shopspring/decimal"
)

var termsNow = time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func capOf(s string) decimal.NullDecimal { return decimal.NewNullDecimal(dec(s)) }

func overridesOf(os ...Override) *Overrides {
	set := &Overrides{}
	for _, o := range os {
		set.Put(o)
	}
	return set
}

// TestTermsAt is the terms rule step by step: which override applies, what
// rollover and grants add, when the terms end by themselves and when a
// bucket's state is settled at the end of an override that changed its rule.
func TestTermsAt(t *testing.T) {
	leaky := Limit{Name: "l", Capacity: dec("100"), LeakAmount: dec("1"), LeakPer: time.Second, UpdatedAt: termsNow.Add(-time.Hour)}
	month := Period{Every: "month", TZ: "UTC"}
	monthly := Limit{Name: "m", Capacity: dec("100"), Period: &month, Rollover: &Rollover{Max: dec("30")}}
	in5h := termsNow.Add(5 * time.Hour)
	in9h := termsNow.Add(9 * time.Hour)
	ago := termsNow.Add(-2 * time.Hour)
	dec1 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	jan1 := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name       string
		in         TermsInput
		capacity   string
		override   string
		grants     string
		received   string
		validUntil time.Time
		leakPer    time.Duration
	}{
		{name: "the limit alone", in: TermsInput{Limit: leaky, Key: "ab"}, capacity: "100", grants: "0", received: "0", leakPer: time.Second},
		{name: "the exact override beats a prefix", in: TermsInput{Limit: leaky, Key: "ab", Overrides: overridesOf(
			Override{Pattern: "a*", Capacity: capOf("200")}, Override{Pattern: "ab", Capacity: capOf("300"), ExpiresAt: in5h})},
			capacity: "300", override: "ab", grants: "0", received: "0", validUntil: in5h, leakPer: time.Second},
		{name: "the longest prefix beats a shorter one", in: TermsInput{Limit: leaky, Key: "abc", Overrides: overridesOf(
			Override{Pattern: "a*", Capacity: capOf("200")}, Override{Pattern: "ab*", LeakAmount: dec("2"), LeakPer: time.Minute})},
			capacity: "100", override: "ab*", grants: "0", received: "0", leakPer: time.Minute},
		{name: "an expired override is skipped", in: TermsInput{Limit: leaky, Key: "ab", Overrides: overridesOf(
			Override{Pattern: "*", Capacity: capOf("200")}, Override{Pattern: "ab", Capacity: capOf("300"), ExpiresAt: termsNow})},
			capacity: "200", override: "*", grants: "0", received: "0", leakPer: time.Second},
		{name: "grants active now add up, the first expiry ends the terms", in: TermsInput{Limit: leaky, Key: "ab", Grants: []Grant{
			{ID: "g1", Amount: dec("5"), ExpiresAt: in9h}, {ID: "g2", Amount: dec("7.5"), ExpiresAt: in5h}, {ID: "g3", Amount: dec("50"), ExpiresAt: termsNow}}},
			capacity: "112.5", grants: "12.5", received: "0", validUntil: in5h, leakPer: time.Second},
		{name: "grants on an override", in: TermsInput{Limit: leaky, Key: "ab", Overrides: overridesOf(Override{Pattern: "ab", Capacity: capOf("300"), ExpiresAt: in9h}),
			Grants: []Grant{{ID: "g1", Amount: dec("5"), ExpiresAt: in5h}}},
			capacity: "305", override: "ab", grants: "5", received: "0", validUntil: in5h, leakPer: time.Second},
		{name: "rollover from the period before, under the override in force at its end", in: TermsInput{Limit: monthly, Key: "ab",
			Overrides: overridesOf(Override{Pattern: "ab", Capacity: capOf("150"), ExpiresAt: dec1}),
			State:     bucket.State{Level: bucket.MustAmount("140"), Updated: dec1.Add(-48 * time.Hour)}},
			capacity: "110", grants: "0", received: "10", validUntil: jan1},
		{name: "rollover capped at its max, and grants on top", in: TermsInput{Limit: monthly, Key: "ab",
			State:  bucket.State{Level: bucket.MustAmount("10"), Updated: dec1.Add(-48 * time.Hour)},
			Grants: []Grant{{ID: "g", Amount: dec("1"), ExpiresAt: jan1.Add(time.Hour)}}},
			capacity: "131", grants: "1", received: "30", validUntil: jan1},
		{name: "a bucket never written receives nothing and its terms do not end with the period", in: TermsInput{Limit: monthly, Key: "ab"},
			capacity: "100", grants: "0", received: "0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.in.Now = termsNow
			got := TermsAt(&c.in)
			l := got.Limit
			if !l.Capacity.Equal(dec(c.capacity)) || l.Override != c.override || !l.Grants.Equal(dec(c.grants)) || !l.Received.Equal(dec(c.received)) {
				t.Fatalf("capacity %s override %q grants %s received %s; want %s %q %s %s", l.Capacity, l.Override, l.Grants, l.Received, c.capacity, c.override, c.grants, c.received)
			}
			if !got.ValidUntil.Equal(c.validUntil) {
				t.Errorf("valid until %v, want %v", got.ValidUntil, c.validUntil)
			}
			if got.Overridden() != (c.override != "") {
				t.Errorf("overridden %v, want %q", got.Overridden(), c.override)
			}
			if l.LeakPer != c.leakPer {
				t.Errorf("leak per %v, want %v", l.LeakPer, c.leakPer)
			}
			if !got.Revision.Equal(c.in.Limit.UpdatedAt) {
				t.Errorf("revision %v, want %v", got.Revision, c.in.Limit.UpdatedAt)
			}
			if got.Settled {
				t.Errorf("settled a bucket with nothing to settle")
			}
		})
	}

	t.Run("the end of an override that changed the rule settles the state", func(t *testing.T) {
		set := overridesOf(Override{Pattern: "ab", LeakAmount: dec("10"), LeakPer: time.Second, ExpiresAt: ago.Add(time.Hour)})
		hold := bucket.Hold{ID: "h", Amount: bucket.MustAmount("5"), ExpiresAt: ago.Add(30 * time.Minute)}
		st := bucket.State{Level: bucket.MustAmount("90"), Updated: ago, Holds: []bucket.Hold{hold}}
		got := TermsAt(&TermsInput{Limit: leaky, Key: "ab", Overrides: set, State: st, Now: termsNow})
		if !got.Settled || !got.State.Updated.Equal(ago.Add(time.Hour)) || !got.State.Level.IsZero() {
			t.Fatalf("settled %v at %v level %s; want settled at the expiry, empty (leaked at 10/s for an hour)", got.Settled, got.State.Updated, got.State.Level)
		}
		if len(got.Expired) != 1 || got.Expired[0].ID != "h" {
			t.Errorf("expired %v, want the hold h", got.Expired)
		}
		if got.Overridden() || got.Limit.LeakAmount.Cmp(dec("1")) != 0 {
			t.Errorf("the limit's own rule applies after the expiry: %+v", got.Limit)
		}
	})
	t.Run("the end of an override of capacity alone settles nothing", func(t *testing.T) {
		set := overridesOf(Override{Pattern: "ab", Capacity: capOf("500"), ExpiresAt: ago.Add(time.Hour)})
		st := bucket.State{Level: bucket.MustAmount("90"), Updated: ago}
		got := TermsAt(&TermsInput{Limit: leaky, Key: "ab", Overrides: set, State: st, Now: termsNow})
		if got.Settled || !got.State.Updated.Equal(ago) {
			t.Fatalf("settled %v at %v, want the state as stored", got.Settled, got.State.Updated)
		}
	})
}

// TestTermsWatchAndCeiling: the threshold watch is at the effective
// capacity (grants included), the ceiling the mode's at it.
func TestTermsWatchAndCeiling(t *testing.T) {
	l := Limit{Name: "l", Capacity: dec("100"), LeakAmount: dec("1"), LeakPer: time.Second, Mode: ModeSoft, Grace: dec("10"),
		Thresholds: []Threshold{{Percent: dec("50")}}}
	l.Prepare()
	got := TermsAt(&TermsInput{Limit: l, Key: "k", Grants: []Grant{{ID: "g", Amount: dec("100"), ExpiresAt: termsNow.Add(time.Hour)}}, Now: termsNow})
	if w := got.Watch(); w == nil || !w.Capacity.Equal(dec("200")) {
		t.Fatalf("watch %+v, want one at capacity 200", w)
	}
	if !got.Ceiling().Equal(dec("220")) {
		t.Errorf("ceiling %s, want 220 (200 + 10%%)", got.Ceiling())
	}
	plain := TermsAt(&TermsInput{Limit: Limit{Capacity: dec("1")}, Key: "k", Now: termsNow})
	if w := plain.Watch(); w != nil {
		t.Errorf("a limit without thresholds has a watch: %+v", w)
	}
}

// oracle is the terms rule written the slow, obvious way: overrides as a
// list scanned whole at every instant, the state settled at every expiry of
// any override since the last write where the rule in force before and at
// it differ, and the instant the terms end found by computing them at every
// instant where anything could change.
type oracle struct {
	in        TermsInput
	overrides []Override
}

func (o oracle) resolve(at time.Time) (Override, bool) {
	var best Override
	found, bestLen := false, -1
	for _, ov := range o.overrides {
		if !ov.Matches(o.in.Key) || !ov.ActiveAt(at) {
			continue
		}
		p, prefix := ov.Prefix()
		n := len(p)
		if !prefix {
			n = 1 << 30 // the exact key beats every prefix
		}
		if n > bestLen {
			best, found, bestLen = ov, true, n
		}
	}
	return best, found
}

func (o oracle) effective(at time.Time) Limit {
	if ov, ok := o.resolve(at); ok {
		return ov.Apply(o.in.Limit)
	}
	return o.in.Limit
}

func (o oracle) terms(now time.Time) Terms {
	t := Terms{State: o.in.State}
	if !t.State.Updated.IsZero() {
		var ends []time.Time
		for _, ov := range o.overrides {
			if e := ov.ExpiresAt; !e.IsZero() && e.After(t.State.Updated) && !e.After(now) {
				ends = append(ends, e)
			}
		}
		slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
		for _, e := range slices.Compact(ends) {
			before, at := o.effective(e.Add(-time.Microsecond)), o.effective(e)
			if !before.SameRule(at) {
				ns, ex := bucket.Switch(before.Rule(), t.State, e)
				t.State, t.Settled, t.Expired = ns, true, append(t.Expired, ex...)
			}
		}
	}
	t.Limit = o.effective(now)
	if ov, ok := o.resolve(now); ok {
		t.OverrideVersion = ov.UpdatedAt
	}
	if t.Limit.Period != nil && t.Limit.Rollover != nil && !t.State.Updated.IsZero() {
		c := CarryAt(t.Limit, t.State, o.in.Carry, now, func(end time.Time) decimal.Decimal { return o.effective(end.Add(-time.Microsecond)).Capacity })
		t.Limit = t.Limit.WithRollover(c)
	}
	sum := decimal.Zero
	for _, g := range o.in.Grants {
		if now.Before(g.ExpiresAt) {
			sum = sum.Add(g.Amount)
		}
	}
	t.Limit = t.Limit.WithGrants(sum)
	return t
}

// validUntil is the first instant after now, among every instant at which
// anything could change (an override's or a grant's expiry, a period's
// end), at which the oracle's terms differ from now's.
func (o oracle) validUntil(now time.Time) time.Time {
	var at []time.Time
	for _, ov := range o.overrides {
		if !ov.ExpiresAt.IsZero() && ov.ExpiresAt.After(now) {
			at = append(at, ov.ExpiresAt)
		}
	}
	for _, g := range o.in.Grants {
		if g.ExpiresAt.After(now) {
			at = append(at, g.ExpiresAt)
		}
	}
	if l := o.effective(now); l.Period != nil {
		_, end := l.Period.stored().Bounds(now)
		at = append(at, end)
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	first := termsKey(o.terms(now))
	for _, t := range at {
		if termsKey(o.terms(t)) != first {
			return t
		}
	}
	return time.Time{}
}

// termsKey is what two Terms must agree on, as a string.
func termsKey(t Terms) string {
	l := t.Limit
	var b strings.Builder
	fmt.Fprintf(&b, "cap=%s ceil=%s ov=%q grants=%s received=%s carry=%s@%d kind=%s leak=%s/%v",
		l.Capacity.String(), l.Ceiling().String(), l.Override, l.Grants.String(), l.Received.String(), l.Carry.Unused.String(), l.Carry.Period,
		l.Kind(), l.LeakAmount.String(), l.LeakPer)
	if l.Period != nil {
		fmt.Fprintf(&b, " period=%+v", *l.Period)
	}
	if l.Window != nil {
		fmt.Fprintf(&b, " window=%+v", *l.Window)
	}
	fmt.Fprintf(&b, " overridden=%v(%d) state=%s@%d holds=%d settled=%v expired=[", t.Overridden(), t.OverrideVersion.UnixMicro(), t.State.Level.String(), t.State.Updated.UnixMicro(), len(t.State.Holds), t.Settled)
	for _, h := range t.Expired {
		b.WriteString(h.ID + " ")
	}
	b.WriteString("]")
	return b.String()
}

// randomTerms is a random input around termsNow: a limit of any kind and
// mode, with or without rollover; overrides of patterns that cover the key
// or not, some changing the rule, some expired or expiring; a bucket
// written before now or never, with holds; grants active and expired.
func randomTerms(r *rand.Rand) (TermsInput, []Override) {
	second := func(n int) time.Duration { return time.Duration(r.IntN(n)) * time.Second }
	around := func() time.Time { return termsNow.Add(second(40*86400) - 20*24*time.Hour) }
	amount := func(n int) decimal.Decimal { return decimal.New(int64(1+r.IntN(n*100)), -2) }
	l := Limit{Name: "l", Capacity: amount(1000), UpdatedAt: termsNow.Add(-time.Hour)}
	tzs := []string{"UTC", "Europe/Berlin", "America/New_York"}
	switch r.IntN(3) {
	case 0:
		l.LeakAmount, l.LeakPer = amount(10), time.Duration(1+r.IntN(3600))*time.Second
	case 1:
		every := []string{"day", "week", "month"}[r.IntN(3)]
		p, err := ValidatePeriod(every, &tzs[r.IntN(len(tzs))], nil)
		if err != nil {
			panic(err)
		}
		l.Period = &p
		if r.IntN(2) == 0 {
			l.Rollover = &Rollover{Max: amount(500)}
		}
	default:
		w, err := ValidateWindow(time.Duration(1+r.IntN(48))*time.Hour, 0)
		if err != nil {
			panic(err)
		}
		l.Window = &w
	}
	switch r.IntN(3) {
	case 1:
		l.Mode = ModeShadow
	case 2:
		l.Mode, l.Grace = ModeSoft, decimal.New(int64(r.IntN(10001)), -2)
	}
	key := "ab"
	patterns := []string{"ab", "a*", "ab*", "*", "b*", "abc", "a"}
	var ovs []Override
	set := &Overrides{}
	for range r.IntN(6) {
		o := Override{Pattern: patterns[r.IntN(len(patterns))], UpdatedAt: termsNow.Add(-second(86400))}
		if r.IntN(2) == 0 {
			o.Capacity = decimal.NewNullDecimal(amount(1000))
		}
		if r.IntN(2) == 0 {
			switch l.Kind() {
			case "leak":
				o.LeakAmount, o.LeakPer = amount(10), time.Duration(1+r.IntN(3600))*time.Second
			case "period":
				o.TZ = tzs[r.IntN(len(tzs))]
			case "window":
				o.WindowLength = time.Duration(1+r.IntN(48)) * time.Hour
			}
		}
		if r.IntN(3) > 0 {
			o.ExpiresAt = around()
		}
		if _, ok := set.Get(o.Pattern); ok {
			continue
		}
		set.Put(o)
		ovs = append(ovs, o)
	}
	in := TermsInput{Limit: l, Key: key, Now: termsNow}
	if len(ovs) > 0 {
		in.Overrides = set
	}
	if r.IntN(4) > 0 {
		updated := termsNow.Add(-second(40 * 86400))
		in.State = bucket.State{Level: bucket.MustAmount(amount(1000).String()), Updated: updated}
		for i := range r.IntN(3) {
			in.State.Holds = append(in.State.Holds, bucket.Hold{ID: fmt.Sprint("h", i), Amount: bucket.MustAmount(amount(10).String()), ExpiresAt: updated.Add(second(10 * 86400))})
		}
		if r.IntN(3) == 0 && l.Period != nil {
			start, _ := l.Period.stored().Bounds(termsNow)
			in.Carry = Carry{Unused: bucket.MustAmount(amount(100).String()), Period: start.UnixMicro()}
		}
	}
	for i := range r.IntN(4) {
		in.Grants = append(in.Grants, Grant{ID: fmt.Sprint("g", i), Amount: amount(100), ExpiresAt: around()})
	}
	return in, ovs
}

// checkTerms compares TermsAt with the oracle on one input: the terms, and
// the instant they end.
func checkTerms(t *testing.T, in TermsInput, ovs []Override) {
	t.Helper()
	o := oracle{in: in, overrides: ovs}
	got, want := TermsAt(&in), o.terms(in.Now)
	if termsKey(got) != termsKey(want) {
		t.Fatalf("input %+v overrides %+v:\n got %s\nwant %s", in, ovs, termsKey(got), termsKey(want))
	}
	if until := o.validUntil(in.Now); !got.ValidUntil.Equal(until) {
		t.Fatalf("input %+v overrides %+v: valid until %v, the oracle's terms change first at %v", in, ovs, got.ValidUntil, until)
	}
}

// TestTermsOracle drives TermsAt and the oracle with random inputs.
func TestTermsOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 7))
	for range 3000 {
		in, ovs := randomTerms(r)
		checkTerms(t, in, ovs)
	}
}

// FuzzTermsAt is TestTermsOracle under the fuzzer: the seeds pick the
// random input.
func FuzzTermsAt(f *testing.F) {
	for i := range uint64(8) {
		f.Add(i, i*31+1)
	}
	f.Fuzz(func(t *testing.T, a, b uint64) {
		in, ovs := randomTerms(rand.New(rand.NewPCG(a, b)))
		checkTerms(t, in, ovs)
	})
}

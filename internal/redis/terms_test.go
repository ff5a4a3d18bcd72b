package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/ovset"
	"github.com/shopspring/decimal"
)

// randomOverrides is a random set of overrides of a leaky limit on the
// patterns that cover "k-ab" (and others), some of another rate, about
// half with an expiry within 100 s of base.
func randomOverrides(r *rand.Rand, base time.Time) []ledger.Override {
	patterns := []string{"k-ab", "k-a*", "k-*", "k*", "*", "k-b*", "k-ac"}
	var out []ledger.Override
	for _, p := range patterns {
		if r.IntN(3) == 0 {
			continue
		}
		o := ledger.Override{Pattern: p, Capacity: decimal.NewNullDecimal(decimal.NewFromInt(int64(1 + r.IntN(50)))),
			CreatedAt: base, UpdatedAt: base.Add(time.Duration(r.IntN(1000)) * time.Microsecond)}
		if r.IntN(2) == 0 {
			o.LeakAmount, o.LeakPer = decimal.NewFromInt(int64(1+r.IntN(3))), time.Second
		}
		if r.IntN(2) == 0 {
			o.ExpiresAt = base.Add(time.Duration(1+r.IntN(100)) * time.Second)
		}
		out = append(out, o)
	}
	return out
}

// pureTerms is ledger.TermsAt over ledger.Overrides (the pure rules, not
// the Redis store's index) for a bucket not looked up.
func pureTerms(l ledger.Limit, os []ledger.Override, key string, at time.Time) ledger.Terms {
	set := &ledger.Overrides{}
	for _, o := range os {
		set.Put(o)
	}
	return ledger.TermsAt(&ledger.TermsInput{Limit: l, Key: key, Overrides: set, Now: at})
}

func sameTerms(a, b ledger.Limit) bool {
	return a.Override == b.Override && a.Capacity.Equal(b.Capacity) && a.SameRule(b)
}

// TestTermsSpan: the terms the store resolves for a key (termsAt, through
// forKey and its memo) are ledger.TermsAt's over the pure override set,
// and hold at every instant of the span the functions check them in (the
// version's "@lo:hi"), and no longer: just before lo and at hi another
// override resolves; the version's "|T" is the last expiry up to now that
// changed the key's rule (spanArg), before which a bucket is switched
// by Go. Random sets of overrides with expiries, random keys and instants.
func TestTermsSpan(t *testing.T) {
	base := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	l := ledger.Limit{Name: "l", Capacity: decimal.NewFromInt(10), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Hour}
	r := rand.New(rand.NewPCG(42, 42))
	for i := range 300 {
		os := randomOverrides(r, base)
		set := &ovset.Set{}
		for _, o := range os {
			set.Put(o)
		}
		now := base.Add(time.Duration(r.IntN(120_000_000)) * time.Microsecond)
		s := &Store{k: keys{prefix: "b"}, limits: map[string]cachedLimit{}, gens: map[int64]string{}, now: func() time.Time { return now }}
		cl := s.remember(cachedLimit{l: l, gen: 1, version: "1", ovs: &ovSet{ov: 1, set: set}})
		for _, key := range []string{"k-ab", "k-ac", "k-ax", "k-bz", "kz", "z"} {
			name := fmt.Sprintf("%d/%s", i, key)
			want := pureTerms(l, os, key, now).Limit
			for range 3 { // the memo keeps a key from its second call on
				if got := s.forKey(cl, key).l; !sameTerms(got, want) {
					t.Fatalf("%s: terms %s %v, want %s %v", name, got.Override, got.Capacity, want.Override, want.Capacity)
				}
			}
			version := s.forKey(cl, key).args.version
			lo, hi := spanOf(t, version)
			if got, want := switchOf(t, version), pureSwitch(l, os, key, now); got != want {
				t.Fatalf("%s: version %q passes the last switch %d, want %d", name, version, got, want)
			}
			for _, at := range spanInstants(os, now, lo, hi) {
				if got := pureTerms(l, os, key, at).Limit; !sameTerms(got, want) {
					t.Fatalf("%s: at %v inside [%d, %d) the terms are %q, not %q", name, at, lo, hi, got.Override, want.Override)
				}
			}
			if lo != 0 && pureTerms(l, os, key, time.UnixMicro(lo-1)).Limit.Override == want.Override {
				t.Fatalf("%s: the span starts at %d, after the terms began", name, lo)
			}
			if hi != 0 && pureTerms(l, os, key, time.UnixMicro(hi)).Limit.Override == want.Override {
				t.Fatalf("%s: the span ends at %d, before the terms end", name, hi)
			}
		}
	}
}

// switchOf reads the "|T" of a version (0: none).
func switchOf(t *testing.T, version string) int64 {
	_, sw, ok := strings.Cut(version, "|")
	if !ok {
		return 0
	}
	v, err := strconv.ParseInt(sw, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// pureSwitch is the last expiry up to now at which the rule of key changed
// (the rule just before it is not the rule at it), by the pure rules: the
// instant before which a function answers E_SWITCH for a bucket written.
func pureSwitch(l ledger.Limit, os []ledger.Override, key string, now time.Time) (last int64) {
	for _, o := range os {
		e := o.ExpiresAt
		if e.IsZero() || e.After(now) || e.UnixMicro() <= last {
			continue
		}
		if !pureTerms(l, os, key, e.Add(-time.Microsecond)).Limit.SameRule(pureTerms(l, os, key, e).Limit) {
			last = e.UnixMicro()
		}
	}
	return last
}

// spanOf reads the "@lo:hi" of a version (0: unbounded).
func spanOf(t *testing.T, version string) (lo, hi int64) {
	_, span, ok := strings.Cut(version, "@")
	if !ok {
		return 0, 0
	}
	span, _, _ = strings.Cut(span, "|")
	a, b, _ := strings.Cut(span, ":")
	var err error
	if a != "" {
		if lo, err = strconv.ParseInt(a, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	if b != "" {
		if hi, err = strconv.ParseInt(b, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	return lo, hi
}

// spanInstants are the instants of [lo, hi) at which the terms could
// change: its ends, now, and each expiry inside it and the µs before.
func spanInstants(os []ledger.Override, now time.Time, lo, hi int64) []time.Time {
	in := func(us int64) bool { return us >= lo && (hi == 0 || us < hi) }
	out := []time.Time{now}
	for _, us := range []int64{lo, hi - 1} {
		if us > 0 && in(us) {
			out = append(out, time.UnixMicro(us))
		}
	}
	for _, o := range os {
		if o.ExpiresAt.IsZero() {
			continue
		}
		for _, us := range []int64{o.ExpiresAt.UnixMicro() - 1, o.ExpiresAt.UnixMicro()} {
			if in(us) {
				out = append(out, time.UnixMicro(us))
			}
		}
	}
	return out
}

// TestSwitchBucket: Go settles a bucket through the end of a temporary
// override that changed its rule (switchBucket: ledger.TermsAt over the
// bucket as stored, written by switch_bucket): at the expiry, at the
// level the old rule left then. A switch computed from a bucket as it no
// longer is (written since) writes nothing and is no error: the caller
// calls again, with no reload of the limit cache. On both set-ups.
func TestSwitchBucket(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) {
			clock := ledgertest.NewClock()
			s := openTest(t, serverURL(t, env), WithClock(clock.Now), WithLimitCacheTTL(time.Hour))
			ctx := context.Background()
			svc := ledger.NewService(s)
			if _, err := svc.PutLimit(ctx, "l", ledger.LimitSpec{Capacity: num("100"), LeakAmount: num("10"), LeakPer: time.Hour}); err != nil {
				t.Fatal(err)
			}
			t0 := clock.Now()
			exp := t0.Add(2 * time.Hour)
			if _, err := svc.PutOverride(ctx, "l", ledger.Override{Pattern: "{t}k", LeakAmount: num("1"), LeakPer: time.Hour, ExpiresAt: exp}); err != nil {
				t.Fatal(err)
			}
			ref := ledger.BucketRef{Limit: "l", Key: "{t}k"}
			if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: num("50")}}, ledger.Idempotency{}); err != nil {
				t.Fatal(err)
			}
			clock.Set(t0.Add(3 * time.Hour))
			cl, err := s.fetchLimit(ctx, "l")
			if err != nil {
				t.Fatal(err)
			}
			bk := s.k.bucket(cl.gen, "{t}k")
			before, err := s.client.HGetAll(ctx, bk).Result()
			if err != nil {
				t.Fatal(err)
			}
			old := []any{before["l"], strconv.FormatInt(t0.Add(-time.Second).UnixMicro(), 10), ""}
			if err := s.switchBucket(ctx, bk, old); err != nil {
				t.Fatalf("a switch from a bucket written since: %v, want none", err)
			}
			if after, _ := s.client.HGetAll(ctx, bk).Result(); after["u"] != before["u"] || after["l"] != before["l"] {
				t.Fatalf("a switch from a bucket written since wrote %v over %v", after, before)
			}
			if err := s.switchBucket(ctx, bk, nil); err != nil {
				t.Fatal(err)
			}
			after, _ := s.client.HGetAll(ctx, bk).Result()
			if want := strconv.FormatInt(exp.UnixMicro(), 10); after["u"] != want || after["l"] != units(num("48")) {
				t.Fatalf("switched to l=%s u=%s, want %s (2h at 1/h) at %s", after["l"], after["u"], units(num("48")), want)
			}
			if st, err := svc.Bucket(ctx, ref); err != nil || st.Level.String() != "38" {
				t.Fatalf("after the switch: %+v %v, want level 38 (1h at 10/h since the expiry)", st, err)
			}
		})
	}
}

package redis

import (
	"context"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
)

// TestOverrideExpirySettles checks the Redis side of the end of a temporary
// rule change (ledgertest.RunOverrideExpiry runs the rule itself): Go
// settles a bucket through the expiry (ledger.TermsAt) the first time a
// function meets it unswitched, which costs two function calls more, once
// (the function's answer E_SWITCH with the bucket as stored, then
// switch_bucket; no other read), and every call after it one function call
// (CanAccept, Fillup with a key and a multi-bucket Fillup, as
// TestOverridesOneRoundTrip), a listing shows the settled state, and a PUT
// that replaces the expired override, after which the instance's copy no
// longer knows it, keeps the switch: a capacity raise (no change of rule)
// and a new leak (a change of rule, over a bucket empty at the expiry).
func TestOverrideExpirySettles(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) {
			clock := ledgertest.NewClock()
			s := openTest(t, serverURL(t, env), WithClock(clock.Now), WithLimitCacheTTL(time.Hour))
			ctx := context.Background()
			svc := ledger.NewService(s)
			if _, err := svc.PutLimit(ctx, "l", ledger.LimitSpec{Capacity: num("100"), LeakAmount: num("10"), LeakPer: time.Hour, History: true}); err != nil {
				t.Fatal(err)
			}
			t0 := clock.Now()
			for _, p := range []string{"{t}k", "{t}j", "{t}r"} {
				if _, err := svc.PutOverride(ctx, "l", ledger.Override{Pattern: p, LeakAmount: num("1"), LeakPer: time.Hour, ExpiresAt: t0.Add(2 * time.Hour)}); err != nil {
					t.Fatal(err)
				}
			}
			// {t}z leaks 100/h for its first hour: empty at its expiry.
			if _, err := svc.PutOverride(ctx, "l", ledger.Override{Pattern: "{t}z", LeakAmount: num("100"), LeakPer: time.Hour, ExpiresAt: t0.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			ref := func(key string) ledger.BucketRef { return ledger.BucketRef{Limit: "l", Key: key} }
			for _, k := range []string{"{t}k", "{t}j", "{t}r", "{t}z"} {
				if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref(k), Cost: num("50")}}, ledger.Idempotency{}); err != nil {
					t.Fatal(err)
				}
			}
			clock.Set(t0.Add(3 * time.Hour)) // 2h at 1/h, then 1h at 10/h: 38 each
			if _, err := svc.CanAccept(ctx, ref("{t}x"), num("1")); err != nil {
				t.Fatal(err) // loads the limit and its overrides
			}
			log := &commandLog{}
			s.client.(interface{ AddHook(goredis.Hook) }).AddHook(log)
			if d, err := svc.CanAccept(ctx, ref("{t}k"), num("62")); err != nil || !d.Accepted {
				t.Fatalf("CanAccept of the settled remaining 62: %+v %v", d, err)
			}
			if got := log.take(); !slices.Equal(got, []string{"fcall_ro", "fcall", "fcall_ro"}) {
				t.Errorf("CanAccept of a bucket to switch sent %v, want the call, the switch and the call again", got)
			}
			if _, err := svc.CanAccept(ctx, ref("{t}k"), num("62")); err != nil {
				t.Fatal(err)
			}
			if got := log.take(); !slices.Equal(got, []string{"fcall_ro"}) {
				t.Errorf("CanAccept of the switched bucket sent %v", got)
			}
			res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref("{t}k"), Cost: num("2")}}, ledger.Idempotency{Scope: "s", Key: "a", Hash: "h"})
			if err != nil || !res.Accepted || res.Items[0].Level.String() != "40" {
				t.Fatalf("Fillup with a key: %+v %v", res, err)
			}
			if got := log.take(); !slices.Equal(got, []string{"fcall"}) {
				t.Errorf("Fillup with a key sent %v", got)
			}
			res, err = svc.Fillup(ctx, []ledger.Item{{Bucket: ref("{t}k"), Cost: num("1")}, {Bucket: ref("{t}j"), Cost: num("1")}}, ledger.Idempotency{})
			if err != nil || !res.Accepted || res.Items[0].Level.String() != "41" || res.Items[1].Level.String() != "39" {
				t.Fatalf("multi-bucket Fillup: %+v %v", res, err)
			}
			if got := log.take(); !slices.Equal(got, []string{"fcall", "fcall", "fcall"}) {
				t.Errorf("multi-bucket Fillup over a bucket to switch ({t}j) sent %v", got)
			}
			res, err = svc.Fillup(ctx, []ledger.Item{{Bucket: ref("{t}k"), Cost: num("0")}, {Bucket: ref("{t}j"), Cost: num("0")}}, ledger.Idempotency{})
			if err != nil || !res.Accepted || res.Items[0].Level.String() != "41" || res.Items[1].Level.String() != "39" {
				t.Fatalf("multi-bucket Fillup again: %+v %v", res, err)
			}
			if got := log.take(); !slices.Equal(got, []string{"fcall"}) {
				t.Errorf("multi-bucket Fillup of switched buckets sent %v", got)
			}

			list, _, err := svc.ListBuckets(ctx, "l", "", 10)
			if err != nil {
				t.Fatal(err)
			}
			levels := map[string]string{}
			for _, b := range list {
				levels[b.Key] = b.Level.String()
			}
			if levels["{t}r"] != "38" || levels["{t}k"] != "41" {
				t.Errorf("listed levels %v, want {t}r 38 (settled at the expiry, never written since) and {t}k 41", levels)
			}

			// A capacity raise replaces {t}r's expired leak: the set no
			// longer knows the end of the slower leak, the bucket does.
			if _, err := svc.PutOverride(ctx, "l", ledger.Override{Pattern: "{t}r", Capacity: decimal.NewNullDecimal(num("200"))}); err != nil {
				t.Fatal(err)
			}
			// A slower leak replaces {t}z's: a change of rule, whose settle
			// keeps the switch to an empty bucket at its expiry.
			if _, err := svc.PutOverride(ctx, "l", ledger.Override{Pattern: "{t}z", LeakAmount: num("5"), LeakPer: time.Hour}); err != nil {
				t.Fatal(err)
			}
			clock.Set(t0.Add(4 * time.Hour))
			st, err := svc.Bucket(ctx, ref("{t}r"))
			if err != nil {
				t.Fatal(err)
			}
			if st.Level.String() != "28" || st.Capacity.String() != "200" {
				t.Errorf("after the PUT replacing the expired override: level %s capacity %s, want 28 (38 at 3h, 1h at 10/h) and 200", st.Level, st.Capacity)
			}
			if st, err := svc.Bucket(ctx, ref("{t}z")); err != nil || !st.Level.IsZero() {
				t.Errorf("after the PUT of a new rule over the expired one: %+v %v, want level 0 (empty at the expiry)", st, err)
			}
		})
	}
}

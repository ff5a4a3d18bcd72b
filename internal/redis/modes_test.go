package redis

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// TestModesLeanFillup: the lean Fillup (one leaky bucket, no history, no
// idempotency key, nothing stored but level and time) admits against the
// mode's ceiling, which the conformance test Modes never reaches (its
// limits keep history): a soft limit takes costs up to capacity × (1 +
// grace) and not a unit more, also at the largest capacity and grace, and a
// shadow limit charges far past its capacity. The bucket keeps only level
// and time throughout, so every call took the lean path.
func TestModesLeanFillup(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) {
			s := openTest(t, serverURL(t, env), WithClock(func() time.Time { return time.UnixMicro(1_800_000_000_000_000) }))
			ctx := context.Background()
			svc := ledger.NewService(s)
			steps := []struct {
				spec  ledger.LimitSpec
				costs []string
				// want per cost: "+" accepted, "o" accepted over capacity
				// (over_capacity or shadow_denied), "-" denied.
				want  string
				level string
			}{
				{ledger.LimitSpec{Capacity: num("100"), LeakAmount: num("1"), LeakPer: time.Hour, Mode: ledger.ModeSoft, Grace: num("12.5")},
					[]string{"100", "12.5", "0.000001", "0"}, "+o-+", "112.5"},
				{ledger.LimitSpec{Capacity: num("0.000003"), LeakAmount: num("1"), LeakPer: time.Hour, Mode: ledger.ModeSoft, Grace: num("33.33")},
					[]string{"0.000003", "0.000001"}, "+-", "0.000003"}, // ceiling 0.0000039999
				{ledger.LimitSpec{Capacity: ledger.MaxAmount, LeakAmount: num("1"), LeakPer: time.Hour, Mode: ledger.ModeSoft, Grace: num("100")},
					[]string{"1000000000000", "1000000000000", "0.000001"}, "+o-", "2000000000000"},
				{ledger.LimitSpec{Capacity: num("10"), LeakAmount: num("1"), LeakPer: time.Hour, Mode: ledger.ModeShadow},
					[]string{"10", "1000000000000", "1000000000000"}, "+oo", "2000000000010"},
				{ledger.LimitSpec{Capacity: num("10"), LeakAmount: num("1"), LeakPer: time.Hour},
					[]string{"10", "0.000001"}, "+-", "10"},
			}
			for i, st := range steps {
				name := "lean" + string(rune('a'+i))
				if _, err := svc.PutLimit(ctx, name, st.spec); err != nil {
					t.Fatalf("PutLimit %s: %v", name, err)
				}
				ref := ledger.BucketRef{Limit: name, Key: "k"}
				for j, cost := range st.costs {
					res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: num(cost)}}, ledger.Idempotency{})
					if err != nil {
						t.Fatalf("%s fillup %s: %v", name, cost, err)
					}
					dec := res.Items[0]
					if dec.Accepted != res.Accepted {
						t.Fatalf("%s fillup %s: the store decided accepted=%v, the rule on its answer %+v", name, cost, res.Accepted, dec)
					}
					got := "-"
					switch {
					case dec.Accepted && (dec.OverCapacity || dec.ShadowDenied):
						got = "o"
					case dec.Accepted:
						got = "+"
					}
					if got != st.want[j:j+1] {
						t.Fatalf("%s (%s) fillup %s: %+v, want %s", name, st.spec.Mode, cost, dec, st.want[j:j+1])
					}
				}
				sn, err := s.Inspect(ctx, ref)
				if err != nil || !sn.State.Level.Equal(ledger.Amount(num(st.level))) {
					t.Fatalf("%s: level %s %v, want %s", name, sn.State.Level, err, st.level)
				}
				cl, err := s.limitFor(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				fields, err := s.client.HKeys(ctx, s.k.bucket(cl.gen, ref.Key)).Result()
				slices.Sort(fields)
				if err != nil || !slices.Equal(fields, []string{"l", "u"}) {
					t.Fatalf("%s: bucket fields %v %v, want only l and u (the lean path's bucket)", name, fields, err)
				}
			}
		})
	}
}

// TestModesStoredBefore: a limit definition without the fields m and gr
// (put before limits had modes) reads as enforce with grace 0 and is
// enforced as such; a limit document without them (an idempotency record
// kept before modes) too; a mode that is none of the three is an error,
// never passed on.
func TestModesStoredBefore(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) {
			s := openTest(t, serverURL(t, env), WithClock(func() time.Time { return time.UnixMicro(1_800_000_000_000_000) }))
			ctx := context.Background()
			svc := ledger.NewService(s)
			spec := ledger.LimitSpec{Capacity: num("100"), LeakAmount: num("1"), LeakPer: time.Hour, Mode: ledger.ModeSoft, Grace: num("10")}
			if _, err := svc.PutLimit(ctx, "old", spec); err != nil {
				t.Fatal(err)
			}
			dk := s.k.limitDef("old")
			if m, err := s.client.HMGet(ctx, dk, "m", "gr").Result(); err != nil || m[0] != "soft" || m[1] != "10" {
				t.Fatalf("stored mode and grace %v %v, want soft 10", m, err)
			}
			ref := ledger.BucketRef{Limit: "old", Key: "k"}
			if res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: num("100")}}, ledger.Idempotency{}); err != nil || !res.Accepted {
				t.Fatalf("fillup 100: %+v %v", res, err)
			}
			// As an earlier version stored it: no m, no gr.
			if err := s.client.HDel(ctx, dk, "m", "gr").Err(); err != nil {
				t.Fatal(err)
			}
			s.forgetAll()
			l, err := svc.GetLimit(ctx, "old")
			if err != nil || l.Mode != ledger.ModeEnforce || !l.Grace.IsZero() {
				t.Fatalf("GetLimit of a definition without mode: %+v %v, want enforce, grace 0", l, err)
			}
			ls, err := svc.ListLimits(ctx, "", 10)
			if err != nil || len(ls) != 1 || ls[0].Mode != ledger.ModeEnforce {
				t.Fatalf("ListLimits: %+v %v, want the limit as enforce", ls, err)
			}
			if res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: num("1")}}, ledger.Idempotency{}); err != nil || res.Accepted {
				t.Fatalf("fillup past capacity under the enforce read: %+v %v, want denied", res, err)
			}

			old, err := decodeLimit(`{"n":"l","c":"99","a":"2","p":1000000,"h":false,"ct":0,"ut":0}`)
			if err != nil || old.Mode != ledger.ModeEnforce || !old.Grace.IsZero() {
				t.Fatalf("limit document without mode: %+v %v, want enforce, grace 0", old, err)
			}
			if _, err := decodeLimit(`{"n":"l","c":"99","a":"2","p":1000000,"h":false,"m":"strict","ct":0,"ut":0}`); err == nil {
				t.Fatal("limit document with mode strict: read, want an error")
			}

			if err := s.client.HSet(ctx, dk, "m", "strict").Err(); err != nil {
				t.Fatal(err)
			}
			s.forgetAll()
			if l, err := svc.GetLimit(ctx, "old"); err == nil {
				t.Fatalf("GetLimit of a definition with mode strict: %+v, want an error", l)
			}
		})
	}
}

// TestModesReplay: an idempotent retry replays the decision under the mode
// of the original call, kept in the record's limit document, after a PUT
// changed it: a soft charge over capacity replays marked over_capacity, a
// shadow one marked shadow_denied, both with the original limit.
func TestModesReplay(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) {
			s := openTest(t, serverURL(t, env), WithClock(func() time.Time { return time.UnixMicro(1_800_000_000_000_000) }))
			ctx := context.Background()
			svc := ledger.NewService(s)
			for _, mode := range []string{ledger.ModeSoft, ledger.ModeShadow} {
				spec := ledger.LimitSpec{Capacity: num("100"), LeakAmount: num("1"), LeakPer: time.Hour, Mode: mode}
				if mode == ledger.ModeSoft {
					spec.Grace = num("7.25")
				}
				if _, err := svc.PutLimit(ctx, mode, spec); err != nil {
					t.Fatal(err)
				}
				ref := ledger.BucketRef{Limit: mode, Key: "k"}
				idem := ledger.Idempotency{Scope: "fillup:" + mode + "/k", Key: "k1", Hash: "h1"}
				first, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: num("107.25")}}, idem)
				if err != nil || !first.Accepted || first.Items[0].OverCapacity != (mode == ledger.ModeSoft) ||
					first.Items[0].ShadowDenied != (mode == ledger.ModeShadow) {
					t.Fatalf("%s fillup 107.25: %+v %v", mode, first, err)
				}
				if _, err := svc.PutLimit(ctx, mode, ledger.LimitSpec{Capacity: num("100"), LeakAmount: num("1"), LeakPer: time.Hour}); err != nil {
					t.Fatal(err)
				}
				again, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: num("107.25")}}, idem)
				if err != nil || !again.Replayed || !again.Accepted || again.Items[0] != first.Items[0] ||
					again.Limits[0].Mode != mode || !again.Limits[0].Grace.Equal(spec.Grace) {
					t.Fatalf("%s replay after the switch to enforce: %+v %v, want %+v under the original limit", mode, again, err, first)
				}
			}
		})
	}
}

// TestModeCeilingArgument: the ceiling the functions admit against is the
// mode's, in units: the capacity (enforce, and a limit without a mode),
// capacity × (1 + grace) exactly, or the largest level (shadow).
func TestModeCeilingArgument(t *testing.T) {
	for _, tc := range []struct {
		mode, capacity, grace, want string
	}{
		{"", "100", "0", "100000000000000"},
		{ledger.ModeEnforce, "100", "0", "100000000000000"},
		{ledger.ModeSoft, "0.000001", "0.01", "1000100"},
		{ledger.ModeSoft, "1000000000000", "100", "2000000000000000000000000"},
		{ledger.ModeSoft, "999999999999.999999", "99.99", "1999899999999999998000100"},
		{ledger.ModeShadow, "5", "0", "1000000000000000000000000000"},
	} {
		l := ledger.Limit{Name: "l", Capacity: num(tc.capacity), LeakAmount: num("1"), LeakPer: time.Second, Mode: tc.mode, Grace: num(tc.grace)}
		if got := newLimitArgs(keys{}, l, 1, "1", time.Time{}).ceiling; got != tc.want {
			t.Errorf("%s capacity %s grace %s: ceiling %s, want %s", tc.mode, tc.capacity, tc.grace, got, tc.want)
		}
	}
}

func num(s string) decimal.Decimal { return decimal.RequireFromString(s) }

package redis

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"
)

// TestGrantsConcurrentFillups: 50 concurrent Fillups of 1.5 on a bucket of
// capacity 10 with a grant of 40 admit exactly what capacity + grants hold
// (33 of them, level 49.5), never more, on both set-ups; a key with a hash
// tag in Redis Cluster. Without the grant only 6 would fit.
func TestGrantsConcurrentFillups(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) {
			clock := ledgertest.NewClock()
			s := openTest(t, serverURL(t, env), WithClock(clock.Now))
			ctx := context.Background()
			svc := ledger.NewService(s)
			if _, err := svc.PutLimit(ctx, "l", ledger.LimitSpec{Capacity: num("10"), LeakAmount: num("1"), LeakPer: time.Hour}); err != nil {
				t.Fatal(err)
			}
			ref := ledger.BucketRef{Limit: "l", Key: "{team}b"}
			if _, err := svc.AddGrant(ctx, ref, num("40"), clock.Now().Add(time.Hour), ledger.Idempotency{}, nil); err != nil {
				t.Fatal(err)
			}
			var (
				wg       sync.WaitGroup
				mu       sync.Mutex
				accepted int
			)
			start := make(chan struct{})
			for range 50 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: num("1.5")}}, ledger.Idempotency{})
					if err != nil {
						t.Error(err)
						return
					}
					if res.Limits[0].Grants.String() != "40" || res.Items[0].Capacity.String() != "50" {
						t.Errorf("decision %+v with grants %s, want capacity 50 with grants 40", res.Items[0], res.Limits[0].Grants)
					}
					if res.Accepted {
						mu.Lock()
						accepted++
						mu.Unlock()
					}
				}()
			}
			close(start)
			wg.Wait()
			st, err := svc.Bucket(ctx, ref)
			if err != nil {
				t.Fatal(err)
			}
			if accepted != 33 || st.Level.String() != "49.5" || st.Capacity.String() != "50" {
				t.Fatalf("%d accepted, bucket %+v; want 33 accepted, level 49.5 of 50", accepted, st)
			}
		})
	}
}

// TestGrantsClusterHashTag: in Redis Cluster a grant lives in its bucket's
// hash (so in the slot of the key's tag): a multi-bucket Fillup over keys
// of one tag sees the grant of its own item in its one function call, and
// granting, listing and revoking work on that slot, one function call each.
func TestGrantsClusterHashTag(t *testing.T) {
	clock := ledgertest.NewClock()
	s := openTest(t, serverURL(t, "BUDGETD_TEST_REDIS_CLUSTER"), WithClock(clock.Now), WithLimitCacheTTL(time.Hour))
	ctx := context.Background()
	svc := ledger.NewService(s)
	for _, name := range []string{"user", "team"} {
		if _, err := svc.PutLimit(ctx, name, ledger.LimitSpec{Capacity: num("100"), Period: &ledger.Period{Every: "month"}, History: true}); err != nil {
			t.Fatal(err)
		}
	}
	log := &commandLog{}
	s.client.(interface{ AddHook(goredis.Hook) }).AddHook(log)
	sent := func(what string, want ...string) {
		t.Helper()
		if got := log.take(); !slices.Equal(got, want) {
			t.Errorf("%s sent %v, want %v", what, got, want)
		}
	}
	log.take()
	user, team := ledger.BucketRef{Limit: "user", Key: "{acme}u1"}, ledger.BucketRef{Limit: "team", Key: "{acme}team"}
	g, err := svc.AddGrant(ctx, team, num("50"), time.Time{}, ledger.Idempotency{}, ledger.Meta{"ticket": "T-1"})
	if err != nil {
		t.Fatal(err)
	}
	sent("AddGrant", "fcall")
	cl, err := s.limitFor(ctx, "team")
	if err != nil {
		t.Fatal(err)
	}
	bk := s.k.bucket(cl.gen, team.Key)
	if slotOf(bk) != slotOf("{acme}") {
		t.Fatalf("bucket key %s is in slot %d, the tag's is %d", bk, slotOf(bk), slotOf("{acme}"))
	}
	fields, err := s.client.HKeys(ctx, bk).Result()
	if err != nil || !slices.Contains(fields, "G"+g.Grant.ID) {
		t.Fatalf("bucket fields %v %v, want the grant's G%s", fields, err, g.Grant.ID)
	}
	log.take()
	items := []ledger.Item{{Bucket: user, Cost: num("10")}, {Bucket: team, Cost: num("140")}}
	res, err := svc.Fillup(ctx, items, ledger.Idempotency{})
	if err != nil || !res.Accepted || res.Limits[1].Grants.String() != "50" || !res.Limits[0].Grants.IsZero() {
		t.Fatalf("multi-bucket Fillup within the grant: %+v %v", res, err)
	}
	sent("Fillup", "fcall")
	items[1].Cost = num("10.000001")
	if res, err := svc.Fillup(ctx, items, ledger.Idempotency{}); err != nil || res.Accepted {
		t.Fatalf("multi-bucket Fillup past the granted capacity: %+v %v", res, err)
	}
	log.take()
	if gs, err := svc.ListGrants(ctx, team); err != nil || len(gs) != 1 || gs[0].ID != g.Grant.ID {
		t.Fatalf("ListGrants: %+v %v", gs, err)
	}
	sent("ListGrants", "fcall_ro")
	rev, err := svc.RevokeGrant(ctx, team, g.Grant.ID, ledger.Idempotency{}, nil)
	if err != nil || rev.Bucket.Capacity.String() != "100" || rev.Bucket.Remaining.String() != "0" {
		t.Fatalf("RevokeGrant: %+v %v", rev, err)
	}
	sent("RevokeGrant", "fcall")
	h, _, err := svc.History(ctx, team, "", 10)
	if err != nil || len(h) != 3 || h[0].Event != ledger.EventRevoked || h[2].Event != ledger.EventGranted || h[2].GrantID != g.Grant.ID || h[2].Meta["ticket"] != "T-1" {
		t.Fatalf("history %+v %v", h, err)
	}
}

// TestGrantsKeepTheBucket: a bucket's hash lives at least until its last
// grant expires, also when its level empties long before; from the
// expiry on the grant counts no more, and the next write drops its field,
// so the bucket is lean again (level and time only).
func TestGrantsKeepTheBucket(t *testing.T) {
	clock := ledgertest.NewClock()
	s := openTest(t, serverURL(t, "BUDGETD_TEST_REDIS"), WithClock(clock.Now))
	ctx := context.Background()
	svc := ledger.NewService(s)
	if _, err := svc.PutLimit(ctx, "l", ledger.LimitSpec{Capacity: num("10"), LeakAmount: num("10"), LeakPer: time.Second}); err != nil {
		t.Fatal(err)
	}
	ref := ledger.BucketRef{Limit: "l", Key: "k"}
	cl, err := s.limitFor(ctx, "l")
	if err != nil {
		t.Fatal(err)
	}
	bk := s.k.bucket(cl.gen, ref.Key)
	pttl := func() time.Duration {
		t.Helper()
		d, err := s.client.PTTL(ctx, bk).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	until := clock.Now().Add(10 * 24 * time.Hour)
	if _, err := svc.AddGrant(ctx, ref, num("5"), until, ledger.Idempotency{}, nil); err != nil {
		t.Fatal(err)
	}
	if d := pttl(); d < 10*24*time.Hour {
		t.Fatalf("a bucket with a grant for 10 days has PTTL %v", d)
	}
	if res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: num("15")}}, ledger.Idempotency{}); err != nil || !res.Accepted {
		t.Fatalf("Fillup within the grant: %+v %v", res, err)
	}
	if d := pttl(); d < 10*24*time.Hour {
		t.Fatalf("after a write that empties in 1.5s the bucket has PTTL %v, its grant lasts 10 days", d)
	}
	clock.Set(until)
	if st, err := svc.Bucket(ctx, ref); err != nil || st.Capacity.String() != "10" || !st.Grants.IsZero() {
		t.Fatalf("at the grant's expiry: %+v %v", st, err)
	}
	if res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: num("10.000001")}}, ledger.Idempotency{}); err != nil || res.Accepted || !res.Items[0].NeverFits {
		t.Fatalf("a cost past the capacity after the expiry: %+v %v", res, err)
	}
	if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: num("1")}}, ledger.Idempotency{}); err != nil {
		t.Fatal(err)
	}
	fields, err := s.client.HKeys(ctx, bk).Result()
	slices.Sort(fields)
	if err != nil || !slices.Equal(fields, []string{"l", "u"}) {
		t.Fatalf("after a write past the expiry the bucket has fields %v %v, want l and u", fields, err)
	}
	if d := pttl(); d > 2*time.Minute {
		t.Fatalf("with its grant gone the bucket has PTTL %v, want its own (under a second + a minute)", d)
	}
}

// TestGrantsModes: a grant raises the ceiling as the mode computes it from
// the raised capacity: a soft limit's by the grant × (1 + grace), exactly;
// a shadow limit that records denials flags in its history only what
// passes the granted capacity. TestModeCeilingArgument's arguments carry
// the scale.
func TestGrantsModes(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) {
			clock := ledgertest.NewClock()
			s := openTest(t, serverURL(t, env), WithClock(clock.Now))
			ctx := context.Background()
			svc := ledger.NewService(s)
			later := clock.Now().Add(time.Hour)
			fill := func(ref ledger.BucketRef, cost string) bucket.Decision {
				t.Helper()
				res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: num(cost)}}, ledger.Idempotency{})
				if err != nil {
					t.Fatal(err)
				}
				return res.Items[0]
			}
			// Soft, 12.5% grace: 100 + 50 granted admits up to 168.75.
			if _, err := svc.PutLimit(ctx, "soft", ledger.LimitSpec{Capacity: num("100"), LeakAmount: num("1"), LeakPer: time.Hour, Mode: ledger.ModeSoft, Grace: num("12.5")}); err != nil {
				t.Fatal(err)
			}
			soft := ledger.BucketRef{Limit: "soft", Key: "k"}
			if _, err := svc.AddGrant(ctx, soft, num("50"), later, ledger.Idempotency{}, nil); err != nil {
				t.Fatal(err)
			}
			if d := fill(soft, "168.75"); !d.Accepted || !d.OverCapacity || d.Capacity.String() != "150" {
				t.Fatalf("soft: 168.75 of 150 granted with 12.5%% grace: %+v", d)
			}
			if d := fill(soft, "0.000001"); d.Accepted {
				t.Fatalf("soft: a unit past the granted ceiling accepted: %+v", d)
			}
			// Shadow with recorded denials: within 10 + 5 granted a charge
			// is not shadow-denied, past it it is, in the decision and the
			// history alike.
			if _, err := svc.PutLimit(ctx, "shadow", ledger.LimitSpec{Capacity: num("10"), LeakAmount: num("1"), LeakPer: time.Hour, Mode: ledger.ModeShadow,
				History: true, RecordDenials: true}); err != nil {
				t.Fatal(err)
			}
			shadow := ledger.BucketRef{Limit: "shadow", Key: "k"}
			if _, err := svc.AddGrant(ctx, shadow, num("5"), later, ledger.Idempotency{}, nil); err != nil {
				t.Fatal(err)
			}
			if d := fill(shadow, "12"); !d.Accepted || d.ShadowDenied {
				t.Fatalf("shadow: 12 of 15 granted: %+v", d)
			}
			if d := fill(shadow, "4"); !d.Accepted || !d.ShadowDenied {
				t.Fatalf("shadow: 16 of 15 granted: %+v", d)
			}
			h, _, err := svc.History(ctx, shadow, "", 10)
			if err != nil || len(h) != 3 || !h[0].ShadowDenied || h[1].ShadowDenied || h[2].Event != ledger.EventGranted {
				t.Fatalf("shadow history %+v %v, want the granted entry, then 12 not flagged, 4 flagged", h, err)
			}
		})
	}
	for _, tc := range []struct{ mode, grace, want string }{
		{ledger.ModeEnforce, "0", "100000000000000"},
		{ledger.ModeSoft, "0", "100000000000000"},
		{ledger.ModeSoft, "12.5", "112500000000000/11250"},
		{ledger.ModeSoft, "0.01", "100010000000000/10001"},
		{ledger.ModeShadow, "0", "1000000000000000000000000000/0"},
	} {
		l := ledger.Limit{Name: "l", Capacity: num("100"), LeakAmount: num("1"), LeakPer: time.Second, Mode: tc.mode, Grace: num(tc.grace)}
		if got := newLimitArgs(keys{}, l, 1, "1", time.Time{}).ceilArg; got != tc.want {
			t.Errorf("%s grace %s: ceiling argument %s, want %s", tc.mode, tc.grace, got, tc.want)
		}
	}
}

// TestGrantsGoWithTheLimit: DeleteLimit removes a limit's grants with its
// buckets (they are fields of its generation's bucket hashes); a limit
// re-created under the name has none.
func TestGrantsGoWithTheLimit(t *testing.T) {
	clock := ledgertest.NewClock()
	s := openTest(t, serverURL(t, "BUDGETD_TEST_REDIS"), WithClock(clock.Now))
	ctx := context.Background()
	svc := ledger.NewService(s)
	spec := ledger.LimitSpec{Capacity: num("10"), LeakAmount: num("1"), LeakPer: time.Hour}
	if _, err := svc.PutLimit(ctx, "l", spec); err != nil {
		t.Fatal(err)
	}
	ref := ledger.BucketRef{Limit: "l", Key: "k"}
	if _, err := svc.AddGrant(ctx, ref, num("5"), clock.Now().Add(time.Hour), ledger.Idempotency{}, nil); err != nil {
		t.Fatal(err)
	}
	cl, err := s.limitFor(ctx, "l")
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.DeleteLimit(ctx, "l"); err != nil {
		t.Fatal(err)
	}
	left, err := s.client.Keys(ctx, s.k.gen(cl.gen)+":*").Result()
	if err != nil || len(left) != 0 {
		t.Fatalf("keys of the deleted generation: %v %v", left, err)
	}
	if _, err := svc.PutLimit(ctx, "l", spec); err != nil {
		t.Fatal(err)
	}
	if gs, err := svc.ListGrants(ctx, ref); err != nil || len(gs) != 0 {
		t.Fatalf("grants of the re-created limit: %+v %v", gs, err)
	}
	if st, err := svc.Bucket(ctx, ref); err != nil || st.Capacity.String() != "10" || !st.Grants.IsZero() {
		t.Fatalf("state of the re-created limit: %+v %v", st, err)
	}
}

// TestGrantsReplayRepeats: an Idempotency-Key replay of a decision repeats
// the grants it was made with, also after the grant was revoked (the
// record is the function's reply, which carries them beside the level).
func TestGrantsReplayRepeats(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) {
			clock := ledgertest.NewClock()
			s := openTest(t, serverURL(t, env), WithClock(clock.Now))
			ctx := context.Background()
			svc := ledger.NewService(s)
			if _, err := svc.PutLimit(ctx, "l", ledger.LimitSpec{Capacity: num("100"), LeakAmount: num("1"), LeakPer: time.Hour}); err != nil {
				t.Fatal(err)
			}
			ref := ledger.BucketRef{Limit: "l", Key: "k"}
			g, err := svc.AddGrant(ctx, ref, num("50"), clock.Now().Add(time.Hour), ledger.Idempotency{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			idem := ledger.Idempotency{Scope: "fillup|l|k", Key: "k1", Hash: "h"}
			items := []ledger.Item{{Bucket: ref, Cost: num("120")}}
			first, err := svc.Fillup(ctx, items, idem)
			if err != nil || !first.Accepted || first.Items[0].Capacity.String() != "150" {
				t.Fatalf("Fillup within the grant: %+v %v", first, err)
			}
			if _, err := svc.RevokeGrant(ctx, ref, g.Grant.ID, ledger.Idempotency{}, nil); err != nil {
				t.Fatal(err)
			}
			again, err := svc.Fillup(ctx, items, idem)
			if err != nil || !again.Replayed || !again.Accepted || again.Limits[0].Grants.String() != "50" || again.Items[0].Capacity.String() != "150" {
				t.Fatalf("replay after the revocation: %+v %v, want the first answer with grants 50", again, err)
			}
			if st, err := svc.Bucket(ctx, ref); err != nil || st.Capacity.String() != "100" || st.Level.String() != "120" {
				t.Fatalf("bucket after the replay: %+v %v", st, err)
			}
		})
	}
}

// TestGrantsHoldsAndDrain: Reserve admits against the granted capacity and
// Commit, Release and Drain answer the bucket under it, on both set-ups.
func TestGrantsHoldsAndDrain(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) {
			clock := ledgertest.NewClock()
			s := openTest(t, serverURL(t, env), WithClock(clock.Now))
			ctx := context.Background()
			svc := ledger.NewService(s)
			if _, err := svc.PutLimit(ctx, "l", ledger.LimitSpec{Capacity: num("100"), LeakAmount: num("1"), LeakPer: time.Hour, History: true}); err != nil {
				t.Fatal(err)
			}
			ref := ledger.BucketRef{Limit: "l", Key: "{t}k"}
			if _, err := svc.AddGrant(ctx, ref, num("50"), clock.Now().Add(time.Hour), ledger.Idempotency{}, nil); err != nil {
				t.Fatal(err)
			}
			res, err := svc.Reserve(ctx, ref, num("140"), time.Minute, ledger.Idempotency{}, nil)
			if err != nil || !res.Decision.Accepted || res.Decision.Capacity.String() != "150" || res.Limit.Grants.String() != "50" {
				t.Fatalf("Reserve of 140 within 100 + 50 granted: %+v %v", res, err)
			}
			if res, err := svc.Reserve(ctx, ref, num("10.000001"), time.Minute, ledger.Idempotency{}, nil); err != nil || res.Decision.Accepted {
				t.Fatalf("Reserve past the granted capacity: %+v %v", res, err)
			}
			c, err := svc.Commit(ctx, res.Reservation.ID, decimal.NullDecimal{}, false, ledger.Idempotency{}, nil)
			if err != nil || c.Bucket.Capacity.String() != "150" || c.Bucket.Remaining.String() != "10" || c.Bucket.Grants.String() != "50" {
				t.Fatalf("Commit: %+v %v", c, err)
			}
			d, err := svc.Drain(ctx, ref, num("40"), ledger.Idempotency{}, nil)
			if err != nil || d.Bucket.Capacity.String() != "150" || d.Bucket.Remaining.String() != "50" {
				t.Fatalf("Drain: %+v %v", d, err)
			}
			h, err := svc.Reserve(ctx, ref, num("5"), time.Minute, ledger.Idempotency{}, nil)
			if err != nil || !h.Decision.Accepted {
				t.Fatalf("Reserve: %+v %v", h, err)
			}
			r, err := svc.Release(ctx, h.Reservation.ID, ledger.Idempotency{}, nil)
			if err != nil || r.Bucket.Capacity.String() != "150" || r.Bucket.Grants.String() != "50" {
				t.Fatalf("Release: %+v %v", r, err)
			}
		})
	}
}

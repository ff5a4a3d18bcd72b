package redis

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	goredis "github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"
)

// bulkOverrides writes n overrides of limit straight into its keys, as a
// bulk import would (half exact "c<i>", half prefixes "p<i>-*" of one
// length, capacity 50), and bumps the limit's counters as one change: so
// a store reads them all at its next fetch of the limit.
func bulkOverrides(t testing.TB, s *Store, limit string, n int) {
	t.Helper()
	ctx := context.Background()
	terms := `{"c":"50"}`
	for start := 0; start < n; start += 5000 {
		p := s.client.Pipeline()
		for i := start; i < min(start+5000, n); i++ {
			pattern := fmt.Sprintf("c%06d", i)
			if i%2 == 1 {
				pattern = fmt.Sprintf("p%06d-*", i)
			}
			p.HSet(ctx, s.k.overrides(limit), pattern, "|1|1|"+terms)
			p.ZAdd(ctx, s.k.overridePatterns(limit), goredis.Z{Member: pattern})
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	p := s.client.TxPipeline()
	p.HIncrBy(ctx, s.k.limitDef(limit), "ov", overrideLogLen+1) // beyond the log: read whole
	p.HIncrBy(ctx, s.k.limitDef(limit), "v", 1)
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestOverridesAtScale: with 100,000 overrides (50,000 exact, 50,000
// prefixes) a decision on an exact key, a prefix key and a key without an
// override is one function call each, with the right terms; a change made
// through the API afterwards is applied to the loaded set by its log
// entry (the set is not read again), on both set-ups.
func TestOverridesAtScale(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) {
			s := openTest(t, serverURL(t, env), WithLimitCacheTTL(time.Hour))
			ctx := context.Background()
			svc := ledger.NewService(s)
			if _, err := svc.PutLimit(ctx, "l", ledger.LimitSpec{Capacity: num("10"), LeakAmount: num("1"), LeakPer: time.Hour}); err != nil {
				t.Fatal(err)
			}
			bulkOverrides(t, s, "l", 100000)
			s.forgetAll()
			check := func(key, capacity, override string) {
				t.Helper()
				d, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "l", Key: key}, Cost: num("1")}}, ledger.Idempotency{})
				if err != nil || !d.Accepted || d.Items[0].Capacity.String() != capacity || d.Limits[0].Override != override {
					t.Fatalf("Fillup %s: %+v %v, want capacity %s under %q", key, d, err, capacity, override)
				}
			}
			check("warm", "10", "") // loads the limit and its overrides
			log := &commandLog{}
			s.client.(interface{ AddHook(goredis.Hook) }).AddHook(log)
			for _, c := range []struct{ key, capacity, override string }{
				{"c000042", "50", "c000042"}, {"p000043-x", "50", "p000043-*"}, {"zz", "10", ""}, {"c000042", "50", "c000042"},
			} {
				check(c.key, c.capacity, c.override)
				if got := log.take(); !slices.Equal(got, []string{"fcall"}) {
					t.Errorf("Fillup of %s sent %v, want one fcall", c.key, got)
				}
			}
			s.mu.Lock()
			set := s.ovSets[s.limits["l"].gen]
			s.mu.Unlock()
			if _, err := svc.PutOverride(ctx, "l", ledger.Override{Pattern: "zz", Capacity: decimalOf("70")}); err != nil {
				t.Fatal(err)
			}
			log.take()
			check("zz", "70", "zz")
			got := log.take()
			if countOf(got, "hgetall") != 1 || countOf(got, "xrange") != 1 {
				t.Errorf("the decision after the change sent %v, want the definition and the change log read, not the overrides", got)
			}
			s.mu.Lock()
			same := s.ovSets[s.limits["l"].gen] == set
			s.mu.Unlock()
			if !same || set.len() != 100001 {
				t.Errorf("the change was not applied to the loaded set (same %v, %d overrides)", same, set.len())
			}
		})
	}
}

// TestOverrideExpiryByStoreClock: the end of a temporary raise is decided
// by the store's clock (Redis TIME), not budgetd's. With budgetd's view of
// that clock an hour ahead, Go resolves the raise as ended and passes the
// limit's terms guarded by the raise's expiry; the function, whose clock is
// before it, refuses them with its clock, and the decision is made again
// under the raise. On both set-ups.
func TestOverrideExpiryByStoreClock(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) {
			s := openTest(t, serverURL(t, env))
			ctx := context.Background()
			svc := ledger.NewService(s)
			if _, err := svc.PutLimit(ctx, "l", ledger.LimitSpec{Capacity: num("10"), LeakAmount: num("1"), LeakPer: time.Hour}); err != nil {
				t.Fatal(err)
			}
			now, err := s.client.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			until := now.Add(30 * time.Minute).Truncate(time.Microsecond)
			if _, err := svc.PutOverride(ctx, "l", ledger.Override{Pattern: "k", Capacity: decimalOf("100"), ExpiresAt: until}); err != nil {
				t.Fatal(err)
			}
			s.periodSkew.Store(int64(time.Hour))
			log := &commandLog{}
			s.client.(interface{ AddHook(goredis.Hook) }).AddHook(log)
			d, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "l", Key: "k"}, Cost: num("60")}}, ledger.Idempotency{})
			if err != nil || !d.Accepted || d.Items[0].Capacity.String() != "100" || d.Limits[0].Override != "k" {
				t.Fatalf("Fillup under the raise: %+v %v", d, err)
			}
			if n := countOf(log.take(), "fcall"); n != 2 {
				t.Errorf("%d function calls, want 2: the guarded one refused, then the raise", n)
			}
			if skew := time.Duration(s.periodSkew.Load()); skew > time.Minute || skew < -time.Minute {
				t.Errorf("budgetd's view of the store's clock is still off by %v", skew)
			}
		})
	}
}

func countOf(ss []string, s string) int {
	n := 0
	for _, x := range ss {
		if x == s {
			n++
		}
	}
	return n
}

// TestOverridesOneRoundTrip: decisions on keys under an exact override, a
// prefix override, a temporary one and none are one function call each,
// on both set-ups.
func TestOverridesOneRoundTrip(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) {
			s := openTest(t, serverURL(t, env), WithLimitCacheTTL(time.Hour))
			ctx := context.Background()
			svc := ledger.NewService(s)
			if _, err := svc.PutLimit(ctx, "l", ledger.LimitSpec{Capacity: num("10"), LeakAmount: num("1"), LeakPer: time.Hour, History: true}); err != nil {
				t.Fatal(err)
			}
			for _, o := range []ledger.Override{
				{Pattern: "{t}a", Capacity: decimalOf("20")},
				{Pattern: "{t}b*", Capacity: decimalOf("30")},
				{Pattern: "{t}c", Capacity: decimalOf("40"), ExpiresAt: time.Now().Add(time.Hour).Truncate(time.Microsecond)},
			} {
				if _, err := svc.PutOverride(ctx, "l", o); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := svc.CanAccept(ctx, ledger.BucketRef{Limit: "l", Key: "{t}a"}, num("1")); err != nil {
				t.Fatal(err)
			}
			log := &commandLog{}
			s.client.(interface{ AddHook(goredis.Hook) }).AddHook(log)
			for key, capacity := range map[string]string{"{t}a": "20", "{t}b1": "30", "{t}c": "40", "{t}d": "10"} {
				r := ledger.BucketRef{Limit: "l", Key: key}
				if d, err := svc.CanAccept(ctx, r, num("1")); err != nil || d.Capacity.String() != capacity {
					t.Fatalf("CanAccept %s: %+v %v", key, d, err)
				}
				if got := log.take(); !slices.Equal(got, []string{"fcall_ro"}) {
					t.Errorf("CanAccept %s sent %v", key, got)
				}
				if d, err := svc.Fillup(ctx, []ledger.Item{{Bucket: r, Cost: num("1")}}, ledger.Idempotency{Scope: "s", Key: key, Hash: "h"}); err != nil || d.Items[0].Capacity.String() != capacity {
					t.Fatalf("Fillup %s: %+v %v", key, d, err)
				}
				if got := log.take(); !slices.Equal(got, []string{"fcall"}) {
					t.Errorf("Fillup %s sent %v", key, got)
				}
			}
			items := []ledger.Item{{Bucket: ledger.BucketRef{Limit: "l", Key: "{t}a"}, Cost: num("1")}, {Bucket: ledger.BucketRef{Limit: "l", Key: "{t}b2"}, Cost: num("1")}}
			if res, err := svc.Fillup(ctx, items, ledger.Idempotency{}); err != nil || res.Items[1].Capacity.String() != "30" {
				t.Fatalf("multi-bucket Fillup: %+v %v", res, err)
			}
			if got := log.take(); !slices.Equal(got, []string{"fcall"}) {
				t.Errorf("multi-bucket Fillup sent %v", got)
			}
		})
	}
}

func decimalOf(s string) decimal.NullDecimal { return decimal.NewNullDecimal(num(s)) }

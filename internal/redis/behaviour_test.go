package redis

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"
)

// commandLog records the commands a client sends.
type commandLog struct {
	mu    sync.Mutex
	names []string
}

func (c *commandLog) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (c *commandLog) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.mu.Lock()
		c.names = append(c.names, strings.ToLower(cmd.Name()))
		c.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (c *commandLog) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.mu.Lock()
		for _, cmd := range cmds {
			c.names = append(c.names, strings.ToLower(cmd.Name()))
		}
		c.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (c *commandLog) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.names
	c.names = nil
	return out
}

// TestOneRoundTripPerDecision counts the commands of each operation: one
// FCALL (or FCALL_RO); Commit and Release first read the hold's bucket
// (HGET), whose keys the function needs in KEYS.
func TestOneRoundTripPerDecision(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) {
			s := openTest(t, serverURL(t, env), WithLimitCacheTTL(time.Hour))
			log := &commandLog{}
			s.client.(interface{ AddHook(goredis.Hook) }).AddHook(log)
			ctx := context.Background()
			svc := ledger.NewService(s)
			for _, n := range []string{"a", "b"} {
				if _, err := svc.PutLimit(ctx, n, ledger.LimitSpec{Capacity: decimal.NewFromInt(100), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Second, History: true,
					RecordDenials: true}); err != nil {
					t.Fatal(err)
				}
			}
			log.take()
			ra, rb := ledger.BucketRef{Limit: "a", Key: "{t}1"}, ledger.BucketRef{Limit: "b", Key: "{t}2"}
			one := func(what string, want ...string) {
				t.Helper()
				if got := log.take(); !slices.Equal(got, want) {
					t.Errorf("%s sent %v, want %v", what, got, want)
				}
			}
			idem := ledger.Idempotency{Scope: "fillup:a/{t}1", Key: "k", Hash: "h"}
			for round := 0; round < 2; round++ {
				if _, err := svc.CanAccept(ctx, ra, decimal.NewFromInt(1)); err != nil {
					t.Fatal(err)
				}
				one("CanAccept", "fcall_ro")
				if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ra, Cost: decimal.NewFromInt(1)}}, idem); err != nil {
					t.Fatal(err)
				}
				one("Fillup", "fcall")
				if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ra, Cost: decimal.NewFromInt(1)}, {Bucket: rb, Cost: decimal.NewFromInt(2)}}, ledger.Idempotency{}); err != nil {
					t.Fatal(err)
				}
				one("multi-bucket Fillup", "fcall")
				if res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ra, Cost: decimal.NewFromInt(1000)}}, ledger.Idempotency{}); err != nil || res.Accepted || res.EntryIDs[0] == "" {
					t.Fatalf("recorded denial: %+v %v", res, err)
				}
				one("recorded denial", "fcall")
				if _, err := svc.Drain(ctx, ra, decimal.NewFromInt(1), ledger.Idempotency{}, nil); err != nil {
					t.Fatal(err)
				}
				one("Drain", "fcall")
				res, err := svc.Reserve(ctx, ra, decimal.NewFromInt(5), time.Minute, ledger.Idempotency{}, nil)
				if err != nil {
					t.Fatal(err)
				}
				one("Reserve", "fcall")
				if _, err := svc.Commit(ctx, res.Reservation.ID, decimal.NullDecimal{}, false, ledger.Idempotency{}, nil); err != nil {
					t.Fatal(err)
				}
				one("Commit", "hget", "fcall")
				res, _ = svc.Reserve(ctx, ra, decimal.NewFromInt(5), time.Minute, ledger.Idempotency{}, nil)
				log.take()
				if _, err := svc.Release(ctx, res.Reservation.ID, ledger.Idempotency{}, nil); err != nil {
					t.Fatal(err)
				}
				one("Release", "hget", "fcall")
				if _, err := svc.Reservation(ctx, res.Reservation.ID); err != nil {
					t.Fatal(err)
				}
				one("Reservation", "fcall_ro")
				if _, _, err := svc.History(ctx, ra, "", 10); err != nil {
					t.Fatal(err)
				}
				one("History", "fcall")
			}
		})
	}
}

// TestCrossSlot: in Redis Cluster a multi-bucket call must keep its buckets in
// one slot; a key's {tag} (or an untagged key equal to the tag) does that.
func TestCrossSlot(t *testing.T) {
	t.Run("cluster", func(t *testing.T) { testCrossSlot(t, openTest(t, serverURL(t, "BUDGETD_TEST_REDIS_CLUSTER"))) })
	t.Run("standalone with WithSlotCheck", func(t *testing.T) {
		testCrossSlot(t, openTest(t, serverURL(t, "BUDGETD_TEST_REDIS"), WithSlotCheck()))
	})
	t.Run("standalone allows any keys", func(t *testing.T) {
		s := openTest(t, serverURL(t, "BUDGETD_TEST_REDIS"))
		svc := ledger.NewService(s)
		if _, err := svc.PutLimit(context.Background(), "l", ledger.LimitSpec{Capacity: decimal.NewFromInt(10), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Second}); err != nil {
			t.Fatal(err)
		}
		res, err := svc.Fillup(context.Background(), []ledger.Item{
			{Bucket: ledger.BucketRef{Limit: "l", Key: "u1"}, Cost: decimal.NewFromInt(1)},
			{Bucket: ledger.BucketRef{Limit: "l", Key: "u2"}, Cost: decimal.NewFromInt(1)},
		}, ledger.Idempotency{})
		if err != nil || !res.Accepted {
			t.Fatalf("untagged multi-bucket fillup on standalone: %+v %v", res, err)
		}
	})
}

func testCrossSlot(t *testing.T, s *Store) {
	ctx := context.Background()
	svc := ledger.NewService(s)
	for _, n := range []string{"user", "team"} {
		if _, err := svc.PutLimit(ctx, n, ledger.LimitSpec{Capacity: decimal.NewFromInt(100), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	item := func(l, k string) ledger.Item {
		return ledger.Item{Bucket: ledger.BucketRef{Limit: l, Key: k}, Cost: decimal.NewFromInt(1)}
	}
	_, err := svc.Fillup(ctx, []ledger.Item{item("user", "u1"), item("team", "u2")}, ledger.Idempotency{})
	if !errors.Is(err, ledger.ErrCrossSlot) {
		t.Fatalf("fillup over two slots: %v, want ErrCrossSlot", err)
	}
	res, err := svc.Fillup(ctx, []ledger.Item{item("user", "{acme}u1"), item("user", "{acme}u2"), item("team", "acme")}, ledger.Idempotency{})
	if err != nil || !res.Accepted {
		t.Fatalf("fillup within a tag: %+v %v", res, err)
	}
	if got := slotOf(s.k.bucket(1, "acme")); got != slotOf(s.k.bucket(7, "{acme}x")) {
		t.Fatalf("untagged key and tag in different slots: %d", got)
	}
}

func TestKeyEncoding(t *testing.T) {
	for _, k := range []string{"u1", "{t1}u1", "a}b", "{a}b}", "{}x", "x{", "}{a}", "a:b", "{"} {
		e := encodeKey(k)
		if back, ok := decodeKey(e); !ok || back != k {
			t.Errorf("decode(encode(%q)) = %q, %v", k, back, ok)
		}
	}
	if encodeKey("a}b") == encodeKey("{a}b}") {
		t.Error("two keys share an encoding")
	}
	for slot := 0; slot < 16384; slot += 97 {
		if got := slotOf("p:1:r:{" + slotTag(slot) + "}h1_0000"); got != slot {
			t.Fatalf("slotTag(%d) hashes to %d", slot, got)
		}
	}
	g, slot, ok := parseHoldID(holdID(42, 16383, strings.Repeat("ab", 12)))
	if !ok || g != 42 || slot != 16383 {
		t.Fatalf("parseHoldID = %d %d %v", g, slot, ok)
	}
	for _, bad := range []string{"h00000000000000000000000000", "nope", "h1_zzzz" + strings.Repeat("a", 24), "h1_4000" + strings.Repeat("a", 24)} {
		if _, _, ok := parseHoldID(bad); ok {
			t.Errorf("parseHoldID(%q) accepted", bad)
		}
	}
}

// TestTTLs: a bucket lives at least until it has leaked to zero and its holds
// have expired, and no bucket key is left without a TTL.
func TestTTLs(t *testing.T) {
	clock := ledgertest.NewClock()
	s := openTest(t, serverURL(t, "BUDGETD_TEST_REDIS"), WithClock(clock.Now))
	ctx := context.Background()
	svc := ledger.NewService(s)
	put := func(name, capacity, amount string, per time.Duration, hist bool) {
		if _, err := svc.PutLimit(ctx, name, ledger.LimitSpec{Capacity: decimal.RequireFromString(capacity), LeakAmount: decimal.RequireFromString(amount), LeakPer: per, History: hist}); err != nil {
			t.Fatal(err)
		}
	}
	pttl := func(name, key string) time.Duration {
		t.Helper()
		cl, err := s.limitFor(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		d, err := s.client.(goredis.Cmdable).PTTL(ctx, s.k.bucket(cl.gen, key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	fill := func(name, key, cost string) {
		t.Helper()
		if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: name, Key: key}, Cost: decimal.RequireFromString(cost)}}, ledger.Idempotency{}); err != nil {
			t.Fatal(err)
		}
	}
	put("fast", "10", "10", time.Millisecond, false)
	fill("fast", "k", "10")
	if d := pttl("fast", "k"); d <= 0 || d > 61*time.Second {
		t.Errorf("fast bucket PTTL %v, want about a minute (1ms to empty + margin)", d)
	}
	put("slow", "1000", "1", time.Hour, false)
	fill("slow", "k", "100") // empty in 100h
	if d := pttl("slow", "k"); d < 100*time.Hour || d > 101*time.Hour {
		t.Errorf("slow bucket PTTL %v, want just over 100h", d)
	}
	if _, err := svc.Reserve(ctx, ledger.BucketRef{Limit: "fast", Key: "h"}, decimal.NewFromInt(1), 20*time.Hour, ledger.Idempotency{}, nil); err != nil {
		t.Fatal(err)
	}
	if d := pttl("fast", "h"); d < 20*time.Hour+30*time.Second {
		t.Errorf("bucket with a 20h hold has PTTL %v", d)
	}
	put("hist", "10", "10", time.Millisecond, true)
	fill("hist", "k", "1")
	if d := pttl("hist", "k"); d < 30*24*time.Hour-time.Minute {
		t.Errorf("bucket with history has PTTL %v, want ≥ 30 days", d)
	}
	// A slower leak drops the TTLs computed with the faster one.
	put("fast", "10", "1", time.Hour, false)
	if d := pttl("fast", "k"); d != -1 {
		t.Errorf("after slowing the leak PTTL is %v, want none", d)
	}
	if _, err := svc.Drain(ctx, ledger.BucketRef{Limit: "fast", Key: "k"}, decimal.RequireFromString("0.5"), ledger.Idempotency{}, nil); err != nil {
		t.Fatal(err)
	}
	if d := pttl("fast", "k"); d < 9*time.Hour+30*time.Minute {
		t.Errorf("after a write at the slower leak PTTL is %v, want ≥ 9.5h (9.5 at 1/h)", d)
	}
	// Inspect writes nothing: the TTL keeps running.
	before := pttl("slow", "k")
	time.Sleep(5 * time.Millisecond)
	if _, err := svc.CanAccept(ctx, ledger.BucketRef{Limit: "slow", Key: "k"}, decimal.NewFromInt(1)); err != nil {
		t.Fatal(err)
	}
	if after := pttl("slow", "k"); after >= before {
		t.Errorf("CanAccept refreshed the TTL: %v then %v", before, after)
	}
}

// TestMemoryPerIdleBucket measures MEMORY USAGE of an idle bucket of a limit
// without history, with the default prefix and a typical key.
func TestMemoryPerIdleBucket(t *testing.T) {
	url := serverURL(t, "BUDGETD_TEST_REDIS")
	ctx := context.Background()
	s, err := Open(ctx, url) // default prefix "budgetd", as in production
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	svc := ledger.NewService(s)
	name := "mem-" + testPrefix()[3:]
	if _, err := svc.PutLimit(ctx, name, ledger.LimitSpec{Capacity: decimal.NewFromInt(1000), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Second}); err != nil {
		t.Fatal(err)
	}
	defer svc.DeleteLimit(ctx, name)
	var worst int64
	for _, cost := range []string{"1", "12.37", "999.999999"} {
		key := "user-" + testPrefix()[3:9]
		if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: name, Key: key}, Cost: decimal.RequireFromString(cost)}}, ledger.Idempotency{}); err != nil {
			t.Fatal(err)
		}
		cl, _ := s.limitFor(ctx, name)
		n, err := s.client.(goredis.Cmdable).MemoryUsage(ctx, s.k.bucket(cl.gen, key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("MEMORY USAGE of bucket %q (level %s): %d bytes", s.k.bucket(cl.gen, key), cost, n)
		worst = max(worst, n)
	}
	// For comparison: a bucket of a limit with history, after one fillup.
	hname := name + "-h"
	if _, err := svc.PutLimit(ctx, hname, ledger.LimitSpec{Capacity: decimal.NewFromInt(1000), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Second, History: true}); err != nil {
		t.Fatal(err)
	}
	defer svc.DeleteLimit(ctx, hname)
	key := "user-" + testPrefix()[3:9]
	if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: hname, Key: key}, Cost: decimal.RequireFromString("12.37")}}, ledger.Idempotency{}); err != nil {
		t.Fatal(err)
	}
	cl, _ := s.limitFor(ctx, hname)
	nb, _ := s.client.(goredis.Cmdable).MemoryUsage(ctx, s.k.bucket(cl.gen, key)).Result()
	nh, _ := s.client.(goredis.Cmdable).MemoryUsage(ctx, s.k.history(cl.gen, key)).Result()
	t.Logf("with history: bucket %d bytes + history with one entry %d bytes", nb, nh)
	if worst > 200 {
		t.Errorf("an idle bucket takes %d bytes, want ≤ 200", worst)
	}
}

// TestHoldAndLevelBounds: ledger.MaxHolds active holds per bucket, and an
// overrun commit may not lift a level past ledger.MaxLevel.
func TestHoldAndLevelBounds(t *testing.T) {
	clock := ledgertest.NewClock()
	s := openTest(t, serverURL(t, "BUDGETD_TEST_REDIS"), WithClock(clock.Now))
	ctx := context.Background()
	svc := ledger.NewService(s)
	if _, err := svc.PutLimit(ctx, "l", ledger.LimitSpec{Capacity: decimal.NewFromInt(10), LeakAmount: decimal.RequireFromString("0.000001"), LeakPer: 87600 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	r := ledger.BucketRef{Limit: "l", Key: "k"}
	if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: r, Cost: decimal.RequireFromString("9.999")}}, ledger.Idempotency{}); err != nil {
		t.Fatal(err)
	}
	tiny := decimal.RequireFromString("0.000001")
	ids := make([]string, 0, ledger.MaxHolds)
	for i := 0; i < ledger.MaxHolds; i++ {
		res, err := svc.Reserve(ctx, r, tiny, time.Hour, ledger.Idempotency{}, nil)
		if err != nil || !res.Decision.Accepted {
			t.Fatalf("hold %d: %+v %v", i, res.Decision, err)
		}
		ids = append(ids, res.Reservation.ID)
	}
	if _, err := svc.Reserve(ctx, r, tiny, time.Hour, ledger.Idempotency{}, nil); !errors.Is(err, ledger.ErrTooManyHolds) {
		t.Fatalf("hold %d: %v, want ErrTooManyHolds", ledger.MaxHolds+1, err)
	}
	huge := decimal.NewNullDecimal(decimal.New(1, 12))
	for i, id := range ids {
		_, err := svc.Commit(ctx, id, huge, true, ledger.Idempotency{}, nil)
		if i < len(ids)-1 && err != nil {
			t.Fatalf("overrun commit %d: %v", i, err)
		}
		if i == len(ids)-1 && !errors.Is(err, ledger.ErrLevelOverflow) {
			t.Fatalf("commit past 10^15: %v, want ErrLevelOverflow", err)
		}
	}
	st, err := svc.Bucket(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if want := bucket.MustAmount("999000000000009.999"); !st.Level.Equal(want) {
		t.Fatalf("level %s, want %s", st.Level, want)
	}
}

// TestLimitChangedByAnotherInstance: on a standalone server a script refuses
// to decide with a cached limit that another process has changed or deleted,
// so every instance sees a PUT or DELETE at once.
func TestLimitChangedByAnotherInstance(t *testing.T) {
	url := serverURL(t, "BUDGETD_TEST_REDIS")
	clock := ledgertest.NewClock()
	a := openTest(t, url, WithClock(clock.Now))
	b, err := Open(context.Background(), url, WithPrefix(a.k.prefix), WithClock(clock.Now), WithLimitCacheTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	sa, sb := ledger.NewService(a), ledger.NewService(b)
	spec := func(capacity int64) ledger.LimitSpec {
		return ledger.LimitSpec{Capacity: decimal.NewFromInt(capacity), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Hour}
	}
	if _, err := sa.PutLimit(ctx, "l", spec(10)); err != nil {
		t.Fatal(err)
	}
	r := ledger.BucketRef{Limit: "l", Key: "k"}
	fill := func(svc *ledger.Service, cost int64) (ledger.FillupResult, error) {
		return svc.Fillup(ctx, []ledger.Item{{Bucket: r, Cost: decimal.NewFromInt(cost)}}, ledger.Idempotency{})
	}
	if res, err := fill(sb, 5); err != nil || !res.Accepted { // b caches capacity 10
		t.Fatalf("first fillup: %+v %v", res, err)
	}
	if _, err := sa.PutLimit(ctx, "l", spec(6)); err != nil {
		t.Fatal(err)
	}
	res, err := fill(sb, 2)
	if err != nil || res.Accepted || !res.Items[0].Capacity.Equal(bucket.AmountOf(6)) {
		t.Fatalf("fillup of 2 on 5/6 through the other instance: %+v %v", res, err)
	}
	if err := sa.DeleteLimit(ctx, "l"); err != nil {
		t.Fatal(err)
	}
	if _, err := fill(sb, 1); !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Fatalf("fillup after delete elsewhere: %v, want ErrLimitNotFound", err)
	}
	if _, err := sb.CanAccept(ctx, r, decimal.NewFromInt(1)); !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Fatalf("can accept after delete elsewhere: %v, want ErrLimitNotFound", err)
	}
}

// TestClockStepBack: a bucket written while the clock was a month ahead is
// not locked out after the clock is corrected. Right after the correction
// it is still full (a clock going back leaks nothing), and from then on it
// leaks from the corrected now, on the single-bucket, multi-bucket and
// reserve paths, on standalone Redis and on Redis Cluster, with history
// and without (a single-bucket Fillup then takes fillup_lean).
func TestClockStepBack(t *testing.T) {
	for _, tc := range []struct {
		env  string
		hist bool
	}{{"BUDGETD_TEST_REDIS", true}, {"BUDGETD_TEST_REDIS_CLUSTER", true}, {"BUDGETD_TEST_REDIS", false}, {"BUDGETD_TEST_REDIS_CLUSTER", false}} {
		env := tc.env
		name := env
		if !tc.hist {
			name += "_no_history"
		}
		t.Run(name, func(t *testing.T) {
			clock := ledgertest.NewClock()
			var logged bytes.Buffer // written by the calls below, on this goroutine
			s := openTest(t, serverURL(t, env), WithClock(clock.Now), WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
			ctx := context.Background()
			if _, err := s.PutLimit(ctx, ledger.Limit{Name: "c", Capacity: decimal.RequireFromString("10"), LeakAmount: decimal.RequireFromString("1"), LeakPer: time.Second, History: tc.hist}); err != nil {
				t.Fatal(err)
			}
			ref := func(key string) ledger.BucketRef { return ledger.BucketRef{Limit: "c", Key: "{t}" + key} }
			one := func(key, cost string) []ledger.Charge {
				return []ledger.Charge{{Bucket: ref(key), Cost: decimal.RequireFromString(cost)}}
			}
			fill := func(items []ledger.Charge) bool {
				t.Helper()
				out, err := s.Fillup(ctx, items, ledger.Idempotency{})
				if err != nil {
					t.Fatal(err)
				}
				return out.Accepted
			}
			reserve := func() bool {
				t.Helper()
				r, err := s.Reserve(ctx, ref("res"), decimal.RequireFromString("1"), time.Minute, ledger.Idempotency{}, nil)
				if err != nil {
					t.Fatal(err)
				}
				return r.Accepted
			}
			t0 := clock.Now()
			clock.Set(t0.Add(30 * 24 * time.Hour)) // the clock jumps ahead
			for _, k := range []string{"single", "m1", "m2", "res"} {
				if !fill(one(k, "10")) {
					t.Fatalf("fill %s denied", k)
				}
			}
			clock.Set(t0) // and is corrected
			multi := append(one("m1", "1"), one("m2", "1")...)
			if fill(one("single", "1")) || fill(multi) || reserve() {
				t.Fatal("a full bucket accepted right after the correction")
			}
			clock.Advance(2 * time.Second)
			if !fill(one("single", "1")) {
				t.Error("single-bucket path: still locked out 2s after the correction")
			}
			if !fill(multi) {
				t.Error("multi-bucket path: still locked out 2s after the correction")
			}
			if !reserve() {
				t.Error("reserve: still locked out 2s after the correction")
			}
			// Every call that found a stored time a month ahead was counted:
			// the single, the multi-bucket and the reserve right after the
			// correction (each denied, so each bucket was unstepped then).
			if n := s.Stats().ClockSteps; n != 3 {
				t.Errorf("%d clock steps counted, want 3", n)
			}
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(s.Collector())
			mfs, err := reg.Gather()
			if err != nil || len(mfs) != 1 || mfs[0].GetName() != "budgetd_redis_clock_steps_total" ||
				mfs[0].GetMetric()[0].GetCounter().GetValue() != 3 {
				t.Errorf("the store's metrics = %v, %v; want budgetd_redis_clock_steps_total 3", mfs, err)
			}
			// The warning says what happened without the bucket keys (often
			// user ids or addresses; issue 29).
			if n := strings.Count(logged.String(), "clock was stepped back"); n != 3 {
				t.Errorf("%d clock-step warnings logged, want 3:\n%s", n, logged.String())
			}
			if strings.Contains(logged.String(), "{t}") {
				t.Errorf("a clock-step warning names bucket keys:\n%s", logged.String())
			}
			// A small step back keeps the stored time: no leak until the
			// clock catches up, and no step reported.
			clock.Set(clock.Now().Add(-10 * time.Second))
			if fill(one("single", "2")) {
				t.Error("a 10s step back leaked: a full bucket accepted 2")
			}
			if n := s.Stats().ClockSteps; n != 3 {
				t.Errorf("%d clock steps counted after a 10s step back, want still 3", n)
			}
		})
	}
}

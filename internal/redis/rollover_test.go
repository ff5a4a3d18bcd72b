package redis

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	goredis "github.com/redis/go-redis/v9"
)

// TestRolloverKeepsTheBucket: a written bucket of a daily limit with
// rollover has no TTL, though its level ends with the day a minute away,
// and keeps its carry (field r) once written in the next day; with max 0,
// or without rollover, it gets the periodic TTL (the day's end plus the
// minute). On both set-ups.
func TestRolloverKeepsTheBucket(t *testing.T) {
	eachServer(t, func(t *testing.T, url string) {
		clock := ledgertest.NewClock()
		clock.Set(time.Date(2026, 11, 10, 23, 59, 0, 0, time.UTC))
		s := openTest(t, url, WithClock(clock.Now))
		ctx := context.Background()
		svc := ledger.NewService(s)
		day := &ledger.Period{Every: "day"}
		for name, r := range map[string]*ledger.Rollover{"ro": {Max: num("30")}, "zero": {Max: num("0")}, "none": nil} {
			if _, err := svc.PutLimit(ctx, name, ledger.LimitSpec{Capacity: num("100"), Period: day, Rollover: r}); err != nil {
				t.Fatal(err)
			}
		}
		pttl := func(limit string) (time.Duration, []string) {
			t.Helper()
			cl, err := s.limitFor(ctx, limit)
			if err != nil {
				t.Fatal(err)
			}
			bk := s.k.bucket(cl.gen, "k")
			d, err := s.client.PTTL(ctx, bk).Result()
			if err != nil {
				t.Fatal(err)
			}
			fields, err := s.client.HKeys(ctx, bk).Result()
			if err != nil {
				t.Fatal(err)
			}
			return d, fields
		}
		fill := func(limit, cost string) {
			t.Helper()
			res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: limit, Key: "k"}, Cost: num(cost)}}, ledger.Idempotency{})
			if err != nil || !res.Accepted {
				t.Fatalf("Fillup %s %s: %+v %v", limit, cost, res, err)
			}
		}
		for _, l := range []string{"ro", "zero", "none"} {
			fill(l, "40")
		}
		if d, _ := pttl("ro"); d != -1 {
			t.Errorf("a bucket that passes rollover on has PTTL %v, want none", d)
		}
		for _, l := range []string{"zero", "none"} {
			if d, _ := pttl(l); d <= 0 || d > 3*time.Minute {
				t.Errorf("limit %s: PTTL %v, want the day's end plus the minute", l, d)
			}
		}
		// The next day: 60 unused, 30 received, kept with the bucket.
		clock.Set(time.Date(2026, 11, 11, 9, 0, 0, 0, time.UTC))
		fill("ro", "1")
		d, fields := pttl("ro")
		if d != -1 {
			t.Errorf("after the next day's write: PTTL %v, want none", d)
		}
		if !slices.Contains(fields, "r") {
			t.Errorf("fields %v: the carry r is not kept", fields)
		}
		// Two days later (the 12th untouched): the whole max again.
		clock.Set(time.Date(2026, 11, 13, 9, 0, 0, 0, time.UTC))
		st, err := svc.Bucket(ctx, ledger.BucketRef{Limit: "ro", Key: "k"})
		if err != nil || st.Capacity.String() != "130" || st.Rollover.String() != "30" {
			t.Fatalf("after an untouched day: %+v %v", st, err)
		}
	})
}

// TestRolloverGrantBound: the bound on a bucket's grants (capacity +
// grants at most 10^12) does not count the rollover it receives, which
// still adds to the capacity, as on PostgreSQL. On both set-ups.
func TestRolloverGrantBound(t *testing.T) {
	eachServer(t, func(t *testing.T, url string) {
		clock := ledgertest.NewClock()
		s := openTest(t, url, WithClock(clock.Now))
		ledgertest.RolloverGrantBound(t, s, clock)
	})
}

// TestRolloverOneRoundTrip: on a bucket that receives rollover (last
// written in the month before), CanAccept, Fillup, a multi-bucket Fillup
// and the bucket's state are one function call each. On both set-ups.
func TestRolloverOneRoundTrip(t *testing.T) {
	eachServer(t, func(t *testing.T, url string) {
		clock := ledgertest.NewClock()
		clock.Set(time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC))
		s := openTest(t, url, WithClock(clock.Now), WithLimitCacheTTL(time.Hour))
		ctx := context.Background()
		svc := ledger.NewService(s)
		spec := ledger.LimitSpec{Capacity: num("100"), Period: &ledger.Period{Every: "month"}, Rollover: &ledger.Rollover{Max: num("30")}}
		if _, err := svc.PutLimit(ctx, "m", spec); err != nil {
			t.Fatal(err)
		}
		ra, rb := ledger.BucketRef{Limit: "m", Key: "{t}a"}, ledger.BucketRef{Limit: "m", Key: "{t}b"}
		for _, r := range []ledger.BucketRef{ra, rb} {
			if res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: r, Cost: num("40")}}, ledger.Idempotency{}); err != nil || !res.Accepted {
				t.Fatalf("Fillup: %+v %v", res, err)
			}
		}
		clock.Set(time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC))
		log := &commandLog{}
		s.client.(interface{ AddHook(goredis.Hook) }).AddHook(log)
		one := func(what string, want ...string) {
			t.Helper()
			if got := log.take(); !slices.Equal(got, want) {
				t.Errorf("%s sent %v, want %v", what, got, want)
			}
		}
		if d, err := svc.CanAccept(ctx, ra, num("130")); err != nil || !d.Accepted {
			t.Fatalf("CanAccept: %+v %v", d, err)
		}
		one("CanAccept", "fcall_ro")
		if st, err := svc.Bucket(ctx, ra); err != nil || st.Rollover.String() != "30" {
			t.Fatalf("Bucket: %+v %v", st, err)
		}
		one("Bucket", "fcall_ro")
		if res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ra, Cost: num("130")}}, ledger.Idempotency{}); err != nil || !res.Accepted {
			t.Fatalf("Fillup: %+v %v", res, err)
		}
		one("Fillup", "fcall")
		res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ra, Cost: num("0")}, {Bucket: rb, Cost: num("130")}}, ledger.Idempotency{})
		if err != nil || !res.Accepted || res.Items[1].Capacity.String() != "130" {
			t.Fatalf("multi-bucket Fillup: %+v %v", res, err)
		}
		one("multi-bucket Fillup", "fcall")
	})
}

// TestRolloverOverrideAtEnd: the capacity in force at a month's end is the
// override's that applied at its last microsecond: a raise "until the end
// of the month" (expires_at the next month's first instant) counts, one
// that ended a microsecond earlier does not (neither applies now).
// On both set-ups.
func TestRolloverOverrideAtEnd(t *testing.T) {
	eachServer(t, func(t *testing.T, url string) {
		clock := ledgertest.NewClock()
		s := openTest(t, url, WithClock(clock.Now))
		ledgertest.RolloverOverrideAtEnd(t, s, clock)
	})
}

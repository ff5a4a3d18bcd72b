package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// Factory builds a fresh, empty store whose clock is clock.Now. It registers
// its own cleanup with t.
type Factory func(t *testing.T, clock *Clock) ledger.Store

// Run runs the whole conformance suite against the stores that factory
// builds. Every test gets a fresh store and its own pinned clock.
func Run(t *testing.T, factory Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"Limits", testLimits},
		{"LimitUpdateKeepsBuckets", testLimitUpdateKeepsBuckets},
		{"LimitUpdateUpdatedAt", testLimitUpdateUpdatedAt},
		{"DeleteLimitStartsEmpty", testDeleteLimitStartsEmpty},
		{"SeedScenario", testSeedScenario},
		{"Steps", testSteps},
		{"CanAcceptWritesNothing", testCanAcceptWritesNothing},
		{"DeniedChangesNothing", testDeniedChangesNothing},
		{"Exactness", testExactness},
		{"Magnitudes", testMagnitudes},
		{"ConcurrentFillups", testConcurrentFillups},
		{"ConcurrentDifferential", testConcurrentDifferential},
		{"Drain", testDrain},
		{"MultiBucket", testMultiBucket},
		{"MultiBucketConcurrent", testMultiBucketConcurrent},
		{"Holds", testHolds},
		{"HoldExpiry", testHoldExpiry},
		{"HoldResolvesOnce", testHoldResolvesOnce},
		{"HoldRace", testHoldRace},
		{"History", testHistory},
		{"HistoryOff", testHistoryOff},
		{"HistoryReplay", testHistoryReplay},
		{"Idempotency", testIdempotency},
		{"IdempotencyParallel", testIdempotencyParallel},
		{"NotFound", testNotFound},
		{"Differential", testDifferential},
		{"Golden", testGolden},
		{"Meta", testMeta},
		{"MetaEvents", testMetaEvents},
		{"LevelOverflow", testLevelOverflow},
		{"Listing", testListing},
		{"NearCap", testNearCap},
		{"Counts", testCounts},
		{"ListKinds", testListKinds},
		{"Periods", testPeriods},
		{"PeriodsMultiBucket", testPeriodsMultiBucket},
		{"PeriodsSwitchKind", testPeriodsSwitchKind},
		{"PeriodsConcurrent", testPeriodsConcurrent},
		{"RecordDenials", testRecordDenials},
		{"MultiBucketMixedKinds", testMultiBucketMixedKinds},
		{"Modes", testModes},
		{"ShadowRecorded", testShadowRecorded},
		{"Thresholds", testThresholds},
		{"ThresholdsConcurrent", testThresholdsConcurrent},
		{"BucketEvents", testBucketEvents},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewClock()
			store := factory(t, clock)
			tc.fn(t, &env{t: t, clock: clock, store: store, svc: ledger.NewService(store), ctx: context.Background()})
		})
	}
	t.Run("Matrix", func(t *testing.T) { testMatrix(t, factory) })
	t.Run("Overrides", func(t *testing.T) { RunOverrides(t, factory) })
	t.Run("Grants", func(t *testing.T) { RunGrants(t, factory) })
	t.Run("Rollover", func(t *testing.T) { RunRollover(t, factory) })
	t.Run("TermsDifferential", func(t *testing.T) { testTermsDifferential(t, factory) })
}

// env is one test's store, service and clock, with helpers that fail the
// test on unexpected errors.
type env struct {
	t     *testing.T
	clock *Clock
	store ledger.Store
	svc   *ledger.Service
	ctx   context.Context
}

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func (e *env) limit(name, capacity, amount string, per time.Duration, history bool) {
	e.t.Helper()
	_, err := e.svc.PutLimit(e.ctx, name, ledger.LimitSpec{Capacity: dec(capacity), LeakAmount: dec(amount), LeakPer: per, History: history})
	if err != nil {
		e.t.Fatalf("PutLimit(%s): %v", name, err)
	}
}

func ref(limit, key string) ledger.BucketRef { return ledger.BucketRef{Limit: limit, Key: key} }

func (e *env) fillup(r ledger.BucketRef, cost string) bucket.Decision {
	e.t.Helper()
	res, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: r, Cost: dec(cost)}}, ledger.Idempotency{})
	if err != nil {
		e.t.Fatalf("Fillup(%v, %s): %v", r, cost, err)
	}
	return res.Items[0]
}

func (e *env) can(r ledger.BucketRef, cost string) bucket.Decision {
	e.t.Helper()
	d, err := e.svc.CanAccept(e.ctx, r, dec(cost))
	if err != nil {
		e.t.Fatalf("CanAccept(%v, %s): %v", r, cost, err)
	}
	return d
}

func (e *env) state(r ledger.BucketRef) ledger.BucketState {
	e.t.Helper()
	st, err := e.svc.Bucket(e.ctx, r)
	if err != nil {
		e.t.Fatalf("Bucket(%v): %v", r, err)
	}
	return st
}

func (e *env) reserve(r ledger.BucketRef, amount string, ttl time.Duration) ledger.ReserveResult {
	e.t.Helper()
	res, err := e.svc.Reserve(e.ctx, r, dec(amount), ttl, ledger.Idempotency{}, nil)
	if err != nil {
		e.t.Fatalf("Reserve(%v, %s): %v", r, amount, err)
	}
	return res
}

// eq fails unless got equals want as decimals (want given as a string).
// eq checks an amount (a decimal, a bucket.Amount, or a bucket.Micros in
// seconds) against the decimal want.
func eq(t *testing.T, what string, got fmt.Stringer, want string) {
	t.Helper()
	if g, err := decimal.NewFromString(got.String()); err != nil || !g.Equal(dec(want)) {
		t.Errorf("%s = %s, want %s", what, got, want)
	}
}

func refusal(err error) string {
	var r *ledger.Refusal
	if errors.As(err, &r) {
		return r.Code
	}
	return ""
}

func testLimits(t *testing.T, e *env) {
	for _, n := range []string{"c", "a", "b"} {
		e.limit(n, "10", "1", time.Second, true)
	}
	l, err := e.svc.GetLimit(e.ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "capacity", l.Capacity, "10")
	if l.LeakPer != time.Second || !l.History || l.CreatedAt.IsZero() {
		t.Errorf("limit read back as %+v", l)
	}
	created := l.CreatedAt
	e.clock.Advance(time.Minute)
	e.limit("a", "20.5", "2", time.Hour, false)
	l, _ = e.svc.GetLimit(e.ctx, "a")
	eq(t, "capacity after update", l.Capacity, "20.5")
	if !l.CreatedAt.Equal(created) || !l.UpdatedAt.Equal(e.clock.Now()) || l.History || l.LeakPer != time.Hour {
		t.Errorf("updated limit = %+v (created %v, now %v)", l, created, e.clock.Now())
	}
	page, err := e.svc.ListLimits(e.ctx, "", 2)
	if err != nil || len(page) != 2 || page[0].Name != "a" || page[1].Name != "b" {
		t.Fatalf("first page = %v, %v", page, err)
	}
	page, _ = e.svc.ListLimits(e.ctx, "b", 2)
	if len(page) != 1 || page[0].Name != "c" {
		t.Fatalf("second page = %v", page)
	}
	if err := e.svc.DeleteLimit(e.ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.GetLimit(e.ctx, "b"); !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Errorf("GetLimit after delete: %v, want ErrLimitNotFound", err)
	}
	if err := e.svc.DeleteLimit(e.ctx, "b"); !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Errorf("second delete: %v, want ErrLimitNotFound", err)
	}
}

func testLimitUpdateKeepsBuckets(t *testing.T, e *env) {
	e.limit("l", "10", "1", time.Hour, true)
	r := ref("l", "k")
	e.fillup(r, "8")
	res := e.reserve(r, "1", time.Minute)
	if !res.Decision.Accepted {
		t.Fatal("reserve denied")
	}
	e.limit("l", "5", "1", time.Hour, true) // lower than used
	st := e.state(r)
	eq(t, "level", st.Level, "8")
	eq(t, "held", st.Held, "1")
	eq(t, "remaining", st.Remaining, "0")
	eq(t, "capacity", st.Capacity, "5")
	if d := e.fillup(r, "0.000001"); d.Accepted {
		t.Error("fillup accepted over a lowered capacity")
	}

	// A new leak rate applies from the PUT on: the time before it leaks at
	// the old rate, whenever the bucket is next written.
	e.limit("rate", "100", "1", time.Second, true)
	fast, idle := ref("rate", "fast"), ref("rate", "idle")
	e.fillup(fast, "50")
	e.fillup(idle, "50")
	e.clock.Advance(2 * time.Second)
	e.limit("rate", "100", "1", time.Hour, true) // slower
	eq(t, "level kept across a rate change", e.state(fast).Level, "48")
	e.clock.Advance(time.Hour)
	eq(t, "level an hour after the change", e.state(fast).Level, "47")
	e.limit("rate", "100", "3600", time.Second, true) // much faster
	eq(t, "level kept across a second change", e.state(idle).Level, "47")
	e.clock.Advance(10 * time.Millisecond)
	eq(t, "level after the second change", e.state(idle).Level, "11")
}

// testLimitUpdateUpdatedAt: a PUT that changes the leak rate writes exactly
// the buckets whose stored level is positive (level leaked to the PUT's
// instant at the old rate, updated_at moved to it); a bucket whose stored
// level is zero, such as one holding only reservations, is not written and
// keeps its updated_at. A PUT that keeps the rate writes no bucket.
func testLimitUpdateUpdatedAt(t *testing.T, e *env) {
	e.limit("ua", "100", "1", time.Second, true)
	held, charged, leaked := ref("ua", "held"), ref("ua", "charged"), ref("ua", "leaked")
	t0 := e.clock.Now()
	if res := e.reserve(held, "10", time.Hour); !res.Decision.Accepted {
		t.Fatal("reserve denied")
	}
	e.fillup(charged, "50")
	e.fillup(leaked, "1")
	e.clock.Advance(2 * time.Second)
	t1 := e.clock.Now()
	e.limit("ua", "100", "1", time.Hour, true) // the rate changes
	check := func(when string, r ledger.BucketRef, level string, updated time.Time) {
		t.Helper()
		st := e.state(r)
		eq(t, when+" "+r.Key+" level", st.Level, level)
		if !st.UpdatedAt.Equal(updated) {
			t.Errorf("%s %s: updated_at = %v, want %v", when, r.Key, st.UpdatedAt, updated)
		}
	}
	check("after the rate change", held, "0", t0)
	eq(t, "held after the rate change", e.state(held).Held, "10")
	check("after the rate change", charged, "48", t1)
	check("after the rate change", leaked, "0", t1)
	e.clock.Advance(time.Second)
	e.limit("ua", "200", "1", time.Hour, false) // the rate stays
	check("after a capacity change", held, "0", t0)
	check("after a capacity change", charged, "47.999722222223", t1) // 48 − floor(1/3600)
	check("after a capacity change", leaked, "0", t1)
}

func testDeleteLimitStartsEmpty(t *testing.T, e *env) {
	e.limit("l", "10", "1", time.Hour, true)
	r := ref("l", "k")
	e.fillup(r, "8")
	hold := e.reserve(r, "1", time.Minute)
	charged := []ledger.Item{{Bucket: r, Cost: dec("0.5")}}
	if res, err := e.svc.Fillup(e.ctx, charged, idem("before-delete", "h")); err != nil || !res.Accepted {
		t.Fatalf("fillup with a key: %+v %v", res, err)
	}
	if err := e.svc.DeleteLimit(e.ctx, "l"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: r, Cost: dec("1")}}, ledger.Idempotency{}); !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Errorf("fillup on deleted limit: %v", err)
	}
	e.limit("l", "10", "1", time.Hour, true)
	st := e.state(r)
	eq(t, "level after re-create", st.Level, "0")
	eq(t, "held after re-create", st.Held, "0")
	if !st.UpdatedAt.IsZero() {
		t.Errorf("updated_at after re-create = %v, want never written", st.UpdatedAt)
	}
	if _, err := e.svc.Reservation(e.ctx, hold.Reservation.ID); !errors.Is(err, ledger.ErrReservationNotFound) {
		t.Errorf("hold after delete: %v, want ErrReservationNotFound", err)
	}
	entries, _, err := e.svc.History(e.ctx, r, "", 100)
	if err != nil || len(entries) != 0 {
		t.Errorf("history after re-create = %v, %v", entries, err)
	}
	// Idempotency records went with the limit: the same key charges anew.
	res, err := e.svc.Fillup(e.ctx, charged, idem("before-delete", "h"))
	if err != nil || res.Replayed || !res.Accepted {
		t.Fatalf("key used before the delete: %+v %v", res, err)
	}
	eq(t, "level charged after re-create", res.Items[0].Level, "0.5")
}

// testSeedScenario: capacity 10, leak 1/s: 10 accepted, the 11th denied, 4
// more after 4 s.
func testSeedScenario(t *testing.T, e *env) {
	e.limit("seed", "10", "1", time.Second, true)
	r := ref("seed", "user-1")
	for i := 0; i < 10; i++ {
		if d := e.fillup(r, "1"); !d.Accepted {
			t.Fatalf("fillup %d denied", i+1)
		}
	}
	d := e.fillup(r, "1")
	if d.Accepted || d.NeverFits {
		t.Fatalf("11th fillup: %+v, want denied", d)
	}
	eq(t, "retry_after", d.RetryAfter, "1")
	eq(t, "level", d.Level, "10")
	eq(t, "remaining", d.Remaining, "0")
	e.clock.Advance(4 * time.Second)
	for i := 0; i < 4; i++ {
		if d := e.fillup(r, "1"); !d.Accepted {
			t.Fatalf("fillup %d after 4s denied", i+1)
		}
	}
	if d := e.fillup(r, "1"); d.Accepted {
		t.Fatal("5th fillup after 4s accepted")
	}
}

// testSteps is a step table of (clock move, op, amount → accepted, level,
// retry_after) on one bucket.
func testSteps(t *testing.T, e *env) {
	type step struct {
		advance  time.Duration
		op       string // fillup, can
		amount   string
		accepted bool
		level    string
		retry    string // "" for zero
		never    bool
	}
	cases := []struct {
		name           string
		capacity, leak string
		per            time.Duration
		steps          []step
	}{
		{"idle time is no credit", "10", "1", time.Second, []step{
			{0, "fillup", "5", true, "5", "", false},
			{100 * time.Second, "fillup", "10", true, "10", "", false},
			{0, "fillup", "0.5", false, "10", "0.5", false},
		}},
		{"retry rounds up to the microsecond", "10", "3", time.Second, []step{
			{0, "fillup", "10", true, "10", "", false},
			{0, "can", "1", false, "10", "0.333334", false},
			{333333 * time.Microsecond, "can", "1", false, "9.000001", "0.000001", false},
			{time.Microsecond, "fillup", "1", true, "9.999998", "", false},
		}},
		{"leak rounds down to 12 digits", "5000.00", "5000.00", 720 * time.Hour, []step{
			{0, "fillup", "12.37", true, "12.37", "", false},
			{time.Hour, "can", "0", true, "5.425555555556", "", false},
			{time.Hour, "fillup", "0.01", true, "0.01", "", false},
		}},
		{"never fits", "10", "1", time.Second, []step{
			{0, "can", "10.000001", false, "0", "", true},
			{0, "fillup", "11", false, "0", "", true},
			{0, "fillup", "10", true, "10", "", false},
		}},
		{"cost 0 is accepted over capacity", "10", "1", time.Hour, []step{
			{0, "fillup", "10", true, "10", "", false},
			{0, "fillup", "0", true, "10", "", false},
			{0, "can", "0", true, "10", "", false},
		}},
		{"a clock going back leaks nothing", "10", "1", time.Second, []step{
			{0, "fillup", "5", true, "5", "", false},
			{-10 * time.Second, "can", "0", true, "5", "", false},
			{0, "fillup", "1", true, "6", "", false},
			{11 * time.Second, "can", "0", true, "5", "", false},
			{4 * time.Second, "fillup", "6", true, "7", "", false},
			{0, "can", "4", false, "7", "1", false},
		}},
		{"leak clamps at zero before adding", "1", "1", time.Microsecond, []step{
			{0, "fillup", "1", true, "1", "", false},
			{time.Hour, "fillup", "1", true, "1", "", false},
			{0, "can", "0.5", false, "1", "0.000001", false},
		}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := fmt.Sprintf("steps-%d", i)
			e.limit(name, c.capacity, c.leak, c.per, false)
			r := ref(name, "k")
			for j, s := range c.steps {
				e.clock.Advance(s.advance)
				var d bucket.Decision
				if s.op == "fillup" {
					d = e.fillup(r, s.amount)
				} else {
					d = e.can(r, s.amount)
				}
				if d.Accepted != s.accepted || d.NeverFits != s.never {
					t.Fatalf("step %d (%s %s): accepted=%v never=%v, want %v %v", j, s.op, s.amount, d.Accepted, d.NeverFits, s.accepted, s.never)
				}
				eq(t, fmt.Sprintf("step %d level", j), d.Level, s.level)
				want := s.retry
				if want == "" {
					want = "0"
				}
				eq(t, fmt.Sprintf("step %d retry_after", j), d.RetryAfter, want)
			}
		})
	}
}

func testCanAcceptWritesNothing(t *testing.T, e *env) {
	e.limit("l", "10", "1", time.Second, true)
	r := ref("l", "k")
	for i := 0; i < 20; i++ {
		e.can(r, "3")
	}
	if st := e.state(r); !st.UpdatedAt.IsZero() {
		t.Fatalf("CanAccept wrote the bucket: updated_at %v", st.UpdatedAt)
	}
	e.fillup(r, "10")
	written := e.state(r).UpdatedAt
	for i := 0; i < 50; i++ {
		e.clock.Advance(10 * time.Millisecond)
		e.can(r, "1")
	}
	if st := e.state(r); !st.UpdatedAt.Equal(written) {
		t.Fatalf("updated_at moved from %v to %v after CanAccepts", written, st.UpdatedAt)
	}
	// The answers after many CanAccepts equal those of an untouched twin.
	e.limit("twin", "10", "1", time.Second, true)
	e.clock.Advance(-500 * time.Millisecond)
	tw := ref("twin", "k")
	e.fillup(tw, "10")
	e.clock.Advance(500 * time.Millisecond)
	a, b := e.fillup(r, "0.7"), e.fillup(tw, "0.7")
	if a.Accepted != b.Accepted || !a.Level.Equal(b.Level) || !a.RetryAfter.Equal(b.RetryAfter) {
		t.Fatalf("after CanAccepts %+v, untouched twin %+v", a, b)
	}
}

func testDeniedChangesNothing(t *testing.T, e *env) {
	e.limit("l", "10", "1", time.Second, true)
	r := ref("l", "k")
	e.fillup(r, "9")
	before := e.state(r)
	e.clock.Advance(100 * time.Millisecond)
	if d := e.fillup(r, "5"); d.Accepted {
		t.Fatal("fillup of 5 on 8.9 accepted")
	}
	after := e.state(r)
	if !after.UpdatedAt.Equal(before.UpdatedAt) {
		t.Errorf("denied fillup moved updated_at from %v to %v", before.UpdatedAt, after.UpdatedAt)
	}
	if res := e.reserve(r, "5", time.Minute); res.Decision.Accepted {
		t.Fatal("reserve of 5 on 8.9 accepted")
	}
	eq(t, "held after denied reserve", e.state(r).Held, "0")
	entries, _, _ := e.svc.History(e.ctx, r, "", 10)
	if len(entries) != 1 {
		t.Errorf("history has %d entries, want only the accepted fillup", len(entries))
	}
}

func testExactness(t *testing.T, e *env) {
	e.limit("l", "1000", "1", time.Hour, false)
	r := ref("l", "k")
	for i := 0; i < 1000; i++ {
		if d := e.fillup(r, "0.1"); !d.Accepted {
			t.Fatalf("fillup %d denied", i)
		}
	}
	eq(t, "level after 1000 × 0.1", e.state(r).Level, "100")
}

func testMagnitudes(t *testing.T, e *env) {
	e.limit("big", "1000000000000", "0.000001", 87600*time.Hour, false)
	r := ref("big", "k")
	d := e.fillup(r, "999999999999.999999")
	if !d.Accepted {
		t.Fatal("fillup of capacity - 0.000001 denied")
	}
	eq(t, "level", d.Level, "999999999999.999999")
	if d := e.fillup(r, "0.000001"); !d.Accepted {
		t.Fatal("last micro-unit denied")
	}
	d = e.fillup(r, "0.000001")
	if d.Accepted || d.NeverFits {
		t.Fatalf("fillup on a full bucket: %+v", d)
	}
	// 0.000001 leaks in 87600h: retry is exactly that.
	eq(t, "retry_after", d.RetryAfter, "315360000")
	e.clock.Advance(24 * time.Hour)
	// leaked = 0.000001 × 86400e6 / 315360000e6 = 0.000000000273972602..., floor to 12 digits.
	eq(t, "level after a day", e.state(r).Level, "999999999999.999999999727")

	e.limit("fast", "1000000000000", "1000000000000", time.Microsecond, false)
	f := ref("fast", "k")
	e.fillup(f, "1000000000000")
	e.clock.Advance(time.Microsecond)
	eq(t, "level after 1µs at 10^12/µs", e.state(f).Level, "0")
}

// testConcurrentFillups: with time frozen, capacity C and cost c, exactly
// ⌊C/c⌋ of many concurrent Fillups succeed.
func testConcurrentFillups(t *testing.T, e *env) {
	e.limit("hot", "100", "1", time.Hour, true)
	r := ref("hot", "k")
	const n = 200
	var accepted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: r, Cost: dec("7")}}, ledger.Idempotency{})
			if err != nil {
				errs <- err
				return
			}
			if res.Accepted {
				accepted.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := accepted.Load(); got != 14 {
		t.Fatalf("%d of %d concurrent fillups of 7 into 100 accepted, want 14", got, n)
	}
	eq(t, "level", e.state(r).Level, "98")
}

func testDrain(t *testing.T, e *env) {
	e.limit("l", "10", "1", time.Hour, true)
	r := ref("l", "k")
	e.fillup(r, "5")
	res, err := e.svc.Drain(e.ctx, r, dec("3"), ledger.Idempotency{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "removed", res.Removed, "3")
	eq(t, "level", res.Bucket.Level, "2")
	res, _ = e.svc.Drain(e.ctx, r, dec("5"), ledger.Idempotency{}, nil)
	eq(t, "removed when clamped", res.Removed, "2")
	eq(t, "level when clamped", res.Bucket.Level, "0")
	e.fillup(r, "1")
	written := e.state(r).UpdatedAt
	e.clock.Advance(time.Second)
	res, _ = e.svc.Drain(e.ctx, r, dec("0"), ledger.Idempotency{}, nil)
	eq(t, "removed by drain 0", res.Removed, "0")
	if st := e.state(r); !st.UpdatedAt.Equal(written) {
		t.Errorf("drain 0 wrote the bucket")
	}
	entries, _, _ := e.svc.History(e.ctx, r, "", 10)
	var drains []string
	for _, en := range entries {
		if en.Event == ledger.EventDrain {
			drains = append(drains, en.Amount.String())
		}
	}
	if fmt.Sprint(drains) != "[2 3]" {
		t.Errorf("drain entries (newest first) = %v, want [2 3]", drains)
	}
	// A drain of an empty bucket removes nothing and records nothing.
	empty := ref("l", "empty")
	res, err = e.svc.Drain(e.ctx, empty, dec("4"), ledger.Idempotency{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "removed from an empty bucket", res.Removed, "0")
	if st := e.state(empty); !st.UpdatedAt.IsZero() {
		t.Errorf("a drain of an empty bucket wrote it: updated_at %v", st.UpdatedAt)
	}
	if entries, _, err := e.svc.History(e.ctx, empty, "", 10); err != nil || len(entries) != 0 {
		t.Errorf("history of a drain that removed nothing = %v, %v", entries, err)
	}
}

func testMultiBucket(t *testing.T, e *env) {
	e.limit("user", "100", "1", time.Hour, true)
	e.limit("team", "150", "1", time.Hour, true)
	u1, u2, team := ref("user", "{t1}u1"), ref("user", "{t1}u2"), ref("team", "{t1}")
	items := func(a, b string) []ledger.Item {
		return []ledger.Item{{Bucket: u1, Cost: dec(a)}, {Bucket: team, Cost: dec(a)}, {Bucket: u2, Cost: dec(b)}, {Bucket: team, Cost: dec(b)}}
	}
	res, err := e.svc.Fillup(e.ctx, items("60", "60"), ledger.Idempotency{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Accepted || len(res.Items) != 4 {
		t.Fatalf("first call: %+v", res)
	}
	eq(t, "team level (summed)", res.Items[1].Level, "120")
	eq(t, "team level, item 4", res.Items[3].Level, "120")
	// The team bucket cannot take 2 × 20 more: nothing is charged anywhere.
	res, err = e.svc.Fillup(e.ctx, items("20", "20"), ledger.Idempotency{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted || !res.Items[0].Accepted || res.Items[1].Accepted || !res.Items[2].Accepted || res.Items[3].Accepted {
		t.Fatalf("second call: accepted=%v items=%+v", res.Accepted, res.Items)
	}
	eq(t, "team retry_after", res.Items[1].RetryAfter, "36000") // 10 units at 1/h
	eq(t, "u1 level untouched", e.state(u1).Level, "60")
	eq(t, "team level untouched", e.state(team).Level, "120")
	_, err = e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: u1, Cost: dec("1")}, {Bucket: ref("nope", "x"), Cost: dec("1")}}, ledger.Idempotency{})
	if !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Fatalf("unknown limit: %v", err)
	}
	eq(t, "u1 after unknown-limit call", e.state(u1).Level, "60")
}

// testMultiBucketConcurrent: calls over overlapping buckets never
// over-admit and stay all-or-nothing.
func testMultiBucketConcurrent(t *testing.T, e *env) {
	e.limit("a", "50", "1", time.Hour, false)
	e.limit("b", "30", "1", time.Hour, false)
	ra, rb := ref("a", "{x}k"), ref("b", "{x}k")
	var wg sync.WaitGroup
	var both, onlyA atomic.Int64
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if i%2 == 0 {
				res, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: ra, Cost: dec("1")}, {Bucket: rb, Cost: dec("1")}}, ledger.Idempotency{})
				if err == nil && res.Accepted {
					both.Add(1)
				}
				return
			}
			res, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: ra, Cost: dec("1")}}, ledger.Idempotency{})
			if err == nil && res.Accepted {
				onlyA.Add(1)
			}
		}(i)
	}
	wg.Wait()
	la, lb := e.state(ra).Level, e.state(rb).Level
	if la != bucket.AmountOf(both.Load()+onlyA.Load()) || lb != bucket.AmountOf(both.Load()) {
		t.Fatalf("levels a=%s b=%s, accepted both=%d onlyA=%d", la, lb, both.Load(), onlyA.Load())
	}
	if la.GreaterThan(bucket.AmountOf(50)) || lb.GreaterThan(bucket.AmountOf(30)) {
		t.Fatalf("over-admitted: a=%s b=%s", la, lb)
	}
}

func testHolds(t *testing.T, e *env) {
	e.limit("l", "100", "1", time.Hour, true)
	r := ref("l", "k")
	res := e.reserve(r, "80", 10*time.Minute)
	if !res.Decision.Accepted || res.Reservation.ID == "" || res.Reservation.State != ledger.Active {
		t.Fatalf("reserve: %+v", res)
	}
	if want := e.clock.Now().Add(10 * time.Minute); !res.Reservation.ExpiresAt.Equal(want) {
		t.Errorf("expires_at %v, want %v", res.Reservation.ExpiresAt, want)
	}
	eq(t, "held", res.Decision.Held, "80")
	eq(t, "remaining", res.Decision.Remaining, "20")
	if d := e.fillup(r, "21"); d.Accepted {
		t.Fatal("fillup over the hold accepted")
	}
	e.clock.Advance(5 * time.Minute) // holds do not leak
	eq(t, "held after 5m", e.state(r).Held, "80")
	if d := e.fillup(r, "20"); !d.Accepted {
		t.Fatal("fillup of 20 beside a hold of 80 denied")
	}
	// Commit above the hold without overrun is refused.
	_, err := e.svc.Commit(e.ctx, res.Reservation.ID, decimal.NewNullDecimal(dec("81")), false, ledger.Idempotency{}, nil)
	if refusal(err) != ledger.RefusalExceedsHold {
		t.Fatalf("commit 81 of 80: %v, want exceeds_hold", err)
	}
	out, err := e.svc.Commit(e.ctx, res.Reservation.ID, decimal.NewNullDecimal(dec("61.20")), false, ledger.Idempotency{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out.Reservation.State != ledger.Committed || !out.Reservation.CommittedAmount.Decimal.Equal(dec("61.2")) {
		t.Fatalf("committed hold: %+v", out.Reservation)
	}
	eq(t, "held after commit", out.Bucket.Held, "0")
	eq(t, "level after commit", out.Bucket.Level, "81.2")

	// Overrun: the level may pass capacity, later calls are denied.
	res2 := e.reserve(r, "10", time.Minute)
	out, err = e.svc.Commit(e.ctx, res2.Reservation.ID, decimal.NewNullDecimal(dec("50")), true, ledger.Idempotency{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "level after overrun", out.Bucket.Level, "131.2")
	d := e.fillup(r, "1")
	if d.Accepted {
		t.Fatal("fillup after overrun accepted")
	}
	eq(t, "retry after overrun", d.RetryAfter, "115920") // 32.2 units at 1/h

	// Release charges nothing; commit without amount charges the hold.
	e.clock.Advance(200 * time.Hour)
	h3 := e.reserve(r, "30", time.Minute)
	rel, err := e.svc.Release(e.ctx, h3.Reservation.ID, ledger.Idempotency{}, nil)
	if err != nil || rel.Reservation.State != ledger.Released {
		t.Fatalf("release: %+v %v", rel.Reservation, err)
	}
	eq(t, "level after release", rel.Bucket.Level, "0")
	h4 := e.reserve(r, "30", time.Minute)
	com, err := e.svc.Commit(e.ctx, h4.Reservation.ID, decimal.NullDecimal{}, false, ledger.Idempotency{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "committed amount (default)", com.Reservation.CommittedAmount.Decimal, "30")
	eq(t, "level after default commit", com.Bucket.Level, "30")
	h5 := e.reserve(r, "5", time.Minute)
	com, err = e.svc.Commit(e.ctx, h5.Reservation.ID, decimal.NewNullDecimal(decimal.Zero), false, ledger.Idempotency{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "level after commit of 0", com.Bucket.Level, "30")
	got, err := e.svc.Reservation(e.ctx, h5.Reservation.ID)
	if err != nil || got.State != ledger.Committed || !got.CommittedAmount.Decimal.IsZero() {
		t.Fatalf("read committed hold: %+v %v", got, err)
	}
}

func testHoldExpiry(t *testing.T, e *env) {
	e.limit("l", "10", "1", time.Hour, true)
	r := ref("l", "k")
	h := e.reserve(r, "8", 10*time.Second)
	// retry_after counts the expiry: the leak alone would take 3h.
	d := e.can(r, "5")
	if d.Accepted {
		t.Fatal("5 accepted beside a hold of 8")
	}
	eq(t, "retry_after (hold expiry)", d.RetryAfter, "10")
	e.clock.Advance(10*time.Second - time.Microsecond)
	eq(t, "held just before expiry", e.state(r).Held, "8")
	got, _ := e.svc.Reservation(e.ctx, h.Reservation.ID)
	if got.State != ledger.Active {
		t.Fatalf("state before expiry: %s", got.State)
	}
	e.clock.Advance(time.Microsecond)
	eq(t, "held at expires_at", e.state(r).Held, "0")
	got, _ = e.svc.Reservation(e.ctx, h.Reservation.ID)
	if got.State != ledger.Expired {
		t.Fatalf("state at expires_at: %s, want expired", got.State)
	}
	if _, err := e.svc.Commit(e.ctx, h.Reservation.ID, decimal.NullDecimal{}, false, ledger.Idempotency{}, nil); refusal(err) != ledger.RefusalExpired {
		t.Fatalf("commit after expiry: %v", err)
	}
	if _, err := e.svc.Release(e.ctx, h.Reservation.ID, ledger.Idempotency{}, nil); refusal(err) != ledger.RefusalExpired {
		t.Fatalf("release after expiry: %v", err)
	}
	if d := e.fillup(r, "10"); !d.Accepted {
		t.Fatal("fillup after expiry denied")
	}
	eq(t, "level", e.state(r).Level, "10")
	entries, _, _ := e.svc.History(e.ctx, r, "", 10)
	var expired []ledger.Entry
	for _, en := range entries {
		if en.Event == ledger.EventExpired {
			expired = append(expired, en)
		}
	}
	if len(expired) != 1 || !expired[0].Time.Equal(h.Reservation.ExpiresAt) || !expired[0].Amount.Equal(dec("8")) || expired[0].ReservationID != h.Reservation.ID {
		t.Fatalf("expired entries = %+v", expired)
	}
}

func testHoldResolvesOnce(t *testing.T, e *env) {
	e.limit("l", "100", "1", time.Hour, false)
	r := ref("l", "k")
	id := e.reserve(r, "10", time.Minute).Reservation.ID
	c1, err := e.svc.Commit(e.ctx, id, decimal.NewNullDecimal(dec("4")), false, ledger.Idempotency{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := e.svc.Commit(e.ctx, id, decimal.NewNullDecimal(dec("4.0")), false, ledger.Idempotency{}, nil)
	if err != nil {
		t.Fatalf("repeated identical commit: %v", err)
	}
	if c2.Reservation.State != ledger.Committed || !c2.Bucket.Level.Equal(c1.Bucket.Level) {
		t.Fatalf("repeat changed something: %+v vs %+v", c2, c1)
	}
	if _, err := e.svc.Commit(e.ctx, id, decimal.NewNullDecimal(dec("5")), false, ledger.Idempotency{}, nil); refusal(err) != ledger.RefusalClosed {
		t.Fatalf("commit with another amount: %v", err)
	}
	if _, err := e.svc.Release(e.ctx, id, ledger.Idempotency{}, nil); refusal(err) != ledger.RefusalClosed {
		t.Fatalf("release after commit: %v", err)
	}
	id2 := e.reserve(r, "10", time.Minute).Reservation.ID
	if _, err := e.svc.Release(e.ctx, id2, ledger.Idempotency{}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Release(e.ctx, id2, ledger.Idempotency{}, nil); err != nil {
		t.Fatalf("repeated release: %v", err)
	}
	if _, err := e.svc.Commit(e.ctx, id2, decimal.NullDecimal{}, false, ledger.Idempotency{}, nil); refusal(err) != ledger.RefusalClosed {
		t.Fatalf("commit after release: %v", err)
	}
	eq(t, "level", e.state(r).Level, "4")
}

// testHoldRace: commit, release and expiry race on one hold; exactly one
// resolution wins and the level shows only that one.
func testHoldRace(t *testing.T, e *env) {
	e.limit("l", "1000", "1", time.Hour, false)
	r := ref("l", "k")
	for round := 0; round < 10; round++ {
		id := e.reserve(r, "10", time.Second).Reservation.ID
		before := e.state(r).Level
		var commits, releases, refused atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < 20; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				var err error
				if i%2 == 0 {
					_, err = e.svc.Commit(e.ctx, id, decimal.NewNullDecimal(dec("3")), false, ledger.Idempotency{}, nil)
					if err == nil {
						commits.Add(1)
					}
				} else {
					_, err = e.svc.Release(e.ctx, id, ledger.Idempotency{}, nil)
					if err == nil {
						releases.Add(1)
					}
				}
				if err != nil {
					if refusal(err) == "" {
						t.Errorf("unexpected error: %v", err)
					}
					refused.Add(1)
				}
			}(i)
		}
		wg.Wait()
		got, _ := e.svc.Reservation(e.ctx, id)
		level := e.state(r).Level
		switch got.State {
		case ledger.Committed:
			if commits.Load() != 10 || releases.Load() != 0 || level != before.Add(bucket.AmountOf(3)) {
				t.Fatalf("committed: commits=%d releases=%d level %s→%s", commits.Load(), releases.Load(), before, level)
			}
		case ledger.Released:
			if commits.Load() != 0 || releases.Load() != 10 || !level.Equal(before) {
				t.Fatalf("released: commits=%d releases=%d level %s→%s", commits.Load(), releases.Load(), before, level)
			}
		default:
			t.Fatalf("hold ended %s", got.State)
		}
	}
}

func testHistory(t *testing.T, e *env) {
	e.limit("l", "100", "1", time.Hour, true)
	r := ref("l", "k")
	e.fillup(r, "1")
	e.clock.Advance(time.Second)
	e.fillup(r, "2")
	e.fillup(r, "0")   // no-op: not recorded
	e.fillup(r, "500") // denied: not recorded
	e.clock.Advance(time.Second)
	h := e.reserve(r, "5", time.Minute)
	e.clock.Advance(time.Second)
	e.svc.Commit(e.ctx, h.Reservation.ID, decimal.NewNullDecimal(dec("4")), false, ledger.Idempotency{}, nil)
	h2 := e.reserve(r, "6", time.Minute)
	e.svc.Release(e.ctx, h2.Reservation.ID, ledger.Idempotency{}, nil)
	e.svc.Drain(e.ctx, r, dec("1.5"), ledger.Idempotency{}, nil)

	var all []ledger.Entry
	cursor := ""
	for page := 0; ; page++ {
		entries, next, err := e.svc.History(e.ctx, r, cursor, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) > 2 || page > 10 {
			t.Fatalf("page %d has %d entries", page, len(entries))
		}
		all = append(all, entries...)
		if next == "" {
			break
		}
		cursor = next
	}
	var got []string
	for i, en := range all {
		s := string(en.Event) + ":" + en.Amount.String()
		if en.ReservationID != "" {
			s += ":hold"
		}
		got = append(got, s)
		if en.ID == "" {
			t.Errorf("entry %d has no id", i)
		}
		if i > 0 && (en.Time.After(all[i-1].Time)) {
			t.Errorf("entry %d is newer than entry %d", i, i-1)
		}
	}
	want := "[drain:1.5 released:6:hold reserved:6:hold committed:4:hold reserved:5:hold fillup:2 fillup:1]"
	if fmt.Sprint(got) != want {
		t.Fatalf("history = %v\nwant      %v", got, want)
	}
}

func testHistoryOff(t *testing.T, e *env) {
	e.limit("l", "100", "1", time.Hour, false)
	r := ref("l", "k")
	e.fillup(r, "1")
	e.reserve(r, "1", time.Minute)
	entries, next, err := e.svc.History(e.ctx, r, "", 10)
	if err != nil || len(entries) != 0 || next != "" {
		t.Fatalf("history with history off = %v %q %v", entries, next, err)
	}
	// A malformed cursor is refused all the same.
	var inv *ledger.InvalidError
	if _, _, err := e.svc.History(e.ctx, r, "zzz", 10); !errors.As(err, &inv) || inv.Field != "cursor" {
		t.Errorf("history off, malformed cursor: %v", err)
	}
}

func idem(key, hash string) ledger.Idempotency {
	return ledger.Idempotency{Scope: "fillup:l/k", Key: key, Hash: hash}
}

func testIdempotency(t *testing.T, e *env) {
	e.limit("l", "10", "1", time.Hour, true)
	r := ref("l", "k")
	one := []ledger.Item{{Bucket: r, Cost: dec("6")}}
	first, err := e.svc.Fillup(e.ctx, one, idem("k1", "h6"))
	if err != nil || !first.Accepted || first.Replayed {
		t.Fatalf("first: %+v %v", first, err)
	}
	e.clock.Advance(time.Second)
	again, err := e.svc.Fillup(e.ctx, one, idem("k1", "h6"))
	if err != nil || !again.Replayed || !again.Accepted || !again.Items[0].Level.Equal(first.Items[0].Level) {
		t.Fatalf("replay: %+v %v", again, err)
	}
	eq(t, "level after replay (charged once)", e.state(r).Level, "5.999722222223")
	if _, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: r, Cost: dec("1")}}, idem("k1", "h1")); !errors.Is(err, ledger.ErrIdempotencyKeyReused) {
		t.Fatalf("same key, other body: %v", err)
	}
	// A denial is stored and replayed too, even once the cost would fit.
	denied, _ := e.svc.Fillup(e.ctx, one, idem("k2", "h6"))
	if denied.Accepted {
		t.Fatal("second 6 accepted")
	}
	e.clock.Advance(10 * time.Hour)
	replayed, err := e.svc.Fillup(e.ctx, one, idem("k2", "h6"))
	if err != nil || replayed.Accepted || !replayed.Replayed || !replayed.Items[0].RetryAfter.Equal(denied.Items[0].RetryAfter) {
		t.Fatalf("replayed denial: %+v %v", replayed, err)
	}
	// Scopes keep keys apart.
	other := ledger.Idempotency{Scope: "fillup:l/other", Key: "k1", Hash: "h6"}
	if res, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: ref("l", "other"), Cost: dec("6")}}, other); err != nil || res.Replayed {
		t.Fatalf("same key in another scope: %+v %v", res, err)
	}
	// Commit refusals replay as refusals.
	id := e.reserve(r, "1", time.Minute).Reservation.ID
	ci := ledger.Idempotency{Scope: "commit:" + id, Key: "c", Hash: "h2"}
	_, err = e.svc.Commit(e.ctx, id, decimal.NewNullDecimal(dec("2")), false, ci, nil)
	if refusal(err) != ledger.RefusalExceedsHold {
		t.Fatalf("commit 2 of 1: %v", err)
	}
	res, err := e.svc.Commit(e.ctx, id, decimal.NewNullDecimal(dec("2")), false, ci, nil)
	if refusal(err) != ledger.RefusalExceedsHold || !res.Replayed {
		t.Fatalf("replayed refusal: %+v %v", res, err)
	}
}

func testIdempotencyParallel(t *testing.T, e *env) {
	e.limit("l", "1000", "1", time.Hour, true)
	r := ref("l", "k")
	var wg sync.WaitGroup
	var replayed atomic.Int64
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: r, Cost: dec("3")}}, idem("same", "h3"))
			if err != nil {
				if !errors.Is(err, ledger.ErrIdempotencyInFlight) {
					t.Errorf("parallel duplicate: %v", err)
				}
				return
			}
			if res.Replayed {
				replayed.Add(1)
			}
		}()
	}
	wg.Wait()
	eq(t, "level after 100 parallel duplicates", e.state(r).Level, "3")
	entries, _, _ := e.svc.History(e.ctx, r, "", 1000)
	if len(entries) != 1 {
		t.Fatalf("%d history entries, want 1", len(entries))
	}
	if replayed.Load() == 0 {
		t.Error("no request reported a replay")
	}
}

func testNotFound(t *testing.T, e *env) {
	r := ref("missing", "k")
	if _, err := e.svc.CanAccept(e.ctx, r, dec("1")); !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Errorf("CanAccept: %v", err)
	}
	if _, err := e.svc.Reserve(e.ctx, r, dec("1"), time.Minute, ledger.Idempotency{}, nil); !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Errorf("Reserve: %v", err)
	}
	if _, err := e.svc.Drain(e.ctx, r, dec("1"), ledger.Idempotency{}, nil); !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Errorf("Drain: %v", err)
	}
	if _, _, err := e.svc.History(e.ctx, r, "", 10); !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Errorf("History: %v", err)
	}
	for _, id := range []string{"nope", "h00000000000000000000000000", "x"} {
		if _, err := e.svc.Reservation(e.ctx, id); !errors.Is(err, ledger.ErrReservationNotFound) {
			t.Errorf("Reservation(%q): %v", id, err)
		}
		if _, err := e.svc.Commit(e.ctx, id, decimal.NullDecimal{}, false, ledger.Idempotency{}, nil); !errors.Is(err, ledger.ErrReservationNotFound) {
			t.Errorf("Commit(%q): %v", id, err)
		}
	}
}

// testLevelOverflow drives a level to MaxLevel with overrun commits: the
// commit that would pass it fails with ErrLevelOverflow and changes nothing,
// not even the bucket's timestamp.
func testLevelOverflow(t *testing.T, e *env) {
	e.limit("of", "1000000000000", "0.000001", ledger.MaxPer, true)
	r := ref("of", "k")
	e.fillup(r, "1")
	var ids []string
	for i := 0; i < ledger.MaxHolds; i++ {
		ids = append(ids, e.reserve(r, "0.000001", time.Hour).Reservation.ID)
	}
	max := decimal.NewNullDecimal(ledger.MaxAmount)
	for _, id := range ids[:len(ids)-1] {
		if _, err := e.svc.Commit(e.ctx, id, max, true, ledger.Idempotency{}, nil); err != nil {
			t.Fatalf("overrun commit: %v", err)
		}
	}
	e.clock.Advance(time.Second)
	before, err := e.store.Inspect(e.ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	last := ids[len(ids)-1]
	if _, err := e.svc.Commit(e.ctx, last, max, true, ledger.Idempotency{}, nil); !errors.Is(err, ledger.ErrLevelOverflow) {
		t.Fatalf("commit past MaxLevel: %v, want ErrLevelOverflow", err)
	}
	after, err := e.store.Inspect(e.ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if !after.State.Updated.Equal(before.State.Updated) || !after.State.Level.Equal(before.State.Level) || len(after.State.Holds) != 1 {
		t.Fatalf("a failed commit changed the bucket: %+v -> %+v", before.State, after.State)
	}
	if h, err := e.svc.Reservation(e.ctx, last); err != nil || h.State != ledger.Active {
		t.Fatalf("the hold after a failed commit: %+v %v", h, err)
	}
}

package memory_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/shopspring/decimal"
)

// TestSweepUnderOverrides: the sweeper prunes a bucket that its own terms
// have emptied and keeps one they have not: with a capacity-only override
// (the sweeper then reads no override) the limit's leak empties it; with
// an override of a slower leak, that leak decides, and the bucket stays.
func TestSweepUnderOverrides(t *testing.T) {
	clock := ledgertest.NewClock()
	s := memory.New(memory.WithClock(clock.Now))
	svc := ledger.NewService(s)
	ctx := t.Context()
	if _, err := svc.PutLimit(ctx, "api", ledger.LimitSpec{Capacity: decimal.NewFromInt(100), LeakAmount: decimal.NewFromInt(100), LeakPer: time.Second}); err != nil {
		t.Fatal(err)
	}
	put := func(o ledger.Override) {
		t.Helper()
		if _, err := svc.PutOverride(ctx, "api", o); err != nil {
			t.Fatal(err)
		}
	}
	put(ledger.Override{Pattern: "big", Capacity: decimal.NewNullDecimal(decimal.NewFromInt(1000))})
	for _, k := range []string{"plain", "big", "slow"} {
		if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "api", Key: k}, Cost: decimal.NewFromInt(50)}}, ledger.Idempotency{}); err != nil {
			t.Fatal(err)
		}
	}
	// Put after the charge, so that the bucket is settled at 50 under the
	// old leak, then leaks 1 an hour.
	put(ledger.Override{Pattern: "slow", LeakAmount: decimal.NewFromInt(1), LeakPer: time.Hour})
	clock.Advance(10 * time.Second)
	s.Sweep()
	if s.Lean("api", "plain") || s.Lean("api", "big") || !s.Lean("api", "slow") {
		t.Fatalf("after a sweep: plain %v, big %v, slow %v; want only slow kept", s.Lean("api", "plain"), s.Lean("api", "big"), s.Lean("api", "slow"))
	}
	st, err := svc.Bucket(ctx, ledger.BucketRef{Limit: "api", Key: "slow"})
	if err != nil || st.Level.Decimal().LessThan(decimal.NewFromInt(49)) || st.Override != "slow" {
		t.Fatalf("slow after the sweep: %+v %v", st, err)
	}
}

// expiryEnv is a memory store with a leaky limit "l" (capacity 100, 10 an
// hour, with history or not) and a temporary override of key "k" leaking 1 an hour
// until t0+2h; "k" was charged 50 at t0. Settled at its expiry, "k" is at
// 48 then and leaks 10 an hour after it.
type expiryEnv struct {
	t     *testing.T
	clock *ledgertest.Clock
	s     *memory.Store
	svc   *ledger.Service
	t0    time.Time
}

func newExpiryEnv(t *testing.T, history bool) *expiryEnv {
	t.Helper()
	clock := ledgertest.NewClock()
	s := memory.New(memory.WithClock(clock.Now))
	e := &expiryEnv{t: t, clock: clock, s: s, svc: ledger.NewService(s), t0: clock.Now()}
	if _, err := e.svc.PutLimit(t.Context(), "l", ledger.LimitSpec{Capacity: decimal.NewFromInt(100), LeakAmount: decimal.NewFromInt(10), LeakPer: time.Hour, History: history}); err != nil {
		t.Fatal(err)
	}
	e.put(ledger.Override{Pattern: "k", LeakAmount: decimal.NewFromInt(1), LeakPer: time.Hour, ExpiresAt: e.t0.Add(2 * time.Hour)})
	if _, err := e.svc.Fillup(t.Context(), []ledger.Item{{Bucket: ledger.BucketRef{Limit: "l", Key: "k"}, Cost: decimal.NewFromInt(50)}}, ledger.Idempotency{}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *expiryEnv) put(o ledger.Override) {
	e.t.Helper()
	if _, err := e.svc.PutOverride(e.t.Context(), "l", o); err != nil {
		e.t.Fatal(err)
	}
}

// level checks the level of "k" at t0+at.
func (e *expiryEnv) level(at time.Duration, want string) {
	e.t.Helper()
	e.clock.Set(e.t0.Add(at))
	st, err := e.svc.Bucket(e.t.Context(), ledger.BucketRef{Limit: "l", Key: "k"})
	if err != nil {
		e.t.Fatal(err)
	}
	if !st.Level.Decimal().Equal(decimal.RequireFromString(want)) {
		e.t.Fatalf("level at t0+%s = %s, want %s", at, st.Level, want)
	}
}

// TestSweepKeepsExpiredOverride: the sweeper settles a bucket at the end of
// its temporary slow leak before it judges it empty. Unsettled, 50 charged
// under 1/h would read as 0 under the limit's 10/h after 5h and be pruned.
func TestSweepKeepsExpiredOverride(t *testing.T) {
	e := newExpiryEnv(t, false) // nothing but its level keeps it
	e.clock.Set(e.t0.Add(5 * time.Hour))
	e.s.Sweep()
	if e.s.Buckets() != 1 {
		t.Fatalf("the sweep pruned the bucket: %d buckets", e.s.Buckets())
	}
	e.level(5*time.Hour, "18") // 48 at t0+2h, 3h at 10/h
}

// TestOverrideMemoHotKey: decisions on a hot key, whose override the store
// remembers decoded, see every change of the overrides at their very next
// decision (a longer prefix added over the remembered one, its capacity
// replaced, an exact override over it, deletes, another override reusing a
// deleted one's place), and a temporary raise applies up to the
// microsecond before its end and not from it.
func TestOverrideMemoHotKey(t *testing.T) {
	clock := ledgertest.NewClock()
	svc := ledger.NewService(memory.New(memory.WithClock(clock.Now)))
	ctx := t.Context()
	if _, err := svc.PutLimit(ctx, "api", ledger.LimitSpec{Capacity: decimal.NewFromInt(10), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Hour}); err != nil {
		t.Fatal(err)
	}
	put := func(o ledger.Override) {
		t.Helper()
		if _, err := svc.PutOverride(ctx, "api", o); err != nil {
			t.Fatal(err)
		}
	}
	del := func(p string) {
		t.Helper()
		if err := svc.DeleteOverride(ctx, "api", p); err != nil {
			t.Fatal(err)
		}
	}
	capacity := func(c int64) decimal.NullDecimal { return decimal.NewNullDecimal(decimal.NewFromInt(c)) }
	decide := func(want, override string) {
		t.Helper()
		for range 3 { // the first two decode, the third may be remembered
			res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "api", Key: "k0-a"}, Cost: decimal.New(1, -3)}}, ledger.Idempotency{})
			if err != nil || res.Items[0].Capacity.String() != want || res.Limits[0].Override != override {
				t.Fatalf("%+v (%v), want capacity %s under %q", res, err, want, override)
			}
		}
	}
	for i := range 1000 {
		put(ledger.Override{Pattern: fmt.Sprintf("k%d*", 2*i), Capacity: capacity(40)})
		put(ledger.Override{Pattern: fmt.Sprintf("k%d", 2*i+1), Capacity: capacity(30)})
	}
	decide("40", "k0*")
	put(ledger.Override{Pattern: "k0-*", Capacity: capacity(50)})
	decide("50", "k0-*")
	put(ledger.Override{Pattern: "k0-*", Capacity: capacity(60)})
	decide("60", "k0-*")
	put(ledger.Override{Pattern: "k0-a", Capacity: capacity(70)})
	decide("70", "k0-a")
	del("k0-a")
	decide("60", "k0-*")
	del("k0-*")
	del("k0*")
	put(ledger.Override{Pattern: "k0-*", Capacity: capacity(80)}) // in the place k0* had
	decide("80", "k0-*")
	del("k0-*")
	decide("10", "")
	put(ledger.Override{Pattern: "k0*", Capacity: capacity(40)})
	end := clock.Now().Add(time.Hour)
	put(ledger.Override{Pattern: "k0-a", Capacity: capacity(90), ExpiresAt: end})
	decide("90", "k0-a")
	clock.Set(end.Add(-time.Microsecond))
	decide("90", "k0-a")
	clock.Set(end)
	decide("40", "k0*")
}

// TestOverrideMemoConcurrent: decisions on a hot key from several
// goroutines share its remembered override while PUTs replace it; every
// decision made after a PUT returned is under that PUT's capacity (run
// with -race: the memo is read under the read lock and written by readers).
func TestOverrideMemoConcurrent(t *testing.T) {
	svc := ledger.NewService(memory.New())
	ctx := t.Context()
	if _, err := svc.PutLimit(ctx, "api", ledger.LimitSpec{Capacity: decimal.NewFromInt(10), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Hour}); err != nil {
		t.Fatal(err)
	}
	var put atomic.Int64 // the capacity of the last PUT that returned
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				floor := put.Load()
				res, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "api", Key: "k0"}, Cost: decimal.New(1, -6)}}, ledger.Idempotency{})
				if err != nil {
					errs <- err
					return
				}
				if c := res.Items[0].Capacity.Decimal().IntPart(); c < floor {
					errs <- fmt.Errorf("a decision after the PUT of capacity %d was under %d", floor, c)
					return
				}
			}
		}()
	}
	for c := int64(100); c <= 3000; c += 100 { // rising, so a stale memo shows as a lower capacity
		if _, err := svc.PutOverride(ctx, "api", ledger.Override{Pattern: "k0*", Capacity: decimal.NewNullDecimal(decimal.NewFromInt(c))}); err != nil {
			t.Fatal(err)
		}
		put.Store(c)
	}
	close(stop)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

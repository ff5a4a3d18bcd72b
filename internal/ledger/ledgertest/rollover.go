package ledgertest

import (
	"errors"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// RunRollover runs the conformance tests of rollover (SPEC "Terms per
// customer") against the stores factory builds. The clock moves across
// months with Set, never by sleeping. A store that does not serve rollover
// must refuse a limit with it (ledger.ErrNotServed) and change nothing.
func RunRollover(t *testing.T, factory Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"Carried", testRolloverCarried},
		{"UntouchedPeriod", testRolloverUntouched},
		{"NextPeriodOnly", testRolloverNextPeriodOnly},
		{"GrantsNotCarried", testRolloverGrantsNotCarried},
		{"Thresholds", testRolloverThresholds},
		{"CanAcceptBeforeWrite", testRolloverCanAcceptBeforeWrite},
		{"MultiBucket", testRolloverMultiBucket},
		{"Holds", testRolloverHolds},
		{"PutChanges", testRolloverPutChanges},
		{"BadInput", testRolloverBadInput},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewClock()
			clock.Set(time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC))
			store := factory(t, clock)
			e := &env{t: t, clock: clock, store: store, svc: ledger.NewService(store), ctx: t.Context()}
			if !ledger.ServesRollover(store) {
				testRolloverNotServed(t, e)
				return
			}
			tc.fn(t, e)
		})
	}
}

// rolloverLimit puts a monthly (UTC) limit of capacity with rollover up to
// max.
func (e *env) rolloverLimit(name, capacity, max string, ts ...ledger.Threshold) {
	e.t.Helper()
	spec := ledger.LimitSpec{Capacity: dec(capacity), Period: &ledger.Period{Every: "month"}, History: true,
		Rollover: &ledger.Rollover{Max: dec(max)}, Thresholds: ts}
	if _, err := e.svc.PutLimit(e.ctx, name, spec); err != nil {
		e.t.Fatalf("PutLimit(%s, rollover %s): %v", name, max, err)
	}
}

// month sets the clock to day 5 of the given month of 2026 (12 is
// December, 13 January 2027, …).
func (e *env) month(m int) {
	e.clock.Set(time.Date(2026, time.Month(m), 5, 9, 0, 0, 0, time.UTC))
}

// terms checks a bucket's capacity and rollover.
func (e *env) terms(r ledger.BucketRef, capacity, rollover string) {
	e.t.Helper()
	st := e.state(r)
	eq(e.t, r.Key+" capacity", st.Capacity, capacity)
	eq(e.t, r.Key+" rollover", st.Rollover, rollover)
}

// testRolloverNotServed: a store without rollover answers ErrNotServed to
// a limit with it, creating nothing and leaving an existing limit as it
// was.
func testRolloverNotServed(t *testing.T, e *env) {
	spec := ledger.LimitSpec{Capacity: dec("100"), Period: &ledger.Period{Every: "month"}, History: true, Rollover: &ledger.Rollover{Max: dec("30")}}
	if _, err := e.svc.PutLimit(e.ctx, "m", spec); !errors.Is(err, ledger.ErrNotServed) {
		t.Fatalf("PutLimit with rollover: %v, want ErrNotServed", err)
	}
	if _, err := e.svc.GetLimit(e.ctx, "m"); !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Fatalf("a refused limit was created: %v", err)
	}
	e.periodic("m", "50", ledger.Period{Every: "month"}, true)
	if _, err := e.svc.PutLimit(e.ctx, "m", spec); !errors.Is(err, ledger.ErrNotServed) {
		t.Fatalf("PutLimit adding rollover: %v, want ErrNotServed", err)
	}
	l, err := e.svc.GetLimit(e.ctx, "m")
	if err != nil || l.Rollover != nil || !l.Capacity.Equal(dec("50")) {
		t.Fatalf("a refused PUT changed the limit: %+v %v", l, err)
	}
	e.fillup(ref("m", "k"), "10")
	e.month(12)
	e.terms(ref("m", "k"), "50", "0")
}

// testRolloverCarried: what a bucket left unused of its capacity is carried
// into the next month, capped at max; it raises capacity, remaining and
// never_fits; a bucket first written in the new month receives none.
func testRolloverCarried(t *testing.T, e *env) {
	e.rolloverLimit("m", "100", "30")
	a, b, c, n := ref("m", "a"), ref("m", "b"), ref("m", "c"), ref("m", "n")
	e.fillup(a, "50")  // 50 unused: 30 carried
	e.fillup(b, "90")  // 10 unused
	e.fillup(c, "100") // nothing unused
	e.terms(a, "100", "0")
	e.month(12)
	e.terms(a, "130", "30")
	e.terms(b, "110", "10")
	e.terms(c, "100", "0")
	e.terms(n, "100", "0")
	if d := e.can(a, "130.000001"); !d.NeverFits {
		t.Errorf("a cost above the capacity with rollover: %+v, want never_fits", d)
	}
	d := e.fillup(a, "130")
	if !d.Accepted {
		t.Fatalf("a fillup of the capacity with rollover denied: %+v", d)
	}
	eq(t, "capacity of the decision", d.Capacity, "130")
	eq(t, "remaining", d.Remaining, "0")
	if d := e.fillup(a, "0.000001"); d.Accepted {
		t.Errorf("a fillup past the capacity with rollover accepted: %+v", d)
	}
	e.fillup(n, "10")
	e.terms(n, "100", "0") // first written this month: no bonus
	e.terms(a, "130", "30")
	// The received rollover does not itself roll over: b spent 95 of 110
	// in December, leaving 5 of the 100 in force, not 15.
	e.fillup(b, "95")
	e.month(13)
	e.terms(b, "105", "5")
	e.terms(a, "100", "0") // spent 130 of 100
	e.terms(n, "130", "30")
}

// testRolloverUntouched: a month in which an existing bucket charged
// nothing carries min(max, capacity).
func testRolloverUntouched(t *testing.T, e *env) {
	e.rolloverLimit("m", "100", "30")
	e.rolloverLimit("big", "100", "1000")
	e.fillup(ref("m", "u"), "80")
	e.fillup(ref("big", "u"), "80")
	e.month(12)
	e.terms(ref("m", "u"), "120", "20")
	e.terms(ref("big", "u"), "120", "20")
	e.month(13) // December untouched
	e.terms(ref("m", "u"), "130", "30")
	e.terms(ref("big", "u"), "200", "100")
	e.month(18) // many months later, still an existing bucket
	e.terms(ref("m", "u"), "130", "30")
}

// testRolloverNextPeriodOnly: rollover reaches the next month only: what
// November left unused is gone in January when December used its whole
// capacity.
func testRolloverNextPeriodOnly(t *testing.T, e *env) {
	e.rolloverLimit("m", "100", "30")
	x := ref("m", "x")
	e.fillup(x, "40")
	e.month(12)
	e.terms(x, "130", "30")
	e.fillup(x, "100")
	e.month(13)
	e.terms(x, "100", "0")
	e.fillup(x, "60")
	e.month(14)
	e.terms(x, "130", "30")
}

// testRolloverGrantsNotCarried: the capacity in force at a month's end is
// the limit's (or override's), without grants: a grant spent is not
// carried.
func testRolloverGrantsNotCarried(t *testing.T, e *env) {
	grants := true
	if _, ok := ledger.GrantsOf(e.store); !ok {
		grants = false
	}
	e.rolloverLimit("m", "100", "30")
	g := ref("m", "g")
	if grants {
		e.grant(g, "50", time.Time{}) // until the end of November
		e.terms(g, "150", "0")
		if d := e.fillup(g, "120"); !d.Accepted {
			t.Fatalf("fillup within the grant denied: %+v", d)
		}
	} else {
		e.fillup(g, "100")
	}
	e.month(12)
	e.terms(g, "100", "0") // 100 in force − 120 spent: nothing unused
	// A grant in the new month adds to the rollover received.
	h := ref("m", "h")
	e.fillup(h, "90")
	e.month(13)
	if grants {
		e.grant(h, "5", time.Time{})
		st := e.state(h)
		eq(t, "capacity with a grant and rollover", st.Capacity, "115")
		eq(t, "grants", st.Grants, "5")
		eq(t, "rollover", st.Rollover, "10")
	}
}

// testRolloverThresholds: a percentage threshold follows the capacity with
// rollover.
func testRolloverThresholds(t *testing.T, e *env) {
	e.rolloverLimit("spend", "100", "50", thresholds(t, "80%")...)
	r := ref("spend", "team-b")
	e.fillup(r, "50")
	_, cursor := e.eventsAfter("", 10)
	e.month(12)
	e.fillup(r, "100") // 100 of 150: below 80%
	evs, cursor := e.eventsAfter(cursor, 10)
	if len(evs) != 0 {
		t.Fatalf("events %+v, want none below 80%% of 150", evs)
	}
	e.fillup(r, "20")
	evs, _ = e.eventsAfter(cursor, 10)
	if len(evs) != 1 || eventText(evs[0]) != "crossed team-b 80% used=120 cap=150" {
		t.Fatalf("events %+v, want team-b crossing 80%% of 150", evs)
	}
}

// testRolloverCanAcceptBeforeWrite: in a new month, CanAccept and the
// bucket's state see the rollover before any write, and write nothing.
func testRolloverCanAcceptBeforeWrite(t *testing.T, e *env) {
	e.rolloverLimit("m", "100", "30")
	r := ref("m", "k")
	e.fillup(r, "90")
	written := e.state(r).UpdatedAt
	e.month(12)
	d := e.can(r, "110")
	if !d.Accepted {
		t.Fatalf("CanAccept of the capacity with rollover: %+v", d)
	}
	eq(t, "capacity", d.Capacity, "110")
	if d := e.can(r, "110.000001"); d.Accepted || !d.NeverFits {
		t.Errorf("CanAccept past it: %+v", d)
	}
	for range 3 {
		e.terms(r, "110", "10")
	}
	if st := e.state(r); !st.UpdatedAt.Equal(written) {
		t.Errorf("reads wrote the bucket: updated_at %v, want %v", st.UpdatedAt, written)
	}
	// The first write keeps what the bucket received: its November level is
	// gone from then on.
	e.fillup(r, "1")
	e.terms(r, "110", "10")
}

// testRolloverMultiBucket: each item of a multi-bucket Fillup gets its own
// bucket's rollover, also when replayed. The keys share a hash tag, so the
// call is one slot's in Redis Cluster.
func testRolloverMultiBucket(t *testing.T, e *env) {
	e.rolloverLimit("m", "100", "30")
	e.fillup(ref("m", "{t}a"), "10")
	e.month(12)
	items := []ledger.Item{{Bucket: ref("m", "{t}a"), Cost: dec("120")}, {Bucket: ref("m", "{t}new"), Cost: dec("10")}}
	idem := ledger.Idempotency{Scope: "s", Key: "k1", Hash: "h"}
	res, err := e.svc.Fillup(e.ctx, items, idem)
	if err != nil || !res.Accepted || !res.Limits[0].Received.Equal(dec("30")) || !res.Limits[1].Received.IsZero() {
		t.Fatalf("multi-bucket Fillup: %+v %v", res, err)
	}
	eq(t, "a capacity", res.Items[0].Capacity, "130")
	eq(t, "a remaining", res.Items[0].Remaining, "10")
	eq(t, "new capacity", res.Items[1].Capacity, "100")
	e.clock.Advance(time.Hour)
	res, err = e.svc.Fillup(e.ctx, items, idem)
	if err != nil || !res.Replayed || !res.Limits[0].Received.Equal(dec("30")) {
		t.Fatalf("replay: %+v %v", res, err)
	}
	eq(t, "a capacity replayed", res.Items[0].Capacity, "130")
	e.month(13)
	e.terms(ref("m", "{t}new"), "130", "30")
	e.terms(ref("m", "{t}a"), "100", "0")
}

// testRolloverHolds: holds count in use, not in the level carried; a hold
// and its commit in the new month use the capacity with rollover.
func testRolloverHolds(t *testing.T, e *env) {
	e.rolloverLimit("m", "100", "30")
	r := ref("m", "r")
	e.fillup(r, "70")
	held := e.reserve(r, "20", time.Hour) // counts in use, not in the level
	if !held.Decision.Accepted {
		t.Fatal("reserve denied")
	}
	e.month(12)
	e.terms(r, "130", "30")
	res := e.reserve(r, "100", time.Hour)
	if !res.Decision.Accepted {
		t.Fatalf("a hold within the rollover denied: %+v", res.Decision)
	}
	eq(t, "hold capacity", res.Decision.Capacity, "130")
	if _, err := e.svc.Commit(e.ctx, res.Reservation.ID, decimal.NullDecimal{}, false, ledger.Idempotency{}, nil); err != nil {
		t.Fatal(err)
	}
	st := e.state(r)
	eq(t, "level after commit", st.Level, "100")
	eq(t, "capacity after commit", st.Capacity, "130")
	eq(t, "rollover after commit", st.Rollover, "30")
}

// testRolloverPutChanges: a PUT may change max (from then on, for every
// bucket) or remove rollover, and a PUT without rollover removes it.
func testRolloverPutChanges(t *testing.T, e *env) {
	e.rolloverLimit("m", "100", "30")
	a, b := ref("m", "a"), ref("m", "b")
	e.fillup(a, "40")
	e.fillup(b, "40")
	e.month(12)
	e.fillup(a, "1") // a keeps what it received
	e.terms(a, "130", "30")
	e.rolloverLimit("m", "100", "10")
	l, err := e.svc.GetLimit(e.ctx, "m")
	if err != nil || l.Rollover == nil || !l.Rollover.Max.Equal(dec("10")) {
		t.Fatalf("limit after PUT: %+v %v", l, err)
	}
	e.terms(a, "110", "10")
	e.terms(b, "110", "10")
	e.rolloverLimit("m", "100", "50")
	e.terms(a, "150", "50")
	e.terms(b, "150", "50")
	e.periodic("m", "100", ledger.Period{Every: "month"}, true)
	if l, _ := e.svc.GetLimit(e.ctx, "m"); l.Rollover != nil {
		t.Fatalf("a PUT without rollover kept it: %+v", l.Rollover)
	}
	e.terms(a, "100", "0")
	e.terms(b, "100", "0")
	eq(t, "level kept", e.state(a).Level, "1")
}

// testRolloverBadInput: rollover on a limit that is not periodic, or a max
// that is not an amount, is refused naming the field, and nothing changes.
func testRolloverBadInput(t *testing.T, e *env) {
	e.rolloverLimit("m", "100", "30")
	for _, c := range []struct {
		spec  ledger.LimitSpec
		field string
	}{
		{ledger.LimitSpec{Capacity: dec("100"), LeakAmount: dec("1"), LeakPer: time.Hour, Rollover: &ledger.Rollover{Max: dec("1")}}, "rollover"},
		{ledger.LimitSpec{Capacity: dec("100"), Window: &ledger.Window{Length: time.Hour}, Rollover: &ledger.Rollover{Max: dec("1")}}, "rollover"},
		{ledger.LimitSpec{Capacity: dec("100"), Period: &ledger.Period{Every: "month"}, Rollover: &ledger.Rollover{Max: dec("-1")}}, "rollover.max"},
		{ledger.LimitSpec{Capacity: dec("100"), Period: &ledger.Period{Every: "month"}, Rollover: &ledger.Rollover{Max: dec("1.0000001")}}, "rollover.max"},
		{ledger.LimitSpec{Capacity: dec("100"), Period: &ledger.Period{Every: "month"}, Rollover: &ledger.Rollover{Max: dec("1000000000001")}}, "rollover.max"},
	} {
		_, err := e.svc.PutLimit(e.ctx, "m", c.spec)
		var ie *ledger.InvalidError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("PutLimit(%+v) = %v, want a 400 naming %s", c.spec, err, c.field)
		}
	}
	l, err := e.svc.GetLimit(e.ctx, "m")
	if err != nil || l.Rollover == nil || !l.Rollover.Max.Equal(dec("30")) || l.Period == nil {
		t.Fatalf("refused PUTs changed the limit: %+v %v", l, err)
	}
	// max 0 is allowed and carries nothing.
	e.rolloverLimit("m", "100", "0")
	e.fillup(ref("m", "k"), "10")
	e.month(12)
	e.terms(ref("m", "k"), "100", "0")
}

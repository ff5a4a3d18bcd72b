package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// The matrix: every operation of a Store × every limit kind, each cell on a
// fresh store with a pinned clock, asserting the exact outcome that package
// bucket's pure rule gives for that kind. A new limit kind is one row of
// matrixKinds; a new operation one row of matrixOps.

// matrixAt is where every cell starts: a Wednesday, in summer time in the
// northern zones and winter time in the southern ones.
var matrixAt = time.Date(2026, 5, 20, 10, 0, 0, 0, time.UTC)

// matrixKind is one limit kind: how it is PUT (capacity 100) and what it
// answers around matrixAt.
type matrixKind struct {
	name string
	spec ledger.LimitSpec
	// stored is the period as stored, with its defaults filled in; nil for
	// a leaky kind.
	stored *ledger.Period
	// bounds are three consecutive period starts: [0, 1) contains
	// matrixAt, [1, 2) is the next period. Empty for a leaky kind.
	bounds [3]string
	// window is the window as stored, its default precision filled in; nil
	// for the other kinds.
	window *ledger.Window
}

var matrixKinds = []matrixKind{
	{name: "leak", spec: ledger.LimitSpec{LeakAmount: dec("10"), LeakPer: time.Hour}},
	{
		name:   "day",
		spec:   ledger.LimitSpec{Period: &ledger.Period{Every: "day", TZ: "America/New_York"}},
		stored: &ledger.Period{Every: "day", TZ: "America/New_York"},
		bounds: [3]string{"2026-05-20T04:00:00Z", "2026-05-21T04:00:00Z", "2026-05-22T04:00:00Z"},
	},
	{
		name:   "week",
		spec:   ledger.LimitSpec{Period: &ledger.Period{Every: "week", TZ: "Asia/Kolkata", StartDay: 3}},
		stored: &ledger.Period{Every: "week", TZ: "Asia/Kolkata", StartDay: 3},
		bounds: [3]string{"2026-05-19T18:30:00Z", "2026-05-26T18:30:00Z", "2026-06-02T18:30:00Z"},
	},
	{
		name:   "month",
		spec:   ledger.LimitSpec{Period: &ledger.Period{Every: "month", TZ: "Europe/Berlin"}},
		stored: &ledger.Period{Every: "month", TZ: "Europe/Berlin", StartDay: 1},
		bounds: [3]string{"2026-04-30T22:00:00Z", "2026-05-31T22:00:00Z", "2026-06-30T22:00:00Z"},
	},
	{
		name:   "quarter",
		spec:   ledger.LimitSpec{Period: &ledger.Period{Every: "quarter", StartDay: 15}},
		stored: &ledger.Period{Every: "quarter", TZ: "UTC", StartDay: 15},
		bounds: [3]string{"2026-04-15T00:00:00Z", "2026-07-15T00:00:00Z", "2026-10-15T00:00:00Z"},
	},
	{
		name:   "year",
		spec:   ledger.LimitSpec{Period: &ledger.Period{Every: "year", TZ: "Pacific/Auckland"}},
		stored: &ledger.Period{Every: "year", TZ: "Pacific/Auckland"},
		bounds: [3]string{"2025-12-31T11:00:00Z", "2026-12-31T11:00:00Z", "2027-12-31T11:00:00Z"},
	},
	{
		name:   "window",
		spec:   ledger.LimitSpec{Window: &ledger.Window{Length: time.Hour}},
		window: &ledger.Window{Length: time.Hour, Precision: time.Minute},
	},
}

// put puts the kind's limit as name, history on.
func (k matrixKind) put(e *env, name string) ledger.Limit {
	e.t.Helper()
	spec := k.spec
	spec.Capacity, spec.History = dec("100"), true
	l, err := e.svc.PutLimit(e.ctx, name, spec)
	if err != nil {
		e.t.Fatalf("PutLimit(%s, %s): %v", name, k.name, err)
	}
	return l
}

// limit is the kind's limit as it must be stored.
func (k matrixKind) limit(name string) ledger.Limit {
	l := ledger.Limit{Name: name, Capacity: dec("100"), History: true}
	if k.stored != nil {
		p := *k.stored
		l.Period = &p
	} else if k.window != nil {
		w := *k.window
		l.Window = &w
	} else {
		l.LeakAmount, l.LeakPer = k.spec.LeakAmount, k.spec.LeakPer
	}
	return l
}

// next is an instant when the level answers differently than at matrixAt:
// the start of the next period, ten hours of leaking (a full bucket), or two
// window lengths on (all that was charged in the first length aged out).
func (k matrixKind) next(t *testing.T) time.Time {
	if k.window != nil {
		return matrixAt.Add(2 * k.window.Length)
	}
	if k.stored == nil {
		return matrixAt.Add(10 * time.Hour)
	}
	return utc(t, k.bounds[1])
}

// checkRule fails unless l has the kind's rule and capacity.
func (k matrixKind) checkRule(t *testing.T, what string, l ledger.Limit) {
	t.Helper()
	want := k.limit(l.Name)
	if !l.Capacity.Equal(want.Capacity) || !l.LeakAmount.Equal(want.LeakAmount) || l.LeakPer != want.LeakPer ||
		(l.Period == nil) != (want.Period == nil) || (l.Period != nil && *l.Period != *want.Period) || l.History != want.History ||
		(l.Window == nil) != (want.Window == nil) || (l.Window != nil && *l.Window != *want.Window) {
		t.Errorf("%s: limit %+v (period %v), want %+v (period %v)", what, l, l.Period, want, want.Period)
	}
}

// checkBounds fails unless [start, end) is the kind's period at now, both
// zero for a leaky kind.
func (k matrixKind) checkBounds(t *testing.T, what string, now, start, end time.Time) {
	t.Helper()
	if k.stored == nil {
		if !start.IsZero() || !end.IsZero() {
			t.Errorf("%s: a %s bucket has a period [%v, %v)", what, k.name, start, end)
		}
		return
	}
	i := 0
	if !now.Before(utc(t, k.bounds[1])) {
		i = 1
	}
	if !start.Equal(utc(t, k.bounds[i])) || !end.Equal(utc(t, k.bounds[i+1])) {
		t.Errorf("%s at %v: period [%v, %v), want [%s, %s)", what, now, start.UTC(), end.UTC(), k.bounds[i], k.bounds[i+1])
	}
}

// cell is one cell of the matrix: a fresh store, its service, the kind and
// a model of every bucket it writes, kept with package bucket's rule.
type cell struct {
	*env
	k      matrixKind
	name   string // the limit's name
	states map[string]bucket.State
}

func (c *cell) rule() bucket.Limit { return c.k.limit(c.name).Rule() }

func (c *cell) ref(key string) ledger.BucketRef { return ref(c.name, key) }

// want is the decision the rule gives for cost in the modelled bucket now.
func (c *cell) want(key, cost string) bucket.Decision {
	return bucket.CanAccept(c.rule(), c.states[key], c.clock.Now(), ledger.Amount(dec(cost)))
}

// same fails unless got is want to the last digit, with the kind's period.
func (c *cell) same(what string, got, want bucket.Decision) {
	c.t.Helper()
	if got.Accepted != want.Accepted || !got.Level.Equal(want.Level) || !got.Held.Equal(want.Held) ||
		!got.Remaining.Equal(want.Remaining) || !got.Capacity.Equal(want.Capacity) || !got.RetryAfter.Equal(want.RetryAfter) ||
		got.NeverFits != want.NeverFits || !got.At.Equal(want.At) || !got.PeriodStart.Equal(want.PeriodStart) || !got.ResetsAt.Equal(want.ResetsAt) {
		c.t.Errorf("%s: got %+v\nwant %+v", what, got, want)
	}
	c.k.checkBounds(c.t, what, c.clock.Now(), got.PeriodStart, got.ResetsAt)
}

// sameState fails unless got is the modelled bucket's state now.
func (c *cell) sameState(what, key string, got ledger.BucketState) {
	c.t.Helper()
	want := ledger.StateOf(ledger.Snapshot{Limit: c.k.limit(c.name), State: c.states[key], Now: c.clock.Now()})
	if !got.Level.Equal(want.Level) || !got.Held.Equal(want.Held) || !got.Remaining.Equal(want.Remaining) ||
		!got.Capacity.Equal(want.Capacity) || !got.UpdatedAt.Equal(want.UpdatedAt) ||
		!got.PeriodStart.Equal(want.PeriodStart) || !got.ResetsAt.Equal(want.ResetsAt) {
		c.t.Errorf("%s: state of %s %+v\nwant %+v", what, key, got, want)
	}
	c.k.checkBounds(c.t, what, c.clock.Now(), got.PeriodStart, got.ResetsAt)
}

// checkState reads the bucket and compares it with the model.
func (c *cell) checkState(what, key string) ledger.BucketState {
	c.t.Helper()
	st := c.state(c.ref(key))
	c.sameState(what, key, st)
	return st
}

// fill charges cost with meta, checks the decision against the rule and
// moves the model on.
func (c *cell) fill(key, cost string, meta ledger.Meta) bucket.Decision {
	c.t.Helper()
	res, err := c.svc.Fillup(c.ctx, []ledger.Item{{Bucket: c.ref(key), Cost: dec(cost), Meta: meta}}, ledger.Idempotency{})
	if err != nil {
		c.t.Fatalf("Fillup(%s, %s): %v", key, cost, err)
	}
	want, ns := bucket.Fillup(c.rule(), c.states[key], c.clock.Now(), ledger.Amount(dec(cost)))
	if !want.Accepted {
		want = c.want(key, cost)
	}
	c.same("fillup "+key+" "+cost, res.Items[0], want)
	if res.Accepted != want.Accepted {
		c.t.Errorf("fillup %s %s: accepted %v, want %v", key, cost, res.Accepted, want.Accepted)
	}
	c.states[key] = ns
	return res.Items[0]
}

// hold reserves amount for ttl with meta and moves the model on.
func (c *cell) hold(key, amount string, ttl time.Duration, meta ledger.Meta) ledger.Reservation {
	c.t.Helper()
	res, err := c.svc.Reserve(c.ctx, c.ref(key), dec(amount), ttl, ledger.Idempotency{}, meta)
	if err != nil {
		c.t.Fatalf("Reserve(%s, %s): %v", key, amount, err)
	}
	now := c.clock.Now()
	want, ns := bucket.Reserve(c.rule(), c.states[key], now, ledger.Amount(dec(amount)), now.Add(ttl))
	if !want.Accepted {
		want = c.want(key, amount)
	}
	c.same("reserve "+key+" "+amount, res.Decision, want)
	if !want.Accepted {
		return res.Reservation
	}
	r := res.Reservation
	if r.ID == "" || r.Bucket != c.ref(key) || !r.Amount.Equal(dec(amount)) || r.State != ledger.Active ||
		!r.CreatedAt.Equal(now) || !r.ExpiresAt.Equal(now.Add(ttl)) {
		c.t.Errorf("reserve %s %s: hold %+v", key, amount, r)
	}
	ns.Holds[len(ns.Holds)-1].ID = r.ID
	c.states[key] = ns
	return r
}

// resolve moves the model through a commit of charge (nil: a release) of
// hold id in key.
func (c *cell) resolve(key, id string, charge *string) {
	s := c.states[key]
	i := slices.IndexFunc(s.Holds, func(h bucket.Hold) bool { return h.ID == id })
	if i < 0 {
		c.t.Fatalf("hold %s not in the model of %s", id, key)
	}
	a := bucket.Amount{}
	if charge != nil {
		a = ledger.Amount(dec(*charge))
	}
	c.states[key] = bucket.Resolve(c.rule(), s, c.clock.Now(), i, a)
}

// entry is a history entry as a cell expects it.
type entry struct {
	event  ledger.Event
	amount string
	hold   string
	at     time.Time
	meta   string // Meta.JSON(), "" for none
}

func (en entry) String() string {
	return fmt.Sprintf("%s %s hold=%q at=%s meta=%s", en.event, en.amount, en.hold, en.at.UTC().Format(time.RFC3339Nano), en.meta)
}

// checkHistory lists the bucket's whole history in pages of size and
// compares it, newest first, with want (given oldest first).
func (c *cell) checkHistory(what, key string, size int, want []entry) {
	c.t.Helper()
	var got []string
	cursor := ""
	for range 100 {
		page, next, err := c.svc.History(c.ctx, c.ref(key), cursor, size)
		if err != nil {
			c.t.Fatalf("%s: History: %v", what, err)
		}
		if len(page) > size || (next != "" && len(page) != size) {
			c.t.Fatalf("%s: a page of %d entries (size %d) with next %q", what, len(page), size, next)
		}
		for _, en := range page {
			got = append(got, entry{en.Event, en.Amount.String(), en.ReservationID, en.Time, en.Meta.JSON()}.String())
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	wantS := make([]string, len(want))
	for i, en := range want {
		en.amount = dec(en.amount).String()
		wantS[len(want)-1-i] = en.String()
	}
	if !slices.Equal(got, wantS) {
		c.t.Errorf("%s: history of %s\n%s\nwant\n%s", what, key, lines(got), lines(wantS))
	}
}

func lines(s []string) string {
	out := ""
	for _, l := range s {
		out += "  " + l + "\n"
	}
	return out
}

func str(s string) *string { return &s }

// matrixOps are the operations of the matrix, each run for every kind.
var matrixOps = []struct {
	name string
	fn   func(t *testing.T, c *cell)
}{
	{"PutGetLimit", matrixPutGet},
	{"ListLimits", matrixListLimits},
	{"DeleteLimit", matrixDelete},
	{"CanAccept", matrixCanAccept},
	{"State", matrixState},
	{"Fillup", matrixFillup},
	{"MultiBucket", matrixMultiBucket},
	{"ReserveCommit", matrixReserveCommit},
	{"ReserveRelease", matrixReserveRelease},
	{"HoldExpiry", matrixHoldExpiry},
	{"Drain", matrixDrain},
	{"History", matrixHistory},
	{"HistoryOff", matrixHistoryOff},
	{"ListBuckets", matrixListBuckets},
	{"ListHolds", matrixListHolds},
	{"Idempotency", matrixIdempotency},
	{"SwitchKind", matrixSwitchKind},
}

// testMatrix runs every operation × every kind, each cell on a fresh store.
func testMatrix(t *testing.T, factory Factory) {
	for _, k := range matrixKinds {
		t.Run(k.name, func(t *testing.T) {
			for _, op := range matrixOps {
				t.Run(op.name, func(t *testing.T) {
					clock := NewClock()
					clock.Set(matrixAt)
					store := factory(t, clock)
					e := &env{t: t, clock: clock, store: store, svc: ledger.NewService(store), ctx: context.Background()}
					op.fn(t, &cell{env: e, k: k, name: "m-" + k.name, states: map[string]bucket.State{}})
				})
			}
		})
	}
}

// matrixPutGet: PUT returns the limit as stored (defaults filled in, the
// other kind's fields empty), GET returns the same, a second PUT keeps
// CreatedAt and moves UpdatedAt.
func matrixPutGet(t *testing.T, c *cell) {
	l := c.k.put(c.env, c.name)
	c.k.checkRule(t, "PUT", l)
	if !l.CreatedAt.Equal(matrixAt) || !l.UpdatedAt.Equal(matrixAt) {
		t.Errorf("PUT: created %v updated %v, want %v", l.CreatedAt, l.UpdatedAt, matrixAt)
	}
	got, err := c.svc.GetLimit(c.ctx, c.name)
	if err != nil {
		t.Fatal(err)
	}
	c.k.checkRule(t, "GET", got)
	if got.Name != c.name || !got.CreatedAt.Equal(matrixAt) || !got.UpdatedAt.Equal(matrixAt) {
		t.Errorf("GET: %+v", got)
	}
	c.clock.Advance(time.Minute)
	l = c.k.put(c.env, c.name)
	c.k.checkRule(t, "second PUT", l)
	if !l.CreatedAt.Equal(matrixAt) || !l.UpdatedAt.Equal(matrixAt.Add(time.Minute)) {
		t.Errorf("second PUT: created %v updated %v", l.CreatedAt, l.UpdatedAt)
	}
}

// matrixListLimits: limits of the kind are listed by name, in pages, each
// with its rule.
func matrixListLimits(t *testing.T, c *cell) {
	names := []string{c.name + "-c", c.name + "-a", c.name + "-b"}
	for _, n := range names {
		c.k.put(c.env, n)
	}
	slices.Sort(names)
	var got []string
	after := ""
	for range 10 {
		page, err := c.svc.ListLimits(c.ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range page {
			c.k.checkRule(t, "listed "+l.Name, l)
			got = append(got, l.Name)
		}
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].Name
	}
	if !slices.Equal(got, names) {
		t.Errorf("listed %q, want %q", got, names)
	}
}

// matrixDelete: DELETE removes the limit with its buckets and holds: every
// call on it is ErrLimitNotFound, its hold is gone, and a new PUT starts
// empty.
func matrixDelete(t *testing.T, c *cell) {
	c.k.put(c.env, c.name)
	c.fill("a", "60", nil)
	h := c.hold("a", "10", time.Hour, nil)
	if err := c.svc.DeleteLimit(c.ctx, c.name); err != nil {
		t.Fatal(err)
	}
	notFound := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ledger.ErrLimitNotFound) {
			t.Errorf("%s after DELETE: %v, want ErrLimitNotFound", what, err)
		}
	}
	_, err := c.svc.GetLimit(c.ctx, c.name)
	notFound("GetLimit", err)
	notFound("DeleteLimit", c.svc.DeleteLimit(c.ctx, c.name))
	_, err = c.svc.Bucket(c.ctx, c.ref("a"))
	notFound("Bucket", err)
	_, err = c.svc.CanAccept(c.ctx, c.ref("a"), dec("1"))
	notFound("CanAccept", err)
	_, err = c.svc.Fillup(c.ctx, []ledger.Item{{Bucket: c.ref("a"), Cost: dec("1")}}, ledger.Idempotency{})
	notFound("Fillup", err)
	_, err = c.svc.Drain(c.ctx, c.ref("a"), dec("1"), ledger.Idempotency{}, nil)
	notFound("Drain", err)
	_, err = c.svc.Reserve(c.ctx, c.ref("a"), dec("1"), time.Minute, ledger.Idempotency{}, nil)
	notFound("Reserve", err)
	_, _, err = c.svc.History(c.ctx, c.ref("a"), "", 10)
	notFound("History", err)
	_, _, err = c.svc.ListBuckets(c.ctx, c.name, "", 10)
	notFound("ListBuckets", err)
	_, err = c.svc.ListHolds(c.ctx, c.ref("a"))
	notFound("ListHolds", err)
	if _, err := c.svc.Reservation(c.ctx, h.ID); !errors.Is(err, ledger.ErrReservationNotFound) {
		t.Errorf("Reservation after DELETE: %v", err)
	}

	c.k.put(c.env, c.name)
	c.states = map[string]bucket.State{}
	c.checkState("after a new PUT", "a")
	if bs, _, err := c.svc.ListBuckets(c.ctx, c.name, "", 10); err != nil || len(bs) != 0 {
		t.Errorf("buckets after a new PUT: %+v %v", bs, err)
	}
	if hs, err := c.svc.ListHolds(c.ctx, c.ref("a")); err != nil || len(hs) != 0 {
		t.Errorf("holds after a new PUT: %+v %v", hs, err)
	}
	c.checkHistory("after a new PUT", "a", 10, nil)
}

// matrixCanAccept: answers as the rule does (accepted, denied with its
// retry_after, never) before and after time passes, and writes nothing.
func matrixCanAccept(t *testing.T, c *cell) {
	c.k.put(c.env, c.name)
	for _, cost := range []string{"0", "100", "100.000001"} {
		c.same("empty, "+cost, c.can(c.ref("a"), cost), c.want("a", cost))
	}
	c.fill("a", "60", nil)
	c.hold("a", "15", 24*time.Hour, nil)
	for _, step := range []time.Duration{30 * time.Minute, c.k.next(t).Sub(matrixAt) - 30*time.Minute} {
		c.clock.Advance(step)
		for _, cost := range []string{"0", "25", "25.000001", "40", "85", "100", "101"} {
			for range 2 { // a second ask: the first wrote nothing
				c.same(fmt.Sprintf("at %v, %s", c.clock.Now(), cost), c.can(c.ref("a"), cost), c.want("a", cost))
			}
		}
		c.checkState("after CanAccepts", "a")
	}
}

// matrixState: a bucket never written is empty with the full capacity;
// a written one follows the rule as time passes and periods turn.
func matrixState(t *testing.T, c *cell) {
	c.k.put(c.env, c.name)
	st := c.checkState("never written", "a")
	eq(t, "remaining of an empty bucket", st.Remaining, "100")
	if !st.UpdatedAt.IsZero() {
		t.Errorf("never written, updated at %v", st.UpdatedAt)
	}
	c.fill("a", "60", nil)
	c.hold("a", "20", 24*time.Hour, nil)
	st = c.checkState("after a fillup", "a")
	eq(t, "level", st.Level, "60")
	eq(t, "held", st.Held, "20")
	eq(t, "remaining", st.Remaining, "20")
	c.clock.Advance(30 * time.Minute)
	c.checkState("30 minutes on", "a")
	c.clock.Set(c.k.next(t))
	st = c.checkState("the next period (or ten hours of leak)", "a")
	eq(t, "level then", st.Level, "0")
}

// matrixFillup: accepted while it fits, denied with the rule's
// retry_after (nothing charged), never-fits above capacity, a zero cost a
// no-op; then a new period (or the leak) makes room.
func matrixFillup(t *testing.T, c *cell) {
	c.k.put(c.env, c.name)
	c.fill("a", "60", nil)
	c.clock.Advance(30 * time.Minute)
	c.fill("a", "45.5", nil)
	c.fill("a", "40", nil)
	c.fill("a", "0", nil)
	c.fill("a", "100.000001", nil)
	c.checkState("after a denial", "a")
	c.clock.Set(c.k.next(t))
	d := c.fill("a", "100", nil)
	if !d.Accepted {
		t.Errorf("a full bucket after the next period (or ten hours): %+v", d)
	}
	c.checkState("at the end", "a")
}

// matrixMultiBucket: two buckets of the kind charged all or nothing; a
// denial by one charges neither. Keys share a hash slot ({mx}).
func matrixMultiBucket(t *testing.T, c *cell) {
	c.k.put(c.env, c.name)
	call := func(ca, cb string, meta ledger.Meta) ledger.FillupResult {
		t.Helper()
		items := []ledger.Item{{Bucket: c.ref("{mx}a"), Cost: dec(ca), Meta: meta}, {Bucket: c.ref("{mx}b"), Cost: dec(cb), Meta: meta}}
		res, err := c.svc.Fillup(c.ctx, items, ledger.Idempotency{})
		if err != nil {
			t.Fatalf("multi-bucket %s+%s: %v", ca, cb, err)
		}
		now := c.clock.Now()
		da, sa := bucket.Fillup(c.rule(), c.states["{mx}a"], now, ledger.Amount(dec(ca)))
		db, sb := bucket.Fillup(c.rule(), c.states["{mx}b"], now, ledger.Amount(dec(cb)))
		accepted := da.Accepted && db.Accepted
		if res.Accepted != accepted || len(res.Items) != 2 {
			t.Fatalf("multi-bucket %s+%s: %+v, want accepted %v", ca, cb, res, accepted)
		}
		if accepted {
			c.states["{mx}a"], c.states["{mx}b"] = sa, sb
		} else { // each item answers as its bucket is, accepted when it alone would fit
			da, db = c.want("{mx}a", ca), c.want("{mx}b", cb)
		}
		c.same("item a", res.Items[0], da)
		c.same("item b", res.Items[1], db)
		return res
	}
	call("30", "70", ledger.Meta{"call": "1"})
	c.clock.Advance(30 * time.Minute)
	call("10", "36", nil) // b is full: neither is charged
	c.checkState("a after the denied call", "{mx}a")
	c.checkState("b after the denied call", "{mx}b")
	call("10", "0", ledger.Meta{"call": "3"}) // a zero cost: no entry in b
	c.checkHistory("a", "{mx}a", 10, []entry{
		{ledger.EventFillup, "30", "", matrixAt, `{"call":"1"}`},
		{ledger.EventFillup, "10", "", matrixAt.Add(30 * time.Minute), `{"call":"3"}`},
	})
	c.checkHistory("b", "{mx}b", 10, []entry{{ledger.EventFillup, "70", "", matrixAt, `{"call":"1"}`}})
	c.clock.Set(c.k.next(t))
	call("90", "100", ledger.Meta{"call": "4"})
	// History older than 30 days may be pruned: the newest entry only.
	for key, cost := range map[string]string{"{mx}a": "90", "{mx}b": "100"} {
		en, _, err := c.svc.History(c.ctx, c.ref(key), "", 1)
		want := entry{ledger.EventFillup, cost, "", c.k.next(t), `{"call":"4"}`}.String()
		if err != nil || len(en) != 1 || (entry{en[0].Event, en[0].Amount.String(), en[0].ReservationID, en[0].Time, en[0].Meta.JSON()}).String() != want {
			t.Errorf("newest entry of %s: %+v %v, want %s", key, en, err, want)
		}
	}
}

// matrixReserveCommit: a hold counts in held at once; a commit of less
// than the hold charges the period (or level) of the commit; the hold is
// committed with its amount; a denied reserve holds nothing. The hold is
// made an hour before the next period (or the leak's end) and committed an
// hour into it.
func matrixReserveCommit(t *testing.T, c *cell) {
	c.k.put(c.env, c.name)
	c.clock.Set(c.k.next(t).Add(-time.Hour))
	c.fill("a", "50", nil)
	h := c.hold("a", "30", 24*time.Hour, ledger.Meta{"job": "j1"})
	c.hold("a", "20.000001", time.Hour, nil) // denied
	c.clock.Set(c.k.next(t).Add(time.Hour))
	out, err := c.svc.Commit(c.ctx, h.ID, decimal.NewNullDecimal(dec("25")), false, ledger.Idempotency{}, nil)
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	c.resolve("a", h.ID, str("25"))
	c.sameState("commit", "a", out.Bucket)
	if out.Reservation.State != ledger.Committed || !out.Reservation.CommittedAmount.Valid || !out.Reservation.CommittedAmount.Decimal.Equal(dec("25")) {
		t.Errorf("committed hold %+v", out.Reservation)
	}
	got, err := c.svc.Reservation(c.ctx, h.ID)
	if err != nil || got.State != ledger.Committed || !got.ResolvedAt.Equal(c.clock.Now()) {
		t.Errorf("Reservation after commit: %+v %v", got, err)
	}
	c.checkState("after the commit", "a")

	// The same commit again: the hold as it is, nothing charged; another
	// amount, or a release, is refused as closed.
	c.clock.Advance(time.Minute)
	if out, err := c.svc.Commit(c.ctx, h.ID, decimal.NewNullDecimal(dec("25")), false, ledger.Idempotency{}, nil); err != nil {
		t.Errorf("the same commit again: %v", err)
	} else {
		c.sameState("the same commit again", "a", out.Bucket)
	}
	var ref *ledger.Refusal
	if _, err := c.svc.Commit(c.ctx, h.ID, decimal.NewNullDecimal(dec("26")), false, ledger.Idempotency{}, nil); !errors.As(err, &ref) || ref.Code != ledger.RefusalClosed {
		t.Errorf("a commit of another amount: %v", err)
	}
	if _, err := c.svc.Release(c.ctx, h.ID, ledger.Idempotency{}, nil); !errors.As(err, &ref) || ref.Code != ledger.RefusalClosed {
		t.Errorf("a release after the commit: %v", err)
	}

	// Above the hold: refused without overrun, charged past capacity with
	// it; later calls are denied until the level is back (next period, or
	// the leak).
	h2 := c.hold("a", "10", time.Hour, nil)
	if _, err := c.svc.Commit(c.ctx, h2.ID, decimal.NewNullDecimal(dec("90")), false, ledger.Idempotency{}, nil); !errors.As(err, &ref) || ref.Code != ledger.RefusalExceedsHold {
		t.Errorf("a commit above the hold: %v", err)
	}
	c.checkState("after the refused commit", "a")
	out, err = c.svc.Commit(c.ctx, h2.ID, decimal.NewNullDecimal(dec("90")), true, ledger.Idempotency{}, nil)
	if err != nil {
		t.Fatalf("overrun commit: %v", err)
	}
	c.resolve("a", h2.ID, str("90"))
	c.sameState("overrun commit", "a", out.Bucket)
	if out.Bucket.Level.Cmp(ledger.Amount(dec("100"))) <= 0 || !out.Bucket.Remaining.IsZero() {
		t.Errorf("an overrun commit left the bucket at %+v", out.Bucket)
	}
	c.fill("a", "1", nil) // denied, with the rule's retry_after
	c.clock.Advance(5 * time.Hour)
	c.checkState("five hours later", "a")
	c.fill("a", "1", nil)
}

// matrixReserveRelease: a released hold charges nothing and frees its
// amount; releasing again answers the same.
func matrixReserveRelease(t *testing.T, c *cell) {
	c.k.put(c.env, c.name)
	c.fill("a", "50", nil)
	h := c.hold("a", "50", time.Hour, nil)
	c.clock.Advance(30 * time.Minute)
	c.same("full with the hold", c.can(c.ref("a"), "30"), c.want("a", "30"))
	for i := range 2 {
		out, err := c.svc.Release(c.ctx, h.ID, ledger.Idempotency{}, nil)
		if err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
		if i == 0 {
			c.resolve("a", h.ID, nil)
		}
		c.sameState("release", "a", out.Bucket)
		if out.Reservation.State != ledger.Released || out.Reservation.CommittedAmount.Valid {
			t.Errorf("released hold %+v", out.Reservation)
		}
	}
	c.same("after the release", c.can(c.ref("a"), "30"), c.want("a", "30"))
}

// matrixHoldExpiry: at expires_at a hold stops counting, reads show it
// expired, commit and release are refused, and history records the expiry
// at expires_at without meta.
func matrixHoldExpiry(t *testing.T, c *cell) {
	c.k.put(c.env, c.name)
	c.fill("a", "40", nil)
	h := c.hold("a", "60", 10*time.Minute, ledger.Meta{"job": "exp"})
	c.clock.Advance(10*time.Minute - time.Microsecond)
	st := c.checkState("a microsecond before expiry", "a")
	eq(t, "held before expiry", st.Held, "60")
	c.clock.Advance(time.Microsecond)
	st = c.checkState("at expiry", "a")
	eq(t, "held at expiry", st.Held, "0")
	if hs, err := c.svc.ListHolds(c.ctx, c.ref("a")); err != nil || len(hs) != 0 {
		t.Errorf("holds at expiry: %+v %v", hs, err)
	}
	got, err := c.svc.Reservation(c.ctx, h.ID)
	if err != nil || got.State != ledger.Expired {
		t.Errorf("Reservation at expiry: %+v %v", got, err)
	}
	var ref *ledger.Refusal
	if _, err := c.svc.Commit(c.ctx, h.ID, decimal.NullDecimal{}, false, ledger.Idempotency{}, nil); !errors.As(err, &ref) || ref.Code != ledger.RefusalExpired {
		t.Errorf("commit after expiry: %v", err)
	}
	if _, err := c.svc.Release(c.ctx, h.ID, ledger.Idempotency{}, nil); !errors.As(err, &ref) || ref.Code != ledger.RefusalExpired {
		t.Errorf("release after expiry: %v", err)
	}
	c.states["a"], _ = bucket.Expire(c.states["a"], c.clock.Now())
	c.fill("a", "60", nil)
	c.checkHistory("expiry", "a", 10, []entry{
		{ledger.EventFillup, "40", "", matrixAt, ""},
		{ledger.EventReserved, "60", h.ID, matrixAt, `{"job":"exp"}`},
		{ledger.EventExpired, "60", h.ID, h.ExpiresAt, ""},
		{ledger.EventFillup, "60", "", h.ExpiresAt, ""},
	})
}

// matrixDrain: removes what there is, clamped at zero, with the rule's
// level; a bucket at zero gives nothing back.
func matrixDrain(t *testing.T, c *cell) {
	c.k.put(c.env, c.name)
	c.fill("a", "60", nil)
	want := []entry{{ledger.EventFillup, "60", "", matrixAt, ""}}
	drain := func(amount string) {
		t.Helper()
		meta := ledger.Meta{"drain": amount}
		res, err := c.svc.Drain(c.ctx, c.ref("a"), dec(amount), ledger.Idempotency{}, meta)
		if err != nil {
			t.Fatal(err)
		}
		removed, ns := bucket.Drain(c.rule(), c.states["a"], c.clock.Now(), ledger.Amount(dec(amount)))
		c.states["a"] = ns
		eq(t, "removed by drain "+amount, res.Removed, removed.String())
		c.sameState("drain "+amount, "a", res.Bucket)
		if removed.Sign() > 0 { // a drain that removes nothing is a no-op
			want = append(want, entry{ledger.EventDrain, removed.String(), "", c.clock.Now(), meta.JSON()})
		}
	}
	c.clock.Advance(30 * time.Minute)
	for _, amount := range []string{"25", "100", "5", "0"} {
		drain(amount)
	}
	eq(t, "level after the drains", c.checkState("after the drains", "a").Level, "0")
	c.fill("a", "50", nil)
	want = append(want, entry{ledger.EventFillup, "50", "", c.clock.Now(), ""})
	c.clock.Set(c.k.next(t)) // the level is 0 again
	drain("10")
	c.fill("a", "20", nil)
	want = append(want, entry{ledger.EventFillup, "20", "", c.clock.Now(), ""})
	c.clock.Advance(time.Minute)
	drain("5")
	eq(t, "level after the last drain", c.checkState("at the end", "a").Level, c.states["a"].Level.String())
	if c.k.next(t).Sub(matrixAt) <= 30*24*time.Hour { // older history may be pruned
		c.checkHistory("drains", "a", 10, want)
	}
}

// matrixHistory: every event type with the meta of the call that made it,
// each at the store's clock, listed newest first in pages.
func matrixHistory(t *testing.T, c *cell) {
	c.k.put(c.env, c.name)
	var want []entry
	at := func() time.Time { return c.clock.Now() }
	c.fill("a", "20", ledger.Meta{"op": "fillup"})
	want = append(want, entry{ledger.EventFillup, "20", "", at(), `{"op":"fillup"}`})
	c.fill("a", "1000", ledger.Meta{"op": "denied"}) // denied: no entry
	c.fill("a", "0", ledger.Meta{"op": "zero"})      // zero: no entry
	c.clock.Advance(time.Minute)
	h1 := c.hold("a", "10", time.Hour, ledger.Meta{"op": "reserve1"})
	want = append(want, entry{ledger.EventReserved, "10", h1.ID, at(), `{"op":"reserve1"}`})
	h2 := c.hold("a", "5", time.Hour, ledger.Meta{"op": "reserve2"})
	want = append(want, entry{ledger.EventReserved, "5", h2.ID, at(), `{"op":"reserve2"}`})
	h3 := c.hold("a", "7", 2*time.Minute, ledger.Meta{"op": "reserve3"})
	want = append(want, entry{ledger.EventReserved, "7", h3.ID, at(), `{"op":"reserve3"}`})
	c.clock.Advance(time.Minute)
	if _, err := c.svc.Commit(c.ctx, h1.ID, decimal.NewNullDecimal(dec("8")), false, ledger.Idempotency{}, ledger.Meta{"op": "commit"}); err != nil {
		t.Fatal(err)
	}
	c.resolve("a", h1.ID, str("8"))
	want = append(want, entry{ledger.EventCommitted, "8", h1.ID, at(), `{"op":"commit"}`})
	if _, err := c.svc.Release(c.ctx, h2.ID, ledger.Idempotency{}, ledger.Meta{"op": "release"}); err != nil {
		t.Fatal(err)
	}
	c.resolve("a", h2.ID, nil)
	want = append(want, entry{ledger.EventReleased, "5", h2.ID, at(), `{"op":"release"}`})
	c.clock.Advance(time.Minute)
	res, err := c.svc.Drain(c.ctx, c.ref("a"), dec("3"), ledger.Idempotency{}, ledger.Meta{"op": "drain"})
	if err != nil {
		t.Fatal(err)
	}
	removed, ns := bucket.Drain(c.rule(), c.states["a"], at(), ledger.Amount(dec("3")))
	c.states["a"] = ns
	eq(t, "removed", res.Removed, "3")
	// h3 expired at this step's instant: the drain settled it first.
	want = append(want, entry{ledger.EventExpired, "7", h3.ID, h3.ExpiresAt, ""})
	want = append(want, entry{ledger.EventDrain, removed.String(), "", at(), `{"op":"drain"}`})
	c.checkState("after the events", "a")
	for _, size := range []int{100, 3, 1} {
		c.checkHistory(fmt.Sprintf("pages of %d", size), "a", size, want)
	}
	// Another bucket's history is its own.
	c.checkHistory("another bucket", "b", 10, nil)
}

// matrixHistoryOff: a limit of the kind with history off answers every
// call as with history on and lists no entries, also after its expiry.
func matrixHistoryOff(t *testing.T, c *cell) {
	spec := c.k.spec
	spec.Capacity = dec("100")
	if _, err := c.svc.PutLimit(c.ctx, c.name, spec); err != nil {
		t.Fatal(err)
	}
	c.fill("a", "30", ledger.Meta{"op": "fillup"})
	h := c.hold("a", "20", time.Minute, ledger.Meta{"op": "reserve"})
	h2 := c.hold("a", "5", time.Hour, nil)
	if _, err := c.svc.Release(c.ctx, h2.ID, ledger.Idempotency{}, ledger.Meta{"op": "release"}); err != nil {
		t.Fatal(err)
	}
	c.resolve("a", h2.ID, nil)
	c.clock.Advance(time.Minute)
	c.states["a"], _ = bucket.Expire(c.states["a"], c.clock.Now())
	if _, err := c.svc.Drain(c.ctx, c.ref("a"), dec("1"), ledger.Idempotency{}, nil); err != nil {
		t.Fatal(err)
	}
	_, c.states["a"] = bucket.Drain(c.rule(), c.states["a"], c.clock.Now(), ledger.Amount(dec("1")))
	if got, err := c.svc.Reservation(c.ctx, h.ID); err != nil || got.State != ledger.Expired {
		t.Errorf("expired hold: %+v %v", got, err)
	}
	c.checkState("history off", "a")
	c.checkHistory("history off", "a", 10, nil)
}

// matrixListBuckets: a limit's buckets in byte order of key, each with the
// state Bucket reports, in pages, across a new period (or the leak).
func matrixListBuckets(t *testing.T, c *cell) {
	c.k.put(c.env, c.name)
	keys := []string{"b", "a", "é", "{t}c", "A"}
	for i, k := range keys {
		c.fill(k, fmt.Sprint(10*(i+1)), nil)
	}
	c.hold("a", "5", 24*time.Hour, nil)
	c.can(c.ref("never"), "1") // read only: not listed
	slices.Sort(keys)
	check := func(when string) {
		t.Helper()
		var got []string
		cursor := ""
		for range 10 {
			page, next, err := c.svc.ListBuckets(c.ctx, c.name, cursor, 2)
			if err != nil {
				t.Fatalf("%s: ListBuckets: %v", when, err)
			}
			for _, b := range page {
				got = append(got, b.Key)
				c.sameState(when+" listed", b.Key, b.BucketState)
			}
			if cursor = next; cursor == "" {
				break
			}
		}
		if !slices.Equal(got, keys) {
			t.Errorf("%s: listed %q, want %q", when, got, keys)
		}
		snaps, err := c.store.ListBuckets(c.ctx, c.name, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range snaps {
			c.k.checkRule(t, when+" snapshot of "+s.Key, s.Limit)
			if !s.Now.Equal(c.clock.Now()) {
				t.Errorf("%s: snapshot of %s at %v", when, s.Key, s.Now)
			}
		}
	}
	check("now")
	c.clock.Advance(30 * time.Minute)
	check("30 minutes on")
	c.clock.Set(c.k.next(t))
	check("the next period (or ten hours on)")
}

// matrixListHolds: a bucket's active holds, oldest first, each as
// Reservation returns it; resolved and expired ones are not listed.
func matrixListHolds(t *testing.T, c *cell) {
	c.k.put(c.env, c.name)
	check := func(when string, want ...ledger.Reservation) {
		t.Helper()
		got, err := c.svc.ListHolds(c.ctx, c.ref("a"))
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: holds %+v, want %+v", when, got, want)
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.ID != w.ID || g.Bucket != w.Bucket || !g.Amount.Equal(w.Amount) || g.State != ledger.Active ||
				!g.CreatedAt.Equal(w.CreatedAt) || !g.ExpiresAt.Equal(w.ExpiresAt) {
				t.Errorf("%s: hold %d %+v, want %+v", when, i, g, w)
			}
		}
	}
	check("none")
	h1 := c.hold("a", "10", time.Hour, nil)
	c.clock.Advance(time.Second)
	h2 := c.hold("a", "20", 10*time.Minute, nil)
	c.clock.Advance(time.Second)
	h3 := c.hold("a", "30", 24*time.Hour, nil) // outlives the day kind's period
	c.hold("b", "1", time.Hour, nil)
	check("three", h1, h2, h3)
	if _, err := c.svc.Release(c.ctx, h1.ID, ledger.Idempotency{}, nil); err != nil {
		t.Fatal(err)
	}
	check("one released", h2, h3)
	c.clock.Set(h2.ExpiresAt)
	check("one expired", h3)
	c.clock.Set(h3.ExpiresAt.Add(-time.Microsecond))
	check("a microsecond before the last expires", h3)
	c.clock.Set(h3.ExpiresAt)
	check("all expired")
}

// matrixIdempotency: every state-changing call with an Idempotency-Key,
// made an hour before the next period (or the end of ten hours' leak) and
// replayed an hour into it (within IdempotencyTTL), answers as it first did
// (the original period_start and resets_at) and changes nothing: no new
// history entry, the bucket as it was.
func matrixIdempotency(t *testing.T, c *cell) {
	c.k.put(c.env, c.name)
	start := c.k.next(t).Add(-time.Hour)
	c.clock.Set(start)
	key := func(op string) ledger.Idempotency {
		return ledger.Idempotency{Scope: op + ":" + c.name + "/{i}a", Key: "k-" + op, Hash: "h-" + op}
	}
	r := c.ref("{i}a")
	var calls []func() (any, bool, error)
	var firsts []any // the answers of the first calls
	call := func(f func() (any, bool, error)) any {
		t.Helper()
		v, replayed, err := f()
		if err != nil || replayed {
			t.Fatalf("first call: %+v replayed %v %v", v, replayed, err)
		}
		calls, firsts = append(calls, f), append(firsts, v)
		return v
	}
	call(func() (any, bool, error) {
		res, err := c.svc.Fillup(c.ctx, []ledger.Item{{Bucket: r, Cost: dec("40"), Meta: ledger.Meta{"op": "fillup"}}, {Bucket: c.ref("{i}b"), Cost: dec("70")}}, key("fillup"))
		return res.Items, res.Replayed, err
	})
	call(func() (any, bool, error) {
		res, err := c.svc.Fillup(c.ctx, []ledger.Item{{Bucket: r, Cost: dec("61")}}, key("denied"))
		return res.Items, res.Replayed, err
	})
	h := call(func() (any, bool, error) {
		res, err := c.svc.Reserve(c.ctx, r, dec("20"), time.Hour, key("reserve"), nil)
		return res.Reservation, res.Replayed, err
	}).(ledger.Reservation)
	h2 := call(func() (any, bool, error) {
		res, err := c.svc.Reserve(c.ctx, r, dec("5"), time.Hour, key("reserve2"), nil)
		return res.Reservation, res.Replayed, err
	}).(ledger.Reservation)
	c.clock.Advance(time.Minute)
	call(func() (any, bool, error) {
		res, err := c.svc.Commit(c.ctx, h.ID, decimal.NewNullDecimal(dec("15")), false, key("commit"), nil)
		return res.Bucket, res.Replayed, err
	})
	call(func() (any, bool, error) {
		res, err := c.svc.Release(c.ctx, h2.ID, key("release"), nil)
		return res.Bucket, res.Replayed, err
	})
	call(func() (any, bool, error) {
		res, err := c.svc.Drain(c.ctx, r, dec("7"), key("drain"), nil)
		return res, res.Replayed, err
	})
	before, _, err := c.svc.History(c.ctx, r, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != 6 {
		t.Fatalf("history before the replays: %+v", before)
	}
	stBefore := c.state(r)
	c.clock.Set(c.k.next(t).Add(time.Hour))
	for i, f := range calls {
		v, replayed, err := f()
		if err != nil || !replayed {
			t.Errorf("replay %d: replayed %v, %v", i, replayed, err)
			continue
		}
		if dr, ok := v.(ledger.DrainResult); ok {
			dr.Replayed = false
			v = dr
		}
		if fmt.Sprintf("%+v", v) != fmt.Sprintf("%+v", firsts[i]) {
			t.Errorf("replay %d after the clock moved:\n%+v\nwant\n%+v", i, v, firsts[i])
		}
	}
	after, _, err := c.svc.History(c.ctx, r, "", 100)
	if err != nil || len(after) != len(before) {
		t.Errorf("history after the replays: %d entries, want %d (%v)", len(after), len(before), err)
	}
	c.clock.Set(start.Add(time.Minute))
	if st := c.state(r); fmt.Sprintf("%+v", st) != fmt.Sprintf("%+v", stBefore) {
		t.Errorf("bucket after the replays %+v, want %+v", st, stBefore)
	}
}

// matrixSwitchKind: a PUT to every other kind keeps each bucket's level as
// of the PUT, held amounts too; the new rule governs from then on.
func matrixSwitchKind(t *testing.T, c *cell) {
	for _, o := range matrixKinds {
		if o.name == c.k.name {
			continue
		}
		t.Run("to-"+o.name, func(t *testing.T) {
			ev := *c.env
			ev.t = t
			c.clock.Set(matrixAt)
			name := c.name + "-" + o.name
			old := &cell{env: &ev, k: c.k, name: name, states: map[string]bucket.State{}}
			old.k.put(&ev, name)
			old.fill("a", "60", nil)
			old.hold("a", "10", 24*time.Hour, nil)
			c.clock.Advance(30 * time.Minute)
			// The level as of the PUT is kept as written at the PUT.
			s := old.states["a"]
			s, _ = bucket.Switch(old.rule(), s, c.clock.Now())
			l := o.put(&ev, name)
			o.checkRule(t, "after the switch", l)
			nw := &cell{env: &ev, k: o, name: name, states: map[string]bucket.State{"a": s}}
			nw.checkState("after the switch", "a")
			nw.fill("a", "5", nil)
			nw.clock.Set(o.next(t))
			nw.checkState("the new rule's next period (or ten hours)", "a")
		})
	}
}

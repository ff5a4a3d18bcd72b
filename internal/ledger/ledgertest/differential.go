package ledgertest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// differentialSteps is how many random operations each limit shape gets.
const differentialSteps = 600

// modelHold is a hold as the reference model tracks it.
type modelHold struct {
	id      string
	amount  decimal.Decimal
	expires time.Time
	state   ledger.ReservationState
	charged decimal.Decimal
	owner   int // index of its bucket
}

// model is one bucket replayed with the pure rule of package bucket alone.
type model struct {
	limit bucket.Limit
	level decimal.Decimal
	upd   time.Time
	slots []bucket.Slot // a window bucket's slots
	holds []*modelHold  // active holds, oldest first
}

func (m *model) state() bucket.State {
	s := bucket.State{Level: ledger.Amount(m.level), Updated: m.upd, Slots: m.slots}
	for _, h := range m.holds {
		s.Holds = append(s.Holds, bucket.Hold{Amount: ledger.Amount(h.amount), ExpiresAt: h.expires})
	}
	return s
}

// set takes a new state from the rule after a step that settled the bucket
// (which drops the holds expired by now).
func (m *model) set(s bucket.State, now time.Time) {
	m.level, m.upd, m.slots = s.Level.Decimal(), s.Updated, s.Slots
	var kept []*modelHold
	for _, h := range m.holds {
		if h.expires.After(now) {
			kept = append(kept, h)
		} else {
			h.state = ledger.Expired
		}
	}
	m.holds = kept
}

// differentialShape is a limit that testDifferential replays: a leaking one
// (capacity, amount per per), a periodic one or a windowed one.
type differentialShape struct {
	capacity, amount string
	per              time.Duration
	period           *ledger.Period // with per the scale of the clock's steps
	from             string         // where a periodic shape pins the clock: shortly before a reset
	window           *ledger.Window // with per the scale of the clock's steps
}

// differentialShapes are the limits testDifferential replays, at magnitudes
// from 10^-6 to 10^12 and around 2^53 units.
var differentialShapes = []differentialShape{
	{"10", "1", time.Second, nil, "", nil},
	{"5000.00", "5000.00", 720 * time.Hour, nil, "", nil},
	{"1000000000000", "999999999999.999999", ledger.MaxPer, nil, "", nil},
	{"9007199254.740993", "3.000001", 7 * time.Microsecond, nil, "", nil},
	{"9007.199254", "0.000001", time.Microsecond, nil, "", nil},
	{"0.000003", "0.000001", time.Hour, nil, "", nil},
	{"123456789.123456", "987654.321", 3*time.Second + 7*time.Microsecond, nil, "", nil},
	{"100", "", 48 * time.Hour, &ledger.Period{Every: "day", TZ: "Europe/Berlin"}, "2026-03-28T22:20:00Z", nil},
	{"5000.00", "", 48 * time.Hour, &ledger.Period{Every: "month", TZ: "UTC", StartDay: 28}, "2026-04-27T23:20:00Z", nil},
	{"0.000003", "", 48 * time.Hour, &ledger.Period{Every: "day", TZ: "America/Santiago"}, "2026-09-06T03:20:00Z", nil},
	{"1000000000000", "", 48 * time.Hour, &ledger.Period{Every: "week", TZ: "Asia/Kolkata", StartDay: 4}, "2026-12-30T17:50:00Z", nil},
	{"5", "", time.Minute, nil, "", &ledger.Window{Length: time.Minute}},
	{"10000.00", "", 10 * time.Second, nil, "", &ledger.Window{Length: 10 * time.Second, Precision: 100 * time.Millisecond}},
	{"0.000003", "", time.Second, nil, "", &ledger.Window{Length: time.Second, Precision: time.Millisecond}},
	{"1000000000000", "", 30 * time.Second, nil, "", &ledger.Window{Length: time.Minute, Precision: time.Minute}},
	{"9007199254.740993", "", time.Hour, nil, "", &ledger.Window{Length: 2 * time.Hour, Precision: 7*time.Minute + 30*time.Second}},
}

// label names the shape's subtest.
func (sh differentialShape) label() string {
	switch {
	case sh.window != nil:
		return fmt.Sprintf("%s_in_%s_by_%s", sh.capacity, sh.window.Length, sh.window.Precision)
	case sh.period != nil:
		return fmt.Sprintf("%s_per_%s_%s", sh.capacity, sh.period.Every, sh.period.TZ)
	}
	return fmt.Sprintf("%s_per_%s", sh.capacity, sh.per)
}

// testDifferential replays random operation sequences, with pinned times,
// against the store and against the pure rule, and demands identical
// decisions and levels: exact decimal equality, at magnitudes from 10^-6 to
// 10^12 and around 2^53 units.
func testDifferential(t *testing.T, e *env) {
	for i, sh := range differentialShapes {
		seed := uint64(i + 1)
		t.Run(sh.label(), func(t *testing.T) {
			name := fmt.Sprintf("diff%d", i)
			l, ll := putDifferentialLimit(t, e, name, sh)
			d := &differential{
				t: t, e: e, rng: rand.New(rand.NewPCG(seed, 42)), seed: seed, l: l, ll: ll,
				refs:   []ledger.BucketRef{ref(name, "{d}a"), ref(name, "{d}b")},
				models: []*model{{limit: l}, {limit: l}},
				holds:  map[string]*modelHold{},
			}
			first := e.clock.Now()
			if l.Period != nil {
				defer func() {
					if s0, _ := l.Period.Bounds(first); s0.Equal(mustStart(l, e.clock.Now())) {
						t.Errorf("the sequence from %s to %s crossed no period start", first, e.clock.Now())
					}
				}()
			}
			for step := 0; step < differentialSteps; step++ {
				d.step(step, sh.per)
			}
		})
	}
}

// putDifferentialLimit stores the shape as the limit name (a periodic one
// with the clock pinned at its from) and returns it as the rule and as the
// state derivation see it.
func putDifferentialLimit(t *testing.T, e *env, name string, sh differentialShape) (bucket.Limit, ledger.Limit) {
	switch {
	case sh.window != nil:
		spec := ledger.LimitSpec{Capacity: dec(sh.capacity), Window: sh.window, History: true}
		if _, err := e.svc.PutLimit(e.ctx, name, spec); err != nil {
			t.Fatal(err)
		}
	case sh.period != nil:
		e.clock.Set(utc(t, sh.from))
		e.periodic(name, sh.capacity, *sh.period, true)
	default:
		e.limit(name, sh.capacity, sh.amount, sh.per, true)
		l := bucket.Limit{Capacity: ledger.Amount(dec(sh.capacity)), LeakAmount: ledger.Amount(dec(sh.amount)), LeakPer: sh.per}
		return l, ledger.Limit{Capacity: l.Capacity.Decimal(), LeakAmount: l.LeakAmount.Decimal(), LeakPer: l.LeakPer}
	}
	stored, err := e.svc.GetLimit(e.ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return stored.Rule(), stored
}

// differential is one shape's replay: two buckets of the store and their
// models, and the holds taken so far.
type differential struct {
	t      *testing.T
	e      *env
	rng    *rand.Rand
	seed   uint64
	l      bucket.Limit
	ll     ledger.Limit // the limit as the state derivation sees it
	refs   []ledger.BucketRef
	models []*model
	holds  map[string]*modelHold
	ids    []string // the holds' ids, in the order they were taken
}

// step advances the clock by a random step at the scale per, makes one
// random operation on the store and the model, and compares both buckets.
func (d *differential) step(step int, per time.Duration) {
	d.e.clock.Advance(randomStep(d.rng, per))
	now := d.e.clock.Now()
	b := d.rng.IntN(2)
	where := fmt.Sprintf("seed %d step %d at %s", d.seed, step, now.Format(time.RFC3339Nano))
	op := d.rng.IntN(10)
	where += fmt.Sprintf(" op %d bucket %d", op, b)
	switch {
	case op < 3:
		d.fillup(where, b, now)
	case op < 5:
		cost := randomAmount(d.rng, d.l.Capacity.Decimal())
		sameDecision(d.t, where+" can "+cost.String(), d.e.can(d.refs[b], cost.String()), bucket.CanAccept(d.l, d.models[b].state(), now, ledger.Amount(cost)))
	case op == 5:
		d.drain(where, b, now)
	case op == 6:
		d.reserve(where, b, now)
	case op == 7 && len(d.ids) > 0:
		d.commit(where, now)
	case op == 8 && len(d.ids) > 0:
		id := d.ids[d.rng.IntN(len(d.ids))]
		h := d.holds[id]
		owner := d.models[h.owner]
		res, err := d.e.svc.Release(d.e.ctx, id, ledger.Idempotency{}, nil)
		want := owner.release(h, now)
		checkResolve(d.t, where+" release", res, err, want, owner, now)
	default:
		d.fillupBoth(where, now)
	}
	d.sameStates(where, now)
}

// fillup charges bucket b a random cost.
func (d *differential) fillup(where string, b int, now time.Time) {
	m := d.models[b]
	cost := randomAmount(d.rng, d.l.Capacity.Decimal())
	want, ns := bucket.Fillup(d.l, m.state(), now, ledger.Amount(cost))
	got := d.e.fillup(d.refs[b], cost.String())
	sameDecision(d.t, where+" fillup "+cost.String(), got, want)
	if want.Accepted && cost.Sign() > 0 {
		m.set(ns, now)
	}
}

// drain removes a random amount from bucket b.
func (d *differential) drain(where string, b int, now time.Time) {
	m := d.models[b]
	amount := randomAmount(d.rng, d.l.Capacity.Decimal())
	removed, ns := bucket.Drain(d.l, m.state(), now, ledger.Amount(amount))
	got, err := d.e.svc.Drain(d.e.ctx, d.refs[b], amount, ledger.Idempotency{}, nil)
	if err != nil {
		d.t.Fatalf("%s drain: %v", where, err)
	}
	if !got.Removed.Equal(removed.Decimal()) {
		d.t.Fatalf("%s drain %s removed %s, want %s", where, amount, got.Removed, removed)
	}
	if removed.Sign() > 0 {
		m.set(ns, now)
	}
}

// reserve holds a random amount (at least 10^-6) in bucket b for up to 30
// seconds.
func (d *differential) reserve(where string, b int, now time.Time) {
	m := d.models[b]
	amount := randomAmount(d.rng, d.l.Capacity.Decimal())
	if amount.Sign() == 0 {
		amount = decimal.New(1, -6)
	}
	ttl := time.Duration(1+d.rng.IntN(30)) * time.Second
	want, ns := bucket.Reserve(d.l, m.state(), now, ledger.Amount(amount), now.Add(ttl))
	got, err := d.e.svc.Reserve(d.e.ctx, d.refs[b], amount, ttl, ledger.Idempotency{}, nil)
	if err != nil {
		d.t.Fatalf("%s reserve: %v", where, err)
	}
	sameDecision(d.t, where+" reserve "+amount.String(), got.Decision, want)
	if want.Accepted {
		m.set(ns, now)
		h := &modelHold{id: got.Reservation.ID, amount: amount, expires: now.Add(ttl), state: ledger.Active, owner: b}
		m.holds = append(m.holds, h)
		d.holds[h.id] = h
		d.ids = append(d.ids, h.id)
	}
}

// commit commits a random hold taken so far (maybe closed already), with
// the amount held or a random one up to twice that, overrun or not.
func (d *differential) commit(where string, now time.Time) {
	id := d.ids[d.rng.IntN(len(d.ids))]
	h := d.holds[id]
	owner := d.models[h.owner]
	var amount decimal.NullDecimal
	if d.rng.IntN(3) > 0 {
		amount = decimal.NewNullDecimal(randomAmount(d.rng, h.amount.Mul(decimal.NewFromInt(2))))
	}
	overrun := d.rng.IntN(2) == 0
	res, err := d.e.svc.Commit(d.e.ctx, id, amount, overrun, ledger.Idempotency{}, nil)
	want := owner.commit(h, amount, overrun, now)
	checkResolve(d.t, where+" commit", res, err, want, owner, now)
}

// fillupBoth charges both buckets at once, all or nothing.
func (d *differential) fillupBoth(where string, now time.Time) {
	l, models := d.l, d.models
	c0, c1 := randomAmount(d.rng, l.Capacity.Decimal()), randomAmount(d.rng, l.Capacity.Decimal())
	d0 := bucket.CanAccept(l, models[0].state(), now, ledger.Amount(c0))
	d1 := bucket.CanAccept(l, models[1].state(), now, ledger.Amount(c1))
	res, err := d.e.svc.Fillup(d.e.ctx, []ledger.Item{{Bucket: d.refs[0], Cost: c0}, {Bucket: d.refs[1], Cost: c1}}, ledger.Idempotency{})
	if err != nil {
		d.t.Fatalf("%s multi: %v", where, err)
	}
	if res.Accepted != (d0.Accepted && d1.Accepted) {
		d.t.Fatalf("%s multi %s+%s accepted %v, want %v", where, c0, c1, res.Accepted, d0.Accepted && d1.Accepted)
	}
	if res.Accepted {
		var ns0, ns1 bucket.State
		d0, ns0 = bucket.Fillup(l, models[0].state(), now, ledger.Amount(c0))
		d1, ns1 = bucket.Fillup(l, models[1].state(), now, ledger.Amount(c1))
		if c0.Sign() > 0 {
			models[0].set(ns0, now)
		}
		if c1.Sign() > 0 {
			models[1].set(ns1, now)
		}
	}
	sameDecision(d.t, where+" multi item 0", res.Items[0], d0)
	sameDecision(d.t, where+" multi item 1", res.Items[1], d1)
}

// sameStates fails unless both buckets' level, held and remaining are the
// models', logging both sides' holds when not.
func (d *differential) sameStates(where string, now time.Time) {
	t := d.t
	for i, r := range d.refs {
		got := d.e.state(r)
		want := ledger.StateOf(ledger.Snapshot{Limit: d.ll, State: d.models[i].state(), Now: now})
		if !got.Level.Equal(want.Level) || !got.Held.Equal(want.Held) || !got.Remaining.Equal(want.Remaining) {
			sn, _ := d.e.store.Inspect(d.e.ctx, r)
			for _, h := range sn.State.Holds {
				t.Logf("store hold %s until %s", h.Amount, h.ExpiresAt.Format(time.RFC3339Nano))
			}
			for _, h := range d.models[i].holds {
				t.Logf("model hold %s %s until %s %s", h.id, h.amount, h.expires.Format(time.RFC3339Nano), h.state)
			}
			t.Fatalf("%s bucket %d: level %s held %s remaining %s, want %s %s %s", where, i, got.Level, got.Held, got.Remaining, want.Level, want.Held, want.Remaining)
		}
	}
}

// resolution is what the model expects of a Commit or Release.
type resolution struct {
	refusal string
	state   ledger.ReservationState
}

func (m *model) commit(h *modelHold, amount decimal.NullDecimal, overrun bool, now time.Time) resolution {
	charge := h.amount
	if amount.Valid {
		charge = amount.Decimal
	}
	switch {
	case h.state == ledger.Committed && h.charged.Equal(charge):
		return resolution{"", ledger.Committed}
	case h.state == ledger.Committed || h.state == ledger.Released:
		return resolution{ledger.RefusalClosed, h.state}
	case !now.Before(h.expires):
		m.expire(h, now)
		return resolution{ledger.RefusalExpired, ledger.Expired}
	case charge.GreaterThan(h.amount) && !overrun:
		return resolution{ledger.RefusalExceedsHold, ledger.Active}
	}
	m.resolve(h, now, charge)
	h.state, h.charged = ledger.Committed, charge
	return resolution{"", ledger.Committed}
}

func (m *model) release(h *modelHold, now time.Time) resolution {
	switch {
	case h.state == ledger.Released:
		return resolution{"", ledger.Released}
	case h.state == ledger.Committed:
		return resolution{ledger.RefusalClosed, ledger.Committed}
	case !now.Before(h.expires):
		m.expire(h, now)
		return resolution{ledger.RefusalExpired, ledger.Expired}
	}
	m.resolve(h, now, decimal.Zero)
	h.state = ledger.Released
	return resolution{"", ledger.Released}
}

// expire records h as expired at now, as a store does when a commit or
// release finds it so, together with every other hold of the bucket expired
// by now: they are gone from the bucket, also for a clock that later steps
// back before their expiry.
func (m *model) expire(h *modelHold, now time.Time) {
	h.state = ledger.Expired
	var kept []*modelHold
	for _, mh := range m.holds {
		if mh != h && mh.expires.After(now) {
			kept = append(kept, mh)
		} else {
			mh.state = ledger.Expired
		}
	}
	m.holds = kept
}

func (m *model) resolve(h *modelHold, now time.Time, charge decimal.Decimal) {
	i := -1
	for j, mh := range m.holds {
		if mh == h {
			i = j
		}
	}
	ns := bucket.Resolve(m.limit, m.state(), now, i, ledger.Amount(charge))
	var kept []*modelHold
	for _, mh := range m.holds {
		if mh != h {
			kept = append(kept, mh)
		}
	}
	m.holds = kept
	m.set(ns, now)
}

func checkResolve(t *testing.T, where string, res ledger.ResolveResult, err error, want resolution, owner *model, now time.Time) {
	t.Helper()
	if err != nil && refusal(err) == "" {
		t.Fatalf("%s: %v", where, err)
	}
	if got := refusal(err); got != want.refusal {
		t.Fatalf("%s: refusal %q, want %q", where, got, want.refusal)
	}
	if res.Reservation.State != want.state {
		t.Fatalf("%s: state %s, want %s", where, res.Reservation.State, want.state)
	}
	if err == nil {
		w := bucket.CanAccept(owner.limit, owner.state(), now, bucket.Amount{})
		if !res.Bucket.Level.Equal(w.Level) || !res.Bucket.Held.Equal(w.Held) {
			t.Fatalf("%s: bucket level %s held %s, want %s %s", where, res.Bucket.Level, res.Bucket.Held, w.Level, w.Held)
		}
	}
}

func mustStart(l bucket.Limit, t time.Time) time.Time {
	s, _ := l.Period.Bounds(t)
	return s
}

// randomStep is how far the clock moves before an operation: often not at
// all, sometimes a microsecond, a fraction of the leak period, a long idle
// time, or backwards.
func randomStep(rng *rand.Rand, per time.Duration) time.Duration {
	switch rng.IntN(8) {
	case 0, 1:
		return 0
	case 2:
		return time.Microsecond
	case 3:
		return -time.Duration(1+rng.IntN(2_000_000)) * time.Microsecond
	case 4:
		return time.Duration(rng.Int64N(int64(min(per, 48*time.Hour))/1000+1)) * time.Microsecond
	case 5:
		return time.Duration(rng.Int64N(int64(5*time.Second)/1000)) * time.Microsecond
	default:
		return time.Duration(rng.Int64N(int64(time.Second)/1000)) * time.Microsecond
	}
}

// randomAmount is a decimal with up to 6 fractional digits, mostly within
// scale (the capacity), sometimes 0, tiny or a little above.
func randomAmount(rng *rand.Rand, scale decimal.Decimal) decimal.Decimal {
	units := scale.Shift(6).IntPart() // scale in millionths
	if units < 1 {
		units = 1
	}
	var v int64
	switch rng.IntN(10) {
	case 0:
		return decimal.Zero
	case 1:
		v = 1 + rng.Int64N(1000)
	case 2:
		v = units + 1 + rng.Int64N(units/10+1)
	case 3, 4:
		v = rng.Int64N(units/20 + 1)
	default:
		v = rng.Int64N(units/3 + 1)
	}
	d := decimal.New(v, -6)
	if d.GreaterThan(ledger.MaxAmount) {
		d = ledger.MaxAmount
	}
	return d
}

func sameDecision(t *testing.T, where string, got, want bucket.Decision) {
	t.Helper()
	if got.Accepted != want.Accepted || got.NeverFits != want.NeverFits ||
		!got.Level.Equal(want.Level) || !got.Held.Equal(want.Held) || !got.Remaining.Equal(want.Remaining) ||
		!got.Capacity.Equal(want.Capacity) || !got.RetryAfter.Equal(want.RetryAfter) ||
		!got.PeriodStart.Equal(want.PeriodStart) || !got.ResetsAt.Equal(want.ResetsAt) {
		t.Fatalf("%s:\n got %+v\nwant %+v", where, got, want)
	}
}

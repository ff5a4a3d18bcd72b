package ledgertest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// termsSteps is how many random operations each shape of the terms
// differential gets.
const termsSteps = 300

// termsModel is one bucket replayed with the pure rules alone: its terms
// from ledger.TermsAt, its decisions from package bucket.
type termsModel struct {
	key   string
	state bucket.State
	carry ledger.Carry
	marks ledger.Marks // the threshold marks the store keeps with it
}

// termsWorld is what the store keeps for one limit, as the model sees it:
// the limit as stored, its overrides and each bucket's grants.
type termsWorld struct {
	limit     ledger.Limit
	overrides *ledger.Overrides
	grants    map[string][]ledger.Grant
}

// terms is ledger.TermsAt of bucket m at now.
func (w *termsWorld) terms(m *termsModel, now time.Time) ledger.Terms {
	in := ledger.TermsInput{Limit: w.limit, Key: m.key, State: m.state, Carry: m.carry, Grants: w.grants[m.key], Now: now}
	if w.overrides.Len() > 0 {
		in.Overrides = w.overrides
	}
	return ledger.TermsAt(&in)
}

// write is the model's bucket written at a decision under terms t: the new
// state, and the rollover carry it received (kept from its first write in a
// period on).
func (m *termsModel) write(t ledger.Terms, ns bucket.State) {
	m.state = ns
	if t.Limit.Carry.Period != 0 {
		m.carry = t.Limit.Carry
	}
}

// testTermsDifferential replays random sequences that change a bucket's
// terms — PUTs of the limit changing its capacity, mode and rollover,
// overrides put, deleted and expiring, grants added, revoked and expiring,
// periods that end and carry, overrides of a leaky limit's rate that
// settle the buckets they cover when put, deleted or expired — between Fillups, CanAccepts and
// multi-bucket calls, holds reserved, committed and released, against the store and against the pure rules
// (ledger.TermsAt, then package bucket), and demands identical decisions and
// identical terms (effective capacity, override, grants, rollover
// received) at every step. The PUTs also set, change, reorder and remove the
// limit's thresholds, Drains join the writes, and every write's threshold
// events are the pure rule's (terms_differential_thresholds.go). The clock
// only moves forward, with Set.
func testTermsDifferential(t *testing.T, factory Factory) {
	shapes := []struct {
		name   string
		spec   ledger.LimitSpec
		from   time.Time
		stepUp time.Duration // the largest clock step
	}{
		{"leak", ledger.LimitSpec{Capacity: dec("100"), LeakAmount: dec("1"), LeakPer: time.Minute, History: true},
			time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC), 5 * time.Minute},
		{"day-rollover", ledger.LimitSpec{Capacity: dec("100"), Period: &ledger.Period{Every: "day", TZ: "Europe/Berlin"}, History: true,
			Rollover: &ledger.Rollover{Max: dec("40")}},
			time.Date(2026, 10, 24, 20, 0, 0, 0, time.UTC), 3 * time.Hour},
	}
	for _, sh := range shapes {
		for seed := uint64(1); seed <= 4; seed++ {
			t.Run(fmt.Sprintf("%s/seed=%d", sh.name, seed), func(t *testing.T) {
				clock := NewClock()
				clock.Set(sh.from)
				store := factory(t, clock)
				e := &env{t: t, clock: clock, store: store, svc: ledger.NewService(store), ctx: t.Context()}
				_, overrides := ledger.OverridesOf(store)
				_, grants := ledger.GrantsOf(store)
				rollover := ledger.ServesRollover(store)
				if sh.spec.Rollover != nil && !rollover {
					sh.spec.Rollover = nil
				}
				runTermsDifferential(t, e, sh.spec, sh.stepUp, seed, overrides, grants)
			})
		}
	}
}

// termsLimit is the name of the limit of the terms differential.
const termsLimit = "terms"

// termsRun is one sequence of the terms differential: the store, the model
// (the limit, overrides and grants as stored, each bucket's state), the
// holds and grants made so far, and what the sequence went through.
type termsRun struct {
	t                 *testing.T
	e                 *env
	rng               *rand.Rand
	spec              ledger.LimitSpec
	stepUp            time.Duration
	overrides, grants bool // whether the store serves them
	w                 *termsWorld
	models            []*termsModel
	patterns          []string
	grantIDs          []string
	holds             []termsHold
	// seen counts what the sequence went through, so that a sequence that
	// never met a term fails rather than passes.
	seen map[string]int
	// trng draws the thresholds the limit's PUTs set, and ev is what the
	// comparison of every write's events keeps
	// (terms_differential_thresholds.go).
	trng *rand.Rand
	ev   termsEvents
}

func runTermsDifferential(t *testing.T, e *env, spec ledger.LimitSpec, stepUp time.Duration, seed uint64, overrides, grants bool) {
	x := &termsRun{t: t, e: e, rng: rand.New(rand.NewPCG(seed, 0x7e57)), spec: spec, stepUp: stepUp, overrides: overrides, grants: grants,
		w:        &termsWorld{overrides: &ledger.Overrides{}, grants: map[string][]ledger.Grant{}},
		models:   []*termsModel{{key: "{t}ab"}, {key: "{t}ac"}},
		patterns: []string{"{t}ab", "{t}a*", "{t}*", "*", "{t}ac", "{t}abc"},
		seen:     map[string]int{},
		trng:     newThresholdsRand(seed)}
	x.startThresholds()
	x.put(x.spec)
	defer x.covered()
	for step := range termsSteps {
		e.clock.Set(e.clock.Now().Add(termsStep(x.rng, stepUp)))
		now := e.clock.Now()
		b := x.rng.IntN(len(x.models))
		op := x.rng.IntN(15)
		where := fmt.Sprintf("seed %d step %d at %s op %d bucket %s", seed, step, now.Format(time.RFC3339Nano), op, x.models[b].key)
		switch {
		case op < 3:
			x.fillup(op, now, b, where)
		case op < 5:
			x.check(op, now, b, where)
		case op == 5:
			x.multi(op, now, b, where)
		case op == 6:
			x.putLimit(op, now, b, where)
		case op < 9 && overrides:
			x.override(op, now, b, where)
		case op < 11 && grants:
			x.grant(op, now, b, where)
		case op == 11:
			x.drain(now, b, where)
		case op == 12:
			x.reserve(op, now, b, where)
		case op >= 13 && len(x.holds) > 0:
			x.resolve(op, now, b, where)
		default:
			x.read(op, now, b, where)
		}
		x.sameEvents(false)
	}
	x.sameEvents(true)
	x.sameBucketEvents(e.clock.Now())
}

// put puts the limit and takes it as stored into the model.
func (x *termsRun) put(spec ledger.LimitSpec) {
	if _, err := x.e.svc.PutLimit(x.e.ctx, termsLimit, spec); err != nil {
		x.t.Fatalf("PutLimit(%+v): %v", spec, err)
	}
	stored, err := x.e.svc.GetLimit(x.e.ctx, termsLimit)
	if err != nil {
		x.t.Fatal(err)
	}
	x.w.limit = stored
}

// covered fails the sequence when it never met one of the things it is
// there to test (a denial, an override, a switch, …).
func (x *termsRun) covered() {
	if x.t.Failed() {
		return
	}
	whats := []string{"accepted", "denied", "override", "grant", "received", "switched", "held", "resolved", "crossed", "recovered", "drained"}
	for _, what := range whats {
		if (what == "override" || what == "switched") && !x.overrides || what == "grant" && !x.grants ||
			what == "received" && x.spec.Rollover == nil || what == "switched" && x.spec.Period != nil {
			continue
		}
		if x.seen[what] == 0 {
			x.t.Errorf("no decision in the sequence was %s (seen %v)", what, x.seen)
		}
	}
	x.t.Logf("seen %v", x.seen)
}

// fillup charges the bucket alone: its decision and terms are the pure
// rules'.
func (x *termsRun) fillup(op int, now time.Time, b int, where string) {
	t, e, rng, w, m := x.t, x.e, x.rng, x.w, x.models[b]
	r := ref(termsLimit, m.key)
	cost := termsCost(rng)
	tm := w.terms(m, now)
	want, ns := bucket.Fillup(tm.Limit.Rule(), tm.State, now, ledger.Amount(cost))
	res, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: r, Cost: cost}}, ledger.Idempotency{})
	if err != nil {
		t.Fatalf("%s fillup: %v", where, err)
	}
	sameDecision(t, where+" fillup "+cost.String(), res.Items[0], want)
	sameTerms(t, where+" fillup", res.Limits[0], tm.Limit)
	x.seen[map[bool]string{true: "accepted", false: "denied"}[want.Accepted]]++
	if tm.Limit.Override != "" {
		x.seen["override"]++
	}
	if tm.Limit.Grants.Sign() > 0 {
		x.seen["grant"]++
	}
	if tm.Limit.Received.Sign() > 0 {
		x.seen["received"]++
	}
	if want.Accepted && cost.Sign() > 0 {
		m.write(tm, ns)
		x.notice(m, tm, tm.State, now, where+" fillup "+cost.String())
	}
}

// check asks CanAccept: its decision and terms are the pure rules'.
func (x *termsRun) check(op int, now time.Time, b int, where string) {
	t, e, rng, w, m := x.t, x.e, x.rng, x.w, x.models[b]
	r := ref(termsLimit, m.key)
	cost := termsCost(rng)
	tm := w.terms(m, now)
	got, err := e.svc.Check(e.ctx, r, cost)
	if err != nil {
		t.Fatalf("%s can: %v", where, err)
	}
	sameDecision(t, where+" can "+cost.String(), got.Decision, bucket.CanAccept(tm.Limit.Rule(), tm.State, now, ledger.Amount(cost)))
	sameTerms(t, where+" can", got.Limit, tm.Limit)
}

// multi charges both buckets at once, all or nothing.
func (x *termsRun) multi(op int, now time.Time, b int, where string) {
	t, e, rng, w, models := x.t, x.e, x.rng, x.w, x.models
	// Both buckets at once, all or nothing.
	c0, c1 := termsCost(rng), termsCost(rng)
	t0, t1 := w.terms(models[0], now), w.terms(models[1], now)
	d0, ns0 := bucket.Fillup(t0.Limit.Rule(), t0.State, now, ledger.Amount(c0))
	d1, ns1 := bucket.Fillup(t1.Limit.Rule(), t1.State, now, ledger.Amount(c1))
	res, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: ref(termsLimit, models[0].key), Cost: c0}, {Bucket: ref(termsLimit, models[1].key), Cost: c1}}, ledger.Idempotency{})
	if err != nil {
		t.Fatalf("%s multi: %v", where, err)
	}
	if ok := d0.Accepted && d1.Accepted; res.Accepted != ok {
		t.Fatalf("%s multi %s+%s accepted %v, want %v", where, c0, c1, res.Accepted, ok)
	}
	sameTerms(t, where+" multi 0", res.Limits[0], t0.Limit)
	sameTerms(t, where+" multi 1", res.Limits[1], t1.Limit)
	if res.Accepted {
		if c0.Sign() > 0 {
			models[0].write(t0, ns0)
			x.notice(models[0], t0, t0.State, now, where+" multi "+c0.String())
		}
		if c1.Sign() > 0 {
			models[1].write(t1, ns1)
			x.notice(models[1], t1, t1.State, now, where+" multi "+c1.String())
		}
	}
}

// putLimit PUTs the limit with its rule kept and the capacity, the mode or
// the rollover's max changed.
func (x *termsRun) putLimit(op int, now time.Time, b int, where string) {
	rng := x.rng
	// A PUT that keeps the rule and changes the capacity, the mode or
	// the rollover's max.
	s := x.spec
	s.Capacity = decimal.New(int64(20+rng.IntN(200)), 0)
	switch rng.IntN(3) {
	case 1:
		s.Mode = ledger.ModeShadow
	case 2:
		s.Mode, s.Grace = ledger.ModeSoft, decimal.New(int64(rng.IntN(5001)), -2)
	}
	if s.Rollover != nil {
		s.Rollover = &ledger.Rollover{Max: decimal.New(int64(rng.IntN(60)), 0)}
	}
	s.Thresholds = x.nextThresholds()
	x.put(s)
}

// override puts an override, or deletes one (op 8), and settles the
// buckets it covers as the store settles them.
func (x *termsRun) override(op int, now time.Time, b int, where string) {
	t, e, rng, w, models := x.t, x.e, x.rng, x.w, x.models
	pattern := x.patterns[rng.IntN(len(x.patterns))]
	// The terms of every bucket before the change: a bucket whose
	// rule (leak rate) changes with it is settled at now under the
	// old one, as a PUT of the limit that changes the rule settles it.
	before := make([]ledger.Terms, len(models))
	for i, m := range models {
		before[i] = w.terms(m, now)
	}
	if op == 8 {
		err := e.svc.DeleteOverride(e.ctx, termsLimit, pattern)
		o, had := w.overrides.Get(pattern)
		active := had && o.ActiveAt(now)
		switch {
		case active && err != nil:
			t.Fatalf("%s delete override %s: %v", where, pattern, err)
		case !active && !errors.Is(err, ledger.ErrOverrideNotFound):
			t.Fatalf("%s delete override %s (none active): %v, want ErrOverrideNotFound", where, pattern, err)
		}
		if active {
			w.overrides.Delete(pattern)
		}
	} else {
		o := ledger.Override{Pattern: pattern}
		if rng.IntN(4) > 0 {
			o.Capacity = decimal.NewNullDecimal(decimal.New(int64(1+rng.IntN(150)), 0))
		}
		if x.spec.Period == nil && (!o.Capacity.Valid || rng.IntN(3) == 0) {
			o.LeakAmount, o.LeakPer = decimal.New(int64(1+rng.IntN(20)), 0), time.Duration(1+rng.IntN(10))*time.Minute
		}
		if !o.Capacity.Valid && o.LeakPer == 0 {
			o.Capacity = decimal.NewNullDecimal(decimal.New(int64(1+rng.IntN(150)), 0))
		}
		if rng.IntN(3) > 0 {
			o.ExpiresAt = now.Add(time.Duration(1+rng.Int64N(int64(4*x.stepUp)/1000)) * time.Microsecond)
		}
		got, err := e.svc.PutOverride(e.ctx, termsLimit, o)
		if err != nil {
			t.Fatalf("%s put override %+v: %v", where, o, err)
		}
		w.overrides.Put(got)
	}
	for i, m := range models {
		old := before[i]
		if old.Settled {
			// An override that changed the rule and expired is
			// replaced or gone: the switch at its expiry stays in
			// the bucket, as the store settles a bucket before it
			// changes its terms.
			m.state = old.State
		}
		if m.state.Level.Sign() <= 0 || old.Limit.SameRule(w.terms(m, now).Limit) {
			continue
		}
		ns, _ := bucket.Switch(old.Limit.Rule(), old.State, now)
		m.write(old, ns)
		x.seen["switched"]++
	}
}

// grant adds a grant, or revokes one (op 10).
func (x *termsRun) grant(op int, now time.Time, b int, where string) {
	t, e, rng, w, m := x.t, x.e, x.rng, x.w, x.models[b]
	r := ref(termsLimit, m.key)
	if op == 10 && len(x.grantIDs) > 0 {
		i := rng.IntN(len(x.grantIDs))
		key, id, _ := cutGrantID(x.grantIDs[i])
		_, err := e.svc.RevokeGrant(e.ctx, ref(termsLimit, key), id, ledger.Idempotency{}, nil)
		gs, active := w.grants[key], false
		for j, g := range gs {
			if g.ID == id {
				active = g.ActiveAt(now)
				w.grants[key] = append(gs[:j:j], gs[j+1:]...)
				break
			}
		}
		switch {
		case active && err != nil:
			t.Fatalf("%s revoke grant %s: %v", where, id, err)
		case !active && !errors.Is(err, ledger.ErrGrantNotFound):
			t.Fatalf("%s revoke grant %s (not active): %v, want ErrGrantNotFound", where, id, err)
		}
		x.grantIDs = append(x.grantIDs[:i:i], x.grantIDs[i+1:]...)
		return
	}
	amount := decimal.New(int64(1+rng.IntN(50)), 0)
	var expires time.Time
	if x.spec.Period == nil || rng.IntN(2) == 0 {
		expires = now.Add(time.Duration(1+rng.Int64N(int64(4*x.stepUp)/1000)) * time.Microsecond)
	}
	res, err := e.svc.AddGrant(e.ctx, r, amount, expires, ledger.Idempotency{}, nil)
	if err != nil {
		t.Fatalf("%s add grant %s until %v: %v", where, amount, expires, err)
	}
	g := res.Grant
	if !expires.IsZero() && !g.ExpiresAt.Equal(expires) {
		t.Fatalf("%s grant expires at %v, asked %v", where, g.ExpiresAt, expires)
	}
	w.grants[m.key] = append(w.grants[m.key], g)
	x.grantIDs = append(x.grantIDs, m.key+"\x00"+g.ID)
	if !res.Bucket.Grants.Equal(w.terms(m, now).Limit.Grants) {
		t.Fatalf("%s add grant: the bucket's grants are %s, want %s", where, res.Bucket.Grants, w.terms(m, now).Limit.Grants)
	}
}

// reserve reserves a hold under the bucket's terms.
func (x *termsRun) reserve(op int, now time.Time, b int, where string) {
	t, e, rng, w, m := x.t, x.e, x.rng, x.w, x.models[b]
	r := ref(termsLimit, m.key)
	amount := termsCost(rng)
	if amount.Sign() == 0 {
		amount = decimal.New(1, -6)
	}
	ttl := time.Second + time.Duration(rng.Int64N(int64(min(4*x.stepUp, 23*time.Hour))/1000))*time.Microsecond
	tm := w.terms(m, now)
	want, ns := bucket.Reserve(tm.Limit.Rule(), tm.State, now, ledger.Amount(amount), now.Add(ttl))
	got, err := e.svc.Reserve(e.ctx, r, amount, ttl, ledger.Idempotency{}, nil)
	if err != nil {
		t.Fatalf("%s reserve: %v", where, err)
	}
	sameDecision(t, where+" reserve "+amount.String(), got.Decision, want)
	sameTerms(t, where+" reserve", got.Limit, tm.Limit)
	if !want.Accepted {
		x.seen["denied"]++
	}
	if want.Accepted {
		ns.Holds[len(ns.Holds)-1].ID = got.Reservation.ID
		m.write(tm, ns)
		x.notice(m, tm, tm.State, now, where+" reserve "+amount.String())
		x.holds = append(x.holds, termsHold{id: got.Reservation.ID, owner: b, amount: amount, expires: now.Add(ttl)})
		x.seen["held"]++
	}
}

// resolve commits or releases a hold: an active one resolves under its
// bucket's terms now, an expired one is refused as expired.
func (x *termsRun) resolve(op int, now time.Time, b int, where string) {
	t, e, rng, w, models := x.t, x.e, x.rng, x.w, x.models
	// Commit or release a hold: an active one resolves under the
	// bucket's terms now, an expired one is refused as expired.
	i := rng.IntN(len(x.holds))
	if rng.IntN(2) == 0 {
		i = len(x.holds) - 1 // the newest, most likely still active
	}
	h := x.holds[i]
	x.holds = append(x.holds[:i:i], x.holds[i+1:]...)
	owner := models[h.owner]
	tm := w.terms(owner, now)
	charge := decimal.Zero
	var res ledger.ResolveResult
	var err error
	if rng.IntN(3) > 0 {
		amount := decimal.NullDecimal{}
		charge = h.amount
		if rng.IntN(2) == 0 {
			charge = termsCost(rng)
			amount = decimal.NewNullDecimal(charge)
		}
		res, err = e.svc.Commit(e.ctx, h.id, amount, true, ledger.Idempotency{}, nil)
	} else {
		res, err = e.svc.Release(e.ctx, h.id, ledger.Idempotency{}, nil)
	}
	if !now.Before(h.expires) {
		if got := refusal(err); got != ledger.RefusalExpired {
			t.Fatalf("%s resolve of a hold expired at %s: %v, want refusal %q", where, h.expires.Format(time.RFC3339Nano), err, ledger.RefusalExpired)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s resolve %s: %v", where, h.id, err)
	}
	at := -1
	for j, x := range tm.State.Holds {
		if x.ID == h.id {
			at = j
		}
	}
	if at < 0 {
		t.Fatalf("%s resolve %s: the model has no such hold in %+v", where, h.id, tm.State.Holds)
	}
	ns := bucket.Resolve(tm.Limit.Rule(), tm.State, now, at, ledger.Amount(charge))
	owner.write(tm, ns)
	x.notice(owner, tm, tm.State, now, fmt.Sprintf("%s resolve %s charging %s", where, h.id, charge))
	after := w.terms(owner, now)
	want := bucket.CanAccept(after.Limit.Rule(), after.State, now, bucket.Amount{})
	if !res.Bucket.Level.Equal(want.Level) || !res.Bucket.Held.Equal(want.Held) || !res.Bucket.Capacity.Equal(want.Capacity) {
		t.Fatalf("%s resolve %s charging %s: bucket level %s held %s capacity %s, want %s %s %s", where, h.id, charge,
			res.Bucket.Level, res.Bucket.Held, res.Bucket.Capacity, want.Level, want.Held, want.Capacity)
	}
	x.seen["resolved"]++
}

// read reads the bucket: its level, capacity, override and grants are the
// pure rules'.
func (x *termsRun) read(op int, now time.Time, b int, where string) {
	t, e, w, m := x.t, x.e, x.w, x.models[b]
	r := ref(termsLimit, m.key)
	st, err := e.svc.Bucket(e.ctx, r)
	if err != nil {
		t.Fatalf("%s bucket: %v", where, err)
	}
	tm := w.terms(m, now)
	want := bucket.CanAccept(tm.Limit.Rule(), tm.State, now, bucket.Amount{})
	if !st.Capacity.Equal(want.Capacity) || !st.Level.Equal(want.Level) || !st.Remaining.Equal(want.Remaining) ||
		st.Override != tm.Limit.Override || !st.Grants.Equal(tm.Limit.Grants) {
		t.Fatalf("%s bucket: got %+v\nwant capacity %s level %s remaining %s override %q grants %s", where, st,
			want.Capacity, want.Level, want.Remaining, tm.Limit.Override, tm.Limit.Grants)
	}
}

// termsHold is a hold the terms differential made: its id, its bucket (an
// index of the models), its amount and expiry.
type termsHold struct {
	id      string
	owner   int
	amount  decimal.Decimal
	expires time.Time
}

// termsCost is a random cost: a whole one up to 70 (a bucket of capacity
// 100 or so fills in a few), or a random amount of any scale.
func termsCost(rng *rand.Rand) decimal.Decimal {
	if rng.IntN(4) == 0 {
		return randomAmount(rng, dec("30"))
	}
	return decimal.New(int64(rng.IntN(71)), 0)
}

// termsStep is a random forward step of the clock, up to max: often none
// or a microsecond, so that instants right at an expiry or a period's end
// come up.
func termsStep(rng *rand.Rand, max time.Duration) time.Duration {
	switch rng.IntN(6) {
	case 0:
		return 0
	case 1:
		return time.Microsecond
	default:
		return time.Duration(rng.Int64N(int64(max)/1000+1)) * time.Microsecond
	}
}

// cutGrantID splits what the differential keeps of a grant: its bucket's
// key and its id.
func cutGrantID(s string) (key, id string, ok bool) {
	for i := range len(s) {
		if s[i] == 0 {
			return s[:i], s[i+1:], true
		}
	}
	return "", s, false
}

// sameTerms fails the test when the store decided under other terms than
// the pure rule's: effective capacity, override, grants, rollover received.
func sameTerms(t *testing.T, where string, got, want ledger.Limit) {
	t.Helper()
	if !got.Capacity.Equal(want.Capacity) || got.Override != want.Override || !got.Grants.Equal(want.Grants) ||
		!got.Received.Equal(want.Received) || got.Mode != want.Mode {
		t.Fatalf("%s: terms capacity %s override %q grants %s received %s mode %q; want %s %q %s %s %q", where,
			got.Capacity, got.Override, got.Grants, got.Received, got.Mode, want.Capacity, want.Override, want.Grants, want.Received, want.Mode)
	}
}

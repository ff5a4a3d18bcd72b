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

// testDifferential replays random operation sequences, with pinned times,
// against the store and against the pure rule, and demands identical
// decisions and levels: exact decimal equality, at magnitudes from 10^-6 to
// 10^12 and around 2^53 units.
func testDifferential(t *testing.T, e *env) {
	shapes := []struct {
		capacity, amount string
		per              time.Duration
		period           *ledger.Period // with per the scale of the clock's steps
		from             string         // where a periodic shape pins the clock: shortly before a reset
		window           *ledger.Window // with per the scale of the clock's steps
	}{
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
	for i, sh := range shapes {
		seed := uint64(i + 1)
		label := fmt.Sprintf("%s_per_%s", sh.capacity, sh.per)
		if sh.period != nil {
			label = fmt.Sprintf("%s_per_%s_%s", sh.capacity, sh.period.Every, sh.period.TZ)
		}
		if sh.window != nil {
			label = fmt.Sprintf("%s_in_%s_by_%s", sh.capacity, sh.window.Length, sh.window.Precision)
		}
		t.Run(label, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			name := fmt.Sprintf("diff%d", i)
			var l bucket.Limit
			var ll ledger.Limit // the limit as the state derivation sees it
			if sh.window != nil {
				spec := ledger.LimitSpec{Capacity: dec(sh.capacity), Window: sh.window, History: true}
				if _, err := e.svc.PutLimit(e.ctx, name, spec); err != nil {
					t.Fatal(err)
				}
				stored, err := e.svc.GetLimit(e.ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				l, ll = stored.Rule(), stored
			} else if sh.period != nil {
				e.clock.Set(utc(t, sh.from))
				e.periodic(name, sh.capacity, *sh.period, true)
				stored, err := e.svc.GetLimit(e.ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				l, ll = stored.Rule(), stored
			} else {
				e.limit(name, sh.capacity, sh.amount, sh.per, true)
				l = bucket.Limit{Capacity: ledger.Amount(dec(sh.capacity)), LeakAmount: ledger.Amount(dec(sh.amount)), LeakPer: sh.per}
				ll = ledger.Limit{Capacity: l.Capacity.Decimal(), LeakAmount: l.LeakAmount.Decimal(), LeakPer: l.LeakPer}
			}
			refs := []ledger.BucketRef{ref(name, "{d}a"), ref(name, "{d}b")}
			models := []*model{{limit: l}, {limit: l}}
			holds := map[string]*modelHold{}
			var ids []string
			first := e.clock.Now()
			if l.Period != nil {
				defer func() {
					if s0, _ := l.Period.Bounds(first); s0.Equal(mustStart(l, e.clock.Now())) {
						t.Errorf("the sequence from %s to %s crossed no period start", first, e.clock.Now())
					}
				}()
			}
			for step := 0; step < differentialSteps; step++ {
				e.clock.Advance(randomStep(rng, sh.per))
				now := e.clock.Now()
				b := rng.IntN(2)
				r, m := refs[b], models[b]
				where := fmt.Sprintf("seed %d step %d at %s", seed, step, now.Format(time.RFC3339Nano))
				op := rng.IntN(10)
				where += fmt.Sprintf(" op %d bucket %d", op, b)
				switch {
				case op < 3:
					cost := randomAmount(rng, l.Capacity.Decimal())
					want, ns := bucket.Fillup(l, m.state(), now, ledger.Amount(cost))
					got := e.fillup(r, cost.String())
					sameDecision(t, where+" fillup "+cost.String(), got, want)
					if want.Accepted && cost.Sign() > 0 {
						m.set(ns, now)
					}
				case op < 5:
					cost := randomAmount(rng, l.Capacity.Decimal())
					sameDecision(t, where+" can "+cost.String(), e.can(r, cost.String()), bucket.CanAccept(l, m.state(), now, ledger.Amount(cost)))
				case op == 5:
					amount := randomAmount(rng, l.Capacity.Decimal())
					removed, ns := bucket.Drain(l, m.state(), now, ledger.Amount(amount))
					got, err := e.svc.Drain(e.ctx, r, amount, ledger.Idempotency{}, nil)
					if err != nil {
						t.Fatalf("%s drain: %v", where, err)
					}
					if !got.Removed.Equal(removed.Decimal()) {
						t.Fatalf("%s drain %s removed %s, want %s", where, amount, got.Removed, removed)
					}
					if removed.Sign() > 0 {
						m.set(ns, now)
					}
				case op == 6:
					amount := randomAmount(rng, l.Capacity.Decimal())
					if amount.Sign() == 0 {
						amount = decimal.New(1, -6)
					}
					ttl := time.Duration(1+rng.IntN(30)) * time.Second
					want, ns := bucket.Reserve(l, m.state(), now, ledger.Amount(amount), now.Add(ttl))
					got, err := e.svc.Reserve(e.ctx, r, amount, ttl, ledger.Idempotency{}, nil)
					if err != nil {
						t.Fatalf("%s reserve: %v", where, err)
					}
					sameDecision(t, where+" reserve "+amount.String(), got.Decision, want)
					if want.Accepted {
						m.set(ns, now)
						h := &modelHold{id: got.Reservation.ID, amount: amount, expires: now.Add(ttl), state: ledger.Active, owner: b}
						m.holds = append(m.holds, h)
						holds[h.id] = h
						ids = append(ids, h.id)
					}
				case op == 7 && len(ids) > 0:
					id := ids[rng.IntN(len(ids))]
					h := holds[id]
					owner := models[h.owner]
					var amount decimal.NullDecimal
					if rng.IntN(3) > 0 {
						amount = decimal.NewNullDecimal(randomAmount(rng, h.amount.Mul(decimal.NewFromInt(2))))
					}
					overrun := rng.IntN(2) == 0
					res, err := e.svc.Commit(e.ctx, id, amount, overrun, ledger.Idempotency{}, nil)
					want := owner.commit(h, amount, overrun, now)
					checkResolve(t, where+" commit", res, err, want, owner, now)
				case op == 8 && len(ids) > 0:
					id := ids[rng.IntN(len(ids))]
					h := holds[id]
					owner := models[h.owner]
					res, err := e.svc.Release(e.ctx, id, ledger.Idempotency{}, nil)
					want := owner.release(h, now)
					checkResolve(t, where+" release", res, err, want, owner, now)
				default:
					// Both buckets at once, all or nothing.
					c0, c1 := randomAmount(rng, l.Capacity.Decimal()), randomAmount(rng, l.Capacity.Decimal())
					d0 := bucket.CanAccept(l, models[0].state(), now, ledger.Amount(c0))
					d1 := bucket.CanAccept(l, models[1].state(), now, ledger.Amount(c1))
					res, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: refs[0], Cost: c0}, {Bucket: refs[1], Cost: c1}}, ledger.Idempotency{})
					if err != nil {
						t.Fatalf("%s multi: %v", where, err)
					}
					if res.Accepted != (d0.Accepted && d1.Accepted) {
						t.Fatalf("%s multi %s+%s accepted %v, want %v", where, c0, c1, res.Accepted, d0.Accepted && d1.Accepted)
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
					sameDecision(t, where+" multi item 0", res.Items[0], d0)
					sameDecision(t, where+" multi item 1", res.Items[1], d1)
				}
				for i, r := range refs {
					got := e.state(r)
					want := ledger.StateOf(ledger.Snapshot{Limit: ll, State: models[i].state(), Now: now})
					if !got.Level.Equal(want.Level) || !got.Held.Equal(want.Held) || !got.Remaining.Equal(want.Remaining) {
						sn, _ := e.store.Inspect(e.ctx, r)
						for _, h := range sn.State.Holds {
							t.Logf("store hold %s until %s", h.Amount, h.ExpiresAt.Format(time.RFC3339Nano))
						}
						for _, h := range models[i].holds {
							t.Logf("model hold %s %s until %s %s", h.id, h.amount, h.expires.Format(time.RFC3339Nano), h.state)
						}
						t.Fatalf("%s bucket %d: level %s held %s remaining %s, want %s %s %s", where, i, got.Level, got.Held, got.Remaining, want.Level, want.Held, want.Remaining)
					}
				}
			}
		})
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

package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/postgres"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
)

// windowRow is a bucket row as stored: its level, time and slots.
type windowRow struct {
	level   bucket.Amount
	updated time.Time
	idx     []int64
	sums    []bucket.Amount
}

// readRow reads the row of limit/key straight from the buckets table.
func readRow(t *testing.T, s *postgres.Store, limit, key string) windowRow {
	t.Helper()
	var level string
	var updated *time.Time
	var idx []int64
	var sums []string
	err := s.Pool().QueryRow(context.Background(), `SELECT b.level::text, b.updated_at, b.slot_idx, b.slot_sum::text[]
		FROM buckets b JOIN limits l ON l.id = b.limit_id WHERE l.name = $1 AND b.key = $2`, limit, key).
		Scan(&level, &updated, &idx, &sums)
	if errors.Is(err, pgx.ErrNoRows) {
		return windowRow{}
	}
	if err != nil {
		t.Fatalf("reading the row of %s/%s: %v", limit, key, err)
	}
	r := windowRow{level: bucket.MustAmount(level), idx: idx}
	if updated != nil {
		r.updated = updated.UTC()
	}
	if len(idx) != len(sums) {
		t.Fatalf("%s/%s: %d slot numbers with %d sums", limit, key, len(idx), len(sums))
	}
	for _, s := range sums {
		r.sums = append(r.sums, bucket.MustAmount(s))
	}
	return r
}

// checkWindowRow fails unless the row of a window bucket keeps only what
// the rule needs: at most length/precision + 1 slots, oldest first, none of
// zero sum, each still counting at the row's time (when it was last
// written, the clock never having stepped back past ClockStep), summing to
// the row's level. It returns the number of slots.
func checkWindowRow(t *testing.T, what string, r windowRow, w ledger.Window) int {
	t.Helper()
	p, l := w.Precision.Microseconds(), w.Length.Microseconds()
	if bound := int(w.Slots()) + 1; len(r.idx) > bound {
		t.Fatalf("%s: %d slots stored, more than length/precision + 1 = %d: %v", what, len(r.idx), bound, r.idx)
	}
	at := r.updated.UnixMicro()
	var sum bucket.Amount
	for i, idx := range r.idx {
		if i > 0 && idx <= r.idx[i-1] {
			t.Fatalf("%s: slots out of order: %v", what, r.idx)
		}
		if r.sums[i].Sign() <= 0 {
			t.Fatalf("%s: slot %d stored with sum %s", what, idx, r.sums[i])
		}
		if (idx+1)*p+l <= at {
			t.Fatalf("%s: slot %d stored although it no longer counted when the row was written, at %v", what, idx, r.updated)
		}
		sum = sum.Add(r.sums[i])
	}
	if len(r.idx) > 0 && !sum.Equal(r.level) {
		t.Fatalf("%s: level %s, slots sum to %s", what, r.level, sum)
	}
	return len(r.idx)
}

// probes are the costs whose decisions a snapshot must answer as the model.
var probes = []string{"0", "0.000001", "1", "7", "25", "50", "51", "100"}

// sameWindow fails unless the state got, as a store returned it, answers
// every question as the model want does: now (the level, the held amount,
// when the bucket clears, and whether and when each probe cost fits) and at
// instants to come (the level as slots age out).
func sameWindow(t *testing.T, what string, rule bucket.Limit, got, want bucket.State, now time.Time) {
	t.Helper()
	for _, c := range probes {
		g := bucket.CanAccept(rule, got, now, bucket.MustAmount(c))
		w := bucket.CanAccept(rule, want, now, bucket.MustAmount(c))
		if g.Accepted != w.Accepted || !g.Level.Equal(w.Level) || !g.Held.Equal(w.Held) || !g.Remaining.Equal(w.Remaining) ||
			!g.RetryAfter.Equal(w.RetryAfter) || g.NeverFits != w.NeverFits || !g.ClearsAt.Equal(w.ClearsAt) {
			t.Fatalf("%s, cost %s:\n got  %+v\n want %+v\n (state %+v, model %+v)", what, c, g, w, got, want)
		}
	}
	for _, d := range []time.Duration{rule.Window.Precision / 2, rule.Window.Length / 2, rule.Window.Length, rule.Window.Length + rule.Window.Precision} {
		if g, w := bucket.LevelAt(rule, got, now.Add(d)), bucket.LevelAt(rule, want, now.Add(d)); !g.Equal(w) {
			t.Fatalf("%s: level %v later %s, want %s (state %+v, model %+v)", what, d, g, w, got, want)
		}
	}
}

// TestWindowDifferential: a window bucket driven through every write path of
// the store (single Fillups, coalesced batches of several, the all-or-none
// path of multi-bucket calls, holds committed with and without overrun,
// releases and drains), with the clock moving on by less than a slot and
// now and then back by less than ClockStep, answers every call as package
// bucket's rule does, to the last digit and the microsecond; and the row it
// stores never holds more than length/precision + 1 slots, all of them still
// counting, summing to its level. The bound is reached: every slot gets
// charges.
func TestWindowDifferential(t *testing.T) {
	for _, iso := range []string{"read-committed", "serializable"} {
		t.Run(iso, func(t *testing.T) { testWindowDifferential(t, iso) })
	}
}

func testWindowDifferential(t *testing.T, iso string) {
	clock := ledgertest.NewClock()
	s := open(t, postgres.WithIsolation(iso), postgres.WithClock(clock.Now))
	ctx := context.Background()
	w := ledger.Window{Length: 10 * time.Second, Precision: time.Second}
	lim, err := s.PutLimit(ctx, ledger.Limit{Name: "w", Capacity: dec("60"), Window: &w, History: true})
	if err != nil {
		t.Fatal(err)
	}
	if lim.Window == nil || *lim.Window != w || !lim.LeakAmount.IsZero() || lim.Period != nil {
		t.Fatalf("PUT answered %+v", lim)
	}
	rule := lim.Rule()
	ref := ledger.BucketRef{Limit: "w", Key: "k"}
	var model bucket.State
	var holds []ledger.Reservation
	rng := rand.New(rand.NewPCG(24, 8))
	costs := []string{"0", "0.5", "1", "2.25", "3", "0.000001", "7", "11"}
	cost := func() decimal.Decimal { return dec(costs[rng.IntN(len(costs))]) }
	most, accepted, denied := 0, 0, 0
	check := func(what string, got ledger.Snapshot) {
		t.Helper()
		now := clock.Now()
		if !got.Now.Equal(now) {
			t.Fatalf("%s: answered at %v, the clock says %v", what, got.Now, now)
		}
		sameWindow(t, what, rule, got.State, model, now)
		most = max(most, checkWindowRow(t, what, readRow(t, s, "w", "k"), w))
	}
	fill := func(what string, c decimal.Decimal, out ledger.FillupOutcome) {
		t.Helper()
		d, ns := bucket.Fillup(rule, model, clock.Now(), ledger.Amount(c))
		if out.Accepted != d.Accepted {
			t.Fatalf("%s of %s: accepted %v, the rule says %v (model %+v)", what, c, out.Accepted, d.Accepted, model)
		}
		if d.Accepted {
			model = ns
			accepted++
		} else {
			denied++
		}
		check(fmt.Sprintf("%s of %s", what, c), out.Items[0].Snapshot)
	}
	latest := clock.Now() // the latest instant the clock showed
	for step := range 600 {
		if rng.IntN(50) == 0 {
			// Back, at most 5s behind the latest instant: within ClockStep,
			// where the store keeps a bucket's time as the rule does.
			clock.Set(latest.Add(-time.Duration(rng.IntN(5_000_000)) * time.Microsecond))
		} else {
			clock.Advance(time.Duration(rng.IntN(400_000)) * time.Microsecond)
		}
		now := clock.Now()
		latest = later(latest, now)
		what := fmt.Sprintf("step %d at %s", step, now.Format(time.RFC3339Nano))
		switch op := rng.IntN(12); {
		case op < 6:
			c := cost()
			out, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ref, Cost: c}}, ledger.Idempotency{})
			if err != nil {
				t.Fatal(err)
			}
			fill(what+": fillup", c, out)
		case op == 6:
			c := cost()
			out, err := s.FillupAllOrNone(ctx, ledger.Charge{Bucket: ref, Cost: c}, ledger.Idempotency{})
			if err != nil {
				t.Fatal(err)
			}
			fill(what+": all-or-none fillup", c, out)
		case op == 7:
			cs := make([]decimal.Decimal, 2+rng.IntN(4))
			for i := range cs {
				cs[i] = cost()
			}
			outs, errs := s.FillupBatch(ctx, ref, cs)
			for i, c := range cs {
				if errs[i] != nil {
					t.Fatal(errs[i])
				}
				// Each item answers the bucket right after it; the row is
				// the one after the last.
				d, ns := bucket.Fillup(rule, model, now, ledger.Amount(c))
				if outs[i].Accepted != d.Accepted {
					t.Fatalf("%s: batch item %d of %s: accepted %v, the rule says %v", what, i, c, outs[i].Accepted, d.Accepted)
				}
				if d.Accepted {
					model = ns
				}
				sameWindow(t, fmt.Sprintf("%s: batch item %d of %s", what, i, c), rule, outs[i].Items[0].Snapshot.State, model, now)
			}
			checkWindowRow(t, what+": batch", readRow(t, s, "w", "k"), w)
		case op == 8:
			a := dec(costs[1+rng.IntN(len(costs)-1)])
			ttl := time.Duration(1+rng.IntN(5_000_000)) * time.Microsecond
			out, err := s.Reserve(ctx, ref, a, ttl, ledger.Idempotency{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			d, ns := bucket.Reserve(rule, model, now, ledger.Amount(a), now.Add(ttl))
			if out.Accepted != d.Accepted {
				t.Fatalf("%s: reserve %s: accepted %v, the rule says %v", what, a, out.Accepted, d.Accepted)
			}
			if d.Accepted {
				ns.Holds[len(ns.Holds)-1].ID = out.Reservation.ID
				model = ns
				holds = append(holds, out.Reservation)
			}
			check(what+": reserve "+a.String(), out.Snapshot)
		case op < 11:
			holds = slices.DeleteFunc(holds, func(h ledger.Reservation) bool { return !now.Before(h.ExpiresAt) })
			if len(holds) == 0 {
				continue
			}
			h := holds[rng.IntN(len(holds))]
			holds = slices.DeleteFunc(holds, func(x ledger.Reservation) bool { return x.ID == h.ID })
			i := slices.IndexFunc(model.Holds, func(x bucket.Hold) bool { return x.ID == h.ID })
			if i < 0 {
				continue // expired by a write at a later instant, before the clock went back
			}
			var out ledger.ResolveOutcome
			charge := decimal.Zero
			if op == 9 {
				charge = h.Amount.Mul(dec([]string{"0", "0.5", "1", "1.5"}[rng.IntN(4)]))
				out, err = s.Commit(ctx, h.ID, decimal.NewNullDecimal(charge), true, ledger.Idempotency{}, nil)
			} else {
				out, err = s.Release(ctx, h.ID, ledger.Idempotency{}, nil)
			}
			if err != nil || out.Refusal != "" {
				t.Fatalf("%s: resolving %s: %+v %v", what, h.ID, out, err)
			}
			model = bucket.Resolve(rule, model, now, i, ledger.Amount(charge))
			check(fmt.Sprintf("%s: resolve %s charging %s", what, h.ID, charge), out.Snapshot)
		default:
			a := dec([]string{"0", "0.5", "3", "8", "100"}[rng.IntN(5)])
			out, err := s.Drain(ctx, ref, a, ledger.Idempotency{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			removed, ns := bucket.Drain(rule, model, now, ledger.Amount(a))
			if !ledger.Amount(out.Removed).Equal(removed) {
				t.Fatalf("%s: drain %s removed %s, the rule says %s", what, a, out.Removed, removed)
			}
			model = ns
			check(what+": drain "+a.String(), out.Snapshot)
		}
		snap, err := s.Inspect(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		check(what+": inspect", snap)
	}
	// Last, once the holds have expired, a drain of everything and then a
	// charge in each of length/precision + 2 consecutive slots: the row
	// holds exactly the bound.
	clock.Set(latest.Add(5 * time.Second))
	out, err := s.Drain(ctx, ref, dec("1000"), ledger.Idempotency{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, model = bucket.Drain(rule, model, clock.Now(), bucket.MustAmount("1000"))
	check("drain of everything", out.Snapshot)
	for i := range w.Slots() + 2 {
		clock.Advance(w.Precision)
		out, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ref, Cost: dec("0.5")}}, ledger.Idempotency{})
		if err != nil {
			t.Fatal(err)
		}
		fill(fmt.Sprintf("charge %d, a slot after the last", i), dec("0.5"), out)
	}
	if bound := int(w.Slots()) + 1; most != bound || accepted == 0 || denied == 0 {
		t.Fatalf("at most %d slots stored (bound %d), %d fillups accepted, %d denied: the test did not exercise the bound", most, bound, accepted, denied)
	}
	t.Logf("%d fillups accepted, %d denied; at most %d slots stored", accepted, denied, most)
}

// TestWindowSwitch: a PUT that changes a window's length or precision, or
// the kind, settles every bucket under the old rule at the PUT: the row
// keeps the level as of the PUT (charges that aged out are gone) with no
// slots, which the new rule reads as one charge made at the PUT; a PUT that
// changes only the capacity or history leaves the slots as they are.
func TestWindowSwitch(t *testing.T) {
	clock := ledgertest.NewClock()
	s := open(t, postgres.WithClock(clock.Now))
	ctx := context.Background()
	w1 := ledger.Window{Length: 10 * time.Second, Precision: time.Second}
	put := func(l ledger.Limit) bucket.Limit {
		t.Helper()
		got, err := s.PutLimit(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		return got.Rule()
	}
	rule := put(ledger.Limit{Name: "w", Capacity: dec("100"), Window: &w1})
	ref := ledger.BucketRef{Limit: "w", Key: "k"}
	var model bucket.State
	for _, c := range []string{"10", "20", "5", "7.5"} {
		out, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ref, Cost: dec(c)}}, ledger.Idempotency{})
		if err != nil || !out.Accepted {
			t.Fatalf("fillup %s: %+v %v", c, out, err)
		}
		_, model = bucket.Fillup(rule, model, clock.Now(), bucket.MustAmount(c))
		clock.Advance(4 * time.Second)
	}
	// Now 16s after the first charge: the 10 and the 20 have aged out.
	inspect := func(what string) bucket.State {
		t.Helper()
		snap, err := s.Inspect(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		sameWindow(t, what, snap.Limit.Rule(), snap.State, model, clock.Now())
		return snap.State
	}
	inspect("before any PUT")
	if lvl := bucket.LevelAt(rule, model, clock.Now()); !lvl.Equal(bucket.MustAmount("12.5")) {
		t.Fatalf("the model's level is %s, want 12.5", lvl)
	}

	// Capacity and history only: the same rule, the slots stay.
	before := readRow(t, s, "w", "k")
	clock.Advance(time.Second)
	put(ledger.Limit{Name: "w", Capacity: dec("50"), Window: &w1, History: true})
	if after := readRow(t, s, "w", "k"); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("a PUT of the same window changed the row:\n %+v\nwant %+v", after, before)
	}

	// Another precision: settled at the PUT, one charge at the PUT. The 5
	// ages out first.
	clock.Advance(2500 * time.Millisecond)
	w2 := ledger.Window{Length: 20 * time.Second, Precision: 2 * time.Second}
	old := rule
	model, _ = bucket.Switch(old, model, clock.Now())
	rule = put(ledger.Limit{Name: "w", Capacity: dec("50"), Window: &w2})
	row := readRow(t, s, "w", "k")
	if row.idx != nil || !row.level.Equal(bucket.MustAmount("7.5")) || !row.updated.Equal(clock.Now()) {
		t.Fatalf("after switching the precision: row %+v, want level 7.5 at %v without slots", row, clock.Now())
	}
	inspect("after switching the precision")
	clock.Advance(time.Second)
	out, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ref, Cost: dec("2")}}, ledger.Idempotency{})
	if err != nil || !out.Accepted {
		t.Fatalf("fillup after the switch: %+v %v", out, err)
	}
	d, ns := bucket.Fillup(rule, model, clock.Now(), bucket.MustAmount("2"))
	model = ns
	sameWindow(t, "fillup after the switch", rule, out.Items[0].Snapshot.State, model, clock.Now())
	if !d.Level.Equal(bucket.MustAmount("9.5")) {
		t.Fatalf("level after the switch and a charge of 2: %s, want 9.5", d.Level)
	}
	// The kept level is the PUT's charge: it ages out 20s after the end of
	// the PUT's 2s slot, the 2 a slot later or the same one.
	checkWindowRow(t, "after the switch", readRow(t, s, "w", "k"), w2)
	clock.Set(bucket.WindowEnd(rule, model, clock.Now()).Add(-time.Microsecond))
	if st := inspect("a microsecond before the window clears"); bucket.LevelAt(rule, st, clock.Now()).IsZero() {
		t.Fatal("cleared early")
	}
	clock.Advance(time.Microsecond)
	if st := inspect("when the window clears"); !bucket.LevelAt(rule, st, clock.Now()).IsZero() {
		t.Fatal("not cleared")
	}

	// To a leak and back to a window: the level as of each PUT is kept.
	out, err = s.Fillup(ctx, []ledger.Charge{{Bucket: ref, Cost: dec("30")}}, ledger.Idempotency{})
	if err != nil || !out.Accepted {
		t.Fatalf("fillup: %+v %v", out, err)
	}
	_, model = bucket.Fillup(rule, model, clock.Now(), bucket.MustAmount("30"))
	clock.Advance(3 * time.Second)
	model, _ = bucket.Switch(rule, model, clock.Now())
	rule = put(ledger.Limit{Name: "w", Capacity: dec("50"), LeakAmount: dec("1"), LeakPer: time.Second})
	if row := readRow(t, s, "w", "k"); row.idx != nil || !row.level.Equal(bucket.LevelAt(rule, model, clock.Now())) {
		t.Fatalf("after switching to a leak: row %+v, want level %s without slots", row, bucket.LevelAt(rule, model, clock.Now()))
	}
	clock.Advance(7 * time.Second)
	model, _ = bucket.Switch(rule, model, clock.Now())
	rule = put(ledger.Limit{Name: "w", Capacity: dec("50"), Window: &w1})
	want := bucket.LevelAt(rule, model, clock.Now())
	if row := readRow(t, s, "w", "k"); row.idx != nil || !row.level.Equal(want) || want.IsZero() {
		t.Fatalf("after switching back to a window: row %+v, want level %s without slots", row, want)
	}
	inspect("after switching back to a window")
	out, err = s.Fillup(ctx, []ledger.Charge{{Bucket: ref, Cost: dec("1")}}, ledger.Idempotency{})
	if err != nil || !out.Accepted {
		t.Fatalf("fillup: %+v %v", out, err)
	}
	_, model = bucket.Fillup(rule, model, clock.Now(), bucket.MustAmount("1"))
	sameWindow(t, "a charge after switching back", rule, out.Items[0].Snapshot.State, model, clock.Now())
	if row := readRow(t, s, "w", "k"); len(row.idx) != 1 || !row.sums[0].Equal(want.Add(bucket.MustAmount("1"))) {
		t.Fatalf("the PUT's charge and one made in the same slot: row %+v", row)
	}
}

// TestWindowClockStepBack: a window bucket charged while the database clock
// was 30 days ahead keeps counting those charges once the clock is
// corrected (a clock that steps back creates no capacity), on the
// single-bucket and the multi-bucket path and for Reserve; charges made
// after the correction go into the newest slot, so the row stays within its
// bound; and the bucket clears when the clock reaches the end of the window
// of those charges.
func TestWindowClockStepBack(t *testing.T) {
	clock := ledgertest.NewClock()
	s := open(t, postgres.WithClock(clock.Now))
	ctx := context.Background()
	w := ledger.Window{Length: time.Minute, Precision: time.Second}
	if _, err := s.PutLimit(ctx, ledger.Limit{Name: "w", Capacity: dec("10"), Window: &w}); err != nil {
		t.Fatal(err)
	}
	ref := func(k string) ledger.BucketRef { return ledger.BucketRef{Limit: "w", Key: k} }
	fill := func(cost string, keys ...string) bool {
		t.Helper()
		var items []ledger.Charge
		for _, k := range keys {
			items = append(items, ledger.Charge{Bucket: ref(k), Cost: dec(cost)})
		}
		out, err := s.Fillup(ctx, items, ledger.Idempotency{})
		if err != nil {
			t.Fatal(err)
		}
		return out.Accepted
	}
	t0 := clock.Now()
	ahead := t0.Add(30 * 24 * time.Hour)
	clock.Set(ahead)
	for _, k := range []string{"single", "m1", "m2"} {
		if !fill("9", k) {
			t.Fatalf("fill %s denied", k)
		}
	}
	clock.Set(t0)
	if fill("2", "single") || fill("2", "m1", "m2") {
		t.Fatal("the charges made ahead no longer count after the correction")
	}
	if r, err := s.Reserve(ctx, ref("single"), dec("2"), time.Minute, ledger.Idempotency{}, nil); err != nil || r.Accepted {
		t.Fatalf("reserve after the correction: %+v %v", r, err)
	}
	for i := range 100 {
		clock.Advance(time.Second)
		if !fill("0.01", "single") {
			t.Fatalf("charge %d after the correction denied", i)
		}
	}
	row := readRow(t, s, "w", "single")
	if len(row.idx) != 1 || row.idx[0] != ahead.UnixMicro()/time.Second.Microseconds() || !row.sums[0].Equal(bucket.MustAmount("10")) {
		t.Fatalf("after the correction: row %+v, want one slot, the one charged ahead, holding 10", row)
	}
	clock.Set(ahead.Truncate(time.Second).Add(time.Second + time.Minute - time.Microsecond))
	if fill("0.000001", "single") {
		t.Fatal("accepted before the window of the charges made ahead ended")
	}
	clock.Advance(time.Microsecond)
	if !fill("10", "single") {
		t.Fatal("denied once the window of the charges made ahead ended")
	}
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// TestWindowPrune: the pruner deletes an idle window bucket once none of its
// charges counts any more, and not a microsecond before: its level is the
// window's, not the stored sum.
func TestWindowPrune(t *testing.T) {
	clock := ledgertest.NewClock()
	s := open(t, postgres.WithClock(clock.Now))
	ctx := context.Background()
	w := ledger.Window{Length: time.Minute, Precision: time.Second}
	lim, err := s.PutLimit(ctx, ledger.Limit{Name: "w", Capacity: dec("10"), Window: &w})
	if err != nil {
		t.Fatal(err)
	}
	ref := ledger.BucketRef{Limit: "w", Key: "k"}
	var model bucket.State
	for range 3 {
		out, err := s.Fillup(ctx, []ledger.Charge{{Bucket: ref, Cost: dec("1")}}, ledger.Idempotency{})
		if err != nil || !out.Accepted {
			t.Fatalf("fillup: %+v %v", out, err)
		}
		_, model = bucket.Fillup(lim.Rule(), model, clock.Now(), bucket.MustAmount("1"))
		clock.Advance(20 * time.Second)
	}
	end := bucket.WindowEnd(lim.Rule(), model, clock.Now())
	prune := func(at time.Time) int {
		t.Helper()
		clock.Set(at)
		st, err := s.Prune(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.EmptyBuckets
	}
	if n := prune(end.Add(-time.Microsecond)); n != 0 || readRow(t, s, "w", "k").level.IsZero() {
		t.Fatalf("a microsecond before the last charge stops counting: %d buckets pruned", n)
	}
	if n := prune(end); n != 1 {
		t.Fatalf("once no charge counts: %d buckets pruned, want 1", n)
	}
	if row := readRow(t, s, "w", "k"); row.idx != nil || !row.updated.IsZero() {
		t.Fatalf("the bucket is still there: %+v", row)
	}
}

package ledgertest

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// The thresholds of the terms differential: the limit's PUTs set, change,
// reorder and remove its thresholds (amounts and percentages), Drains join
// the writes, and after every write the events the store emitted for each
// bucket are the pure rule's (ledger.Cross of the model's own marks, the use
// before and after the write, at the effective capacity of ledger.TermsAt,
// in the period that contains the write), field by field and in order.
//
// Its random choices come from a stream of their own (termsRun.trng), so
// the rest of a sequence draws what it drew before thresholds were part of
// it.

// termsEventsPage is how many events one read of the outbox asks for.
const termsEventsPage = 100

// termsEvents is what the differential keeps of the events: the cursor
// after the last event read, the events the model predicts and has not yet
// found in the store (each with the step that caused it), and every event
// the model predicted for each bucket, oldest first.
type termsEvents struct {
	cursor  string
	pending []termsEvent
	all     map[string][]ledger.OutboxEvent
}

// termsEvent is an event the model predicts, and the step that emits it.
type termsEvent struct {
	ev    ledger.OutboxEvent
	where string
}

// startThresholds opens the event stream of the sequence: the cursor is
// the outbox's end, and the limit is first put with thresholds or without.
func (x *termsRun) startThresholds() {
	x.ev.all = map[string][]ledger.OutboxEvent{}
	page, next, err := x.e.svc.Events(x.e.ctx, "", termsEventsPage)
	if err != nil || len(page) != 0 {
		x.t.Fatalf("Events of an empty store: %d events, %v", len(page), err)
	}
	x.ev.cursor = next
	x.spec.Thresholds = x.randomThresholds()
}

// randomThresholds is a list of thresholds for a PUT: none, or up to 5 of
// whole and fractional percentages (up to 150%, beyond the capacity a soft
// limit may reach) and amounts, none twice.
func (x *termsRun) randomThresholds() []ledger.Threshold {
	rng := x.trng
	var out []ledger.Threshold
	for range 1 + rng.IntN(5) {
		var th ledger.Threshold
		switch rng.IntN(4) {
		case 0:
			th.Percent = decimal.New(int64(10+rng.IntN(141)), 0)
		case 1:
			th.Percent = decimal.New(int64(1+rng.IntN(15000)), -2)
		case 2:
			th.Amount = decimal.New(int64(1+rng.IntN(200)), 0)
		default:
			th.Amount = decimal.New(1+rng.Int64N(200_000_000), -6)
		}
		dup := false
		for _, u := range out {
			dup = dup || u.Percent.Equal(th.Percent) && u.Amount.Equal(th.Amount)
		}
		if !dup {
			out = append(out, th)
		}
	}
	return out
}

// nextThresholds is the thresholds of the limit's next PUT: those it has
// (the buckets keep their marks), the same in another order (the marks are
// recomputed without events), another list, or none.
func (x *termsRun) nextThresholds() []ledger.Threshold {
	cur := x.w.limit.Thresholds
	switch x.trng.IntN(6) {
	case 0, 1:
		return cur
	case 2:
		out := append([]ledger.Threshold(nil), cur...)
		x.trng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		return out
	case 3:
		return nil
	default:
		return x.randomThresholds()
	}
}

// notice is the threshold rule for a write of the model's bucket m under
// terms tm from state before (the bucket's state as tm settled it) to its
// state now: the marks it keeps, and the events it emits, predicted.
func (x *termsRun) notice(m *termsModel, tm ledger.Terms, before bucket.State, now time.Time, where string) {
	l := tm.Limit
	var periodStart time.Time
	if l.Period != nil {
		periodStart, _ = l.Rule().Period.Bounds(now)
	}
	used := ledger.UsedAt(l, m.state, now)
	marks, cs := ledger.Cross(l, m.marks, ledger.UsedAt(l, before, now), used, l.Capacity, periodStart)
	m.marks = marks
	for _, ev := range ledger.NewEvents(l, ref(termsLimit, m.key), cs, now, used, l.Capacity, periodStart) {
		x.ev.pending = append(x.ev.pending, termsEvent{ev: ev, where: where})
		x.ev.all[m.key] = append(x.ev.all[m.key], ev)
		x.seen[strings.TrimPrefix(ev.Type, "threshold.")]++
	}
}

// drain lowers the bucket by a random amount: what it removes and the
// bucket after it are the pure rule's.
func (x *termsRun) drain(now time.Time, b int, where string) {
	t, e, w, m := x.t, x.e, x.w, x.models[b]
	amount := decimal.New(1+x.trng.Int64N(60_000_000), -6)
	if x.trng.IntN(2) == 0 {
		amount = decimal.New(int64(1+x.trng.IntN(60)), 0)
	}
	tm := w.terms(m, now)
	removed, ns := bucket.Drain(tm.Limit.Rule(), tm.State, now, ledger.Amount(amount))
	res, err := e.svc.Drain(e.ctx, ref(termsLimit, m.key), amount, ledger.Idempotency{}, nil)
	if err != nil {
		t.Fatalf("%s drain %s: %v", where, amount, err)
	}
	if !res.Removed.Equal(removed.Decimal()) {
		t.Fatalf("%s drain %s removed %s, want %s", where, amount, res.Removed, removed)
	}
	after := tm.State
	if removed.Sign() > 0 {
		m.write(tm, ns)
		x.notice(m, tm, tm.State, now, where+" drain "+amount.String())
		x.seen["drained"]++
		after = ns
	}
	want := bucket.CanAccept(tm.Limit.Rule(), after, now, bucket.Amount{})
	if !res.Bucket.Level.Equal(want.Level) || !res.Bucket.Capacity.Equal(want.Capacity) {
		t.Fatalf("%s drain %s (removed %s): bucket %+v, want level %s capacity %s", where, amount, removed, res.Bucket, want.Level, want.Capacity)
	}
}

// sameEvents reads the events the store emitted since the last read and
// demands the ones the model predicts: for each bucket the same events in
// the same order, every field the store reports equal. It reads only when
// the model predicts an event, or when last (the end of the sequence): an
// event the store emitted and the model did not is found at the next read.
func (x *termsRun) sameEvents(last bool) {
	if len(x.ev.pending) == 0 && !last {
		return
	}
	t, e := x.t, x.e
	var got []ledger.OutboxEvent
	for {
		page, next, err := e.svc.Events(e.ctx, x.ev.cursor, termsEventsPage)
		if err != nil {
			t.Fatalf("Events(%q): %v", x.ev.cursor, err)
		}
		got = append(got, page...)
		if len(page) == 0 {
			break
		}
		x.ev.cursor = next
		if len(got) >= len(x.ev.pending) && len(page) < termsEventsPage && !last {
			break
		}
	}
	want := x.ev.pending
	x.ev.pending = nil
	perBucket := func(key string) (g []ledger.OutboxEvent, w []termsEvent) {
		for _, ev := range got {
			if ev.Bucket.Key == key {
				g = append(g, ev)
			}
		}
		for _, ev := range want {
			if ev.ev.Bucket.Key == key {
				w = append(w, ev)
			}
		}
		return g, w
	}
	for _, ev := range got {
		if ev.Bucket.Limit != termsLimit || ev.ID == "" || ev.Bucket.Key != x.models[0].key && ev.Bucket.Key != x.models[1].key {
			t.Fatalf("an event of another bucket, or without an id: %s", termsEventText(ev))
		}
	}
	for _, m := range x.models {
		g, w := perBucket(m.key)
		for i := range max(len(g), len(w)) {
			switch {
			case i >= len(w):
				t.Fatalf("bucket %s: the store emitted %s, the model nothing more (it emitted %s)", m.key, termsEventText(g[i]), termsEventsText(g))
			case i >= len(g):
				t.Fatalf("%s: the store did not emit %s (it emitted %s)", w[i].where, termsEventText(w[i].ev), termsEventsText(g))
			case !sameEvent(g[i], w[i].ev):
				t.Fatalf("%s: the store emitted %s, want %s (an event's time is its write's)", w[i].where, termsEventText(g[i]), termsEventText(w[i].ev))
			}
		}
	}
}

// sameBucketEvents demands that BucketEvents lists each bucket's events as
// the model emitted them, newest first: all that are younger than the
// retention (up to the most one call lists), and no other.
func (x *termsRun) sameBucketEvents(now time.Time) {
	for _, m := range x.models {
		got, err := x.e.svc.BucketEvents(x.e.ctx, ref(termsLimit, m.key), ledger.MaxBucketEvents)
		if err != nil {
			x.t.Fatalf("BucketEvents(%s): %v", m.key, err)
		}
		all := x.ev.all[m.key]
		kept := 0
		for i := len(all) - 1; i >= 0 && kept < ledger.MaxBucketEvents && now.Sub(all[i].Time) < ledger.EventRetention; i-- {
			kept++
		}
		if len(got) < kept || len(got) > min(len(all), ledger.MaxBucketEvents) {
			x.t.Fatalf("BucketEvents(%s) listed %d events, want %d to %d", m.key, len(got), kept, min(len(all), ledger.MaxBucketEvents))
		}
		for i, ev := range got {
			if want := all[len(all)-1-i]; !sameEvent(ev, want) {
				x.t.Fatalf("BucketEvents(%s)[%d] = %s, want %s", m.key, i, termsEventText(ev), termsEventText(want))
			}
		}
	}
}

// sameEvent reports whether the store's event got is the model's want in
// every field but the store-assigned id.
func sameEvent(got, want ledger.OutboxEvent) bool {
	return got.Type == want.Type && got.Bucket == want.Bucket && got.Threshold == want.Threshold &&
		got.Used.Equal(want.Used) && got.Capacity.Equal(want.Capacity) &&
		got.Time.Equal(want.Time) && got.PeriodStart.Equal(want.PeriodStart)
}

// termsEventText is an event as a failure shows it.
func termsEventText(ev ledger.OutboxEvent) string {
	ps := ""
	if !ev.PeriodStart.IsZero() {
		ps = " period " + ev.PeriodStart.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("[%s at %s%s]", eventText(ev), ev.Time.UTC().Format(time.RFC3339Nano), ps)
}

func termsEventsText(evs []ledger.OutboxEvent) string {
	if len(evs) == 0 {
		return "none"
	}
	s := make([]string, len(evs))
	for i, ev := range evs {
		s[i] = termsEventText(ev)
	}
	return strings.Join(s, " ")
}

// newThresholdsRand is the random stream of the thresholds part of a
// sequence of the given seed.
func newThresholdsRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x7405)) }

package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/postgres"
	"github.com/shopspring/decimal"
)

// termsPair is two Stores on one database (two budgetd instances), with a
// pinned clock, and a limit "api" of capacity 10 leaking 1 per 1000 h.
type termsPair struct {
	t          *testing.T
	ctx        context.Context
	clock      *ledgertest.Clock
	s1         *postgres.Store
	one, other *ledger.Service
}

func newTermsPair(t *testing.T) *termsPair {
	ctx := context.Background()
	url := dsn(t)
	schema := newSchema(t)
	clock := ledgertest.NewClock()
	opts := []postgres.Option{postgres.WithSchema(schema), postgres.WithPruneInterval(0), postgres.WithClock(clock.Now)}
	s1, err := postgres.Open(ctx, url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s1.Close() })
	s2, err := postgres.Open(ctx, url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	p := &termsPair{t: t, ctx: ctx, clock: clock, s1: s1, one: ledger.NewService(s1), other: ledger.NewService(s2)}
	if _, err := p.one.PutLimit(ctx, "api", ledger.LimitSpec{Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: 1000 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *termsPair) put(svc *ledger.Service, o ledger.Override) {
	p.t.Helper()
	if _, err := svc.PutOverride(p.ctx, "api", o); err != nil {
		p.t.Fatalf("PutOverride(%s): %v", o.Pattern, err)
	}
}

// decide charges key cost on the first instance and checks the decision,
// the capacity and the override it applied.
func (p *termsPair) decide(key, cost string, accepted bool, capacity, override string) bucket.Decision {
	p.t.Helper()
	res, err := p.one.Fillup(p.ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "api", Key: key}, Cost: dec(cost)}}, ledger.Idempotency{})
	if err != nil || res.Accepted != accepted || res.Items[0].Capacity.String() != capacity || res.Limits[0].Override != override {
		p.t.Fatalf("%s %s: got %+v %v, want accepted %v, capacity %s under %q", key, cost, res, err, accepted, capacity, override)
	}
	return res.Items[0]
}

// coalesced decides the keys as one coalesced batch of single-bucket calls
// on the first instance (budgetd_fillup with the limit read once for all
// buckets, each with its own terms).
func (p *termsPair) coalesced(keys, capacities, overrides []string) {
	p.t.Helper()
	refs := make([]ledger.BucketRef, len(keys))
	costs := make([]decimal.Decimal, len(keys))
	for i, k := range keys {
		refs[i] = ledger.BucketRef{Limit: "api", Key: k}
		costs[i] = dec("0.000001")
	}
	outs, errs := p.s1.FillupCalls(p.ctx, refs, costs, make([]ledger.Idempotency, len(keys)))
	for i := range keys {
		if errs[i] != nil || !outs[i].Accepted || outs[i].Items[0].Snapshot.Limit.Capacity.String() != capacities[i] ||
			outs[i].Items[0].Snapshot.Limit.Override != overrides[i] {
			p.t.Fatalf("%s coalesced: %+v %v, want capacity %s under %q", keys[i], outs[i], errs[i], capacities[i], overrides[i])
		}
	}
}

// TestTermsInGo: the terms of a decision are resolved in Go from an
// in-process index of the limit and its overrides (terms.go), which the
// function checks against the limit's row under the bucket's lock. The
// index is read once and kept while nothing changes; every change made
// through another instance is seen at the next decision (stale, read
// again), on single and coalesced calls, for exact keys and prefixes; a
// temporary override applies up to the microsecond before its expiry and
// not from it, and again when the clock steps back before it.
func TestTermsInGo(t *testing.T) {
	p := newTermsPair(t)
	p.put(p.one, ledger.Override{Pattern: "t-1", Capacity: decimal.NewNullDecimal(dec("100"))})
	p.put(p.one, ledger.Override{Pattern: "t-*", Capacity: decimal.NewNullDecimal(dec("50"))})

	keys := []string{"t-1", "t-2", "u"}
	p.decide("t-1", "0.000001", true, "100", "t-1")
	p.decide("t-2", "0.000001", true, "50", "t-*")
	p.decide("u", "0.000001", true, "10", "")
	p.coalesced(keys, []string{"100", "50", "10"}, []string{"t-1", "t-*", ""})
	loads := p.s1.Stats().TermsLoads
	p.decide("t-1", "0.000001", true, "100", "t-1")
	p.coalesced(keys, []string{"100", "50", "10"}, []string{"t-1", "t-*", ""})
	if st := p.s1.Stats(); st.TermsLoads != loads || st.StaleTerms != 0 {
		t.Fatalf("unchanged overrides: %d loads (from %d), %d stale answers; want none", st.TermsLoads, loads, st.StaleTerms)
	}

	// Every change through the other instance is seen at the next
	// decision: a lower capacity (a cost the old one would take is
	// denied), a delete uncovering the prefix, a new override for a key
	// that had none, a longer prefix.
	p.put(p.other, ledger.Override{Pattern: "t-1", Capacity: decimal.NewNullDecimal(dec("7"))})
	p.decide("t-1", "8", false, "7", "t-1")
	if p.s1.Stats().StaleTerms == 0 {
		t.Fatal("a change by another instance was seen without a stale answer")
	}
	if err := p.other.DeleteOverride(p.ctx, "api", "t-1"); err != nil {
		t.Fatal(err)
	}
	p.coalesced([]string{"t-1", "u"}, []string{"50", "10"}, []string{"t-*", ""})
	p.put(p.other, ledger.Override{Pattern: "u", Capacity: decimal.NewNullDecimal(dec("20"))})
	p.decide("u", "15", true, "20", "u")
	p.put(p.other, ledger.Override{Pattern: "t-2*", Capacity: decimal.NewNullDecimal(dec("30"))})
	p.coalesced([]string{"t-2", "t-1"}, []string{"30", "50"}, []string{"t-2*", "t-*"})

	// A change of the limit itself through the other instance.
	if _, err := p.other.PutLimit(p.ctx, "api", ledger.LimitSpec{Capacity: dec("11"), LeakAmount: dec("1"), LeakPer: 1000 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	p.decide("v", "11", true, "11", "")

	// A temporary raise of t-2 put by the other instance applies up to the
	// microsecond before its end and not from it.
	end := p.clock.Now().Add(time.Hour)
	p.put(p.other, ledger.Override{Pattern: "t-2", Capacity: decimal.NewNullDecimal(dec("1000")), ExpiresAt: end})
	p.decide("t-2", "0.000001", true, "1000", "t-2")
	p.clock.Set(end.Add(-time.Microsecond))
	p.coalesced([]string{"t-2", "u"}, []string{"1000", "20"}, []string{"t-2", "u"})
	p.clock.Set(end)
	p.decide("t-2", "0.000001", true, "30", "t-2*")
	p.coalesced([]string{"t-2", "t-1"}, []string{"30", "50"}, []string{"t-2*", "t-*"})

	// A clock stepped back before that expiry: the raise applies again.
	p.clock.Set(end.Add(-time.Second))
	p.decide("t-2", "0.000001", true, "1000", "t-2")
}

// TestTermsSettleInGo: a bucket written under a temporary override that
// changes its rule, decided after the override's end, is settled at that
// end in Go (ledger.TermsAt under the row's lock) before the decision: it
// leaked at the override's rate up to the end and at the limit's after.
// Decided without the settling, from its last write at the limit's rate,
// it would still hold almost all of its level.
func TestTermsSettleInGo(t *testing.T) {
	p := newTermsPair(t)
	end := p.clock.Now().Add(time.Hour)
	p.put(p.other, ledger.Override{Pattern: "e", LeakAmount: dec("10"), LeakPer: time.Hour, ExpiresAt: end})
	p.decide("e", "8", true, "10", "e")
	p.clock.Set(end.Add(time.Hour))
	before := p.s1.Stats().Settled
	it := p.decide("e", "1", true, "10", "")
	if it.Level.String() != "1" {
		t.Fatalf("level after the override's end: %s, want 1 (8 leaked at 10/h for the hour it applied, then 1 charged)", it.Level)
	}
	if p.s1.Stats().Settled != before+1 {
		t.Fatalf("settled %d buckets in Go, want 1", p.s1.Stats().Settled-before)
	}
	// Settled once: the next decision has nothing to settle.
	p.decide("e", "1", true, "10", "")
	if p.s1.Stats().Settled != before+1 {
		t.Fatalf("settled again: %d", p.s1.Stats().Settled-before)
	}
}

// TestTermsHoldOnOtherInstance: Commit and Release learn their bucket from
// the hold, so an instance that did not reserve it reads it first; the
// terms it then passes are checked under the bucket's lock like any
// other's: an override changed by the reserving instance after the hold is
// seen by the commit's answer, and a limit the other instance changed
// makes the reserving instance's release read it again; an unknown hold is
// not found, with no bucket to read.
func TestTermsHoldOnOtherInstance(t *testing.T) {
	p := newTermsPair(t)
	p.put(p.one, ledger.Override{Pattern: "h", Capacity: decimal.NewNullDecimal(dec("100"))})
	ref := ledger.BucketRef{Limit: "api", Key: "h"}
	r1, err := p.one.Reserve(p.ctx, ref, dec("60"), time.Hour, ledger.Idempotency{}, nil)
	if err != nil || !r1.Decision.Accepted {
		t.Fatalf("reserve 60 under 100: %+v %v", r1, err)
	}
	r2, err := p.one.Reserve(p.ctx, ref, dec("30"), time.Hour, ledger.Idempotency{}, nil)
	if err != nil || !r2.Decision.Accepted {
		t.Fatalf("reserve 30 more under 100: %+v %v", r2, err)
	}
	p.put(p.one, ledger.Override{Pattern: "h", Capacity: decimal.NewNullDecimal(dec("200"))})

	out, err := p.other.Commit(p.ctx, r1.Reservation.ID, decimal.NullDecimal{}, false, ledger.Idempotency{}, nil)
	if err != nil || out.Bucket.Capacity.String() != "200" || out.Bucket.Override != "h" || out.Bucket.Level.String() != "60" {
		t.Fatalf("commit on the other instance: %+v %v, want capacity 200 under h", out, err)
	}
	if _, err := p.other.PutLimit(p.ctx, "api", ledger.LimitSpec{Capacity: dec("10"), LeakAmount: dec("1"), LeakPer: 2000 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	stale := p.s1.Stats().StaleTerms
	out, err = p.one.Release(p.ctx, r2.Reservation.ID, ledger.Idempotency{}, nil)
	if err != nil || out.Reservation.State != ledger.Released || out.Bucket.Capacity.String() != "200" {
		t.Fatalf("release after the other instance changed the limit: %+v %v", out, err)
	}
	if p.s1.Stats().StaleTerms == stale {
		t.Fatal("the release passed terms of the limit before its change without a stale answer")
	}
	if _, err := p.other.Commit(p.ctx, "hnosuchhold0000000000000000000000", decimal.NullDecimal{}, false, ledger.Idempotency{}, nil); !errors.Is(err, ledger.ErrReservationNotFound) {
		t.Fatalf("commit of an unknown hold: %v, want reservation not found", err)
	}
}

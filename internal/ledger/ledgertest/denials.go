package ledgertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
)

// testRecordDenials: a limit with record_denials writes one denied entry
// (the cost asked and the call's meta) for a denied Fillup, Reserve and each
// denied multi-bucket item, and changes nothing else; every call that wrote
// an entry names it (entry_id); an Idempotency-Key replay of a denial
// records nothing again; CanAccept, a limit without record_denials and a
// limit without history write nothing.
func testRecordDenials(t *testing.T, e *env) {
	r, entries := deniedFillups(t, e)
	for what, id := range deniedOthers(t, e, r) {
		entries[what] = id
	}
	deniedHistory(t, e, r, entries)
	testSilentDenials(t, e)
}

// deniedFillups puts the limit with record_denials, accepts one Fillup and
// denies one (replayed once by its key) of its bucket, and returns the
// bucket and the entry ids the two calls named.
func deniedFillups(t *testing.T, e *env) (ledger.BucketRef, map[string]string) {
	t.Helper()
	e.clock.Set(time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC))
	spec := ledger.LimitSpec{Capacity: dec("5"), LeakAmount: dec("5"), LeakPer: time.Hour, History: true, RecordDenials: true}
	if _, err := e.svc.PutLimit(e.ctx, "logins", spec); err != nil {
		t.Fatalf("PutLimit: %v", err)
	}
	l, err := e.svc.GetLimit(e.ctx, "logins")
	if err != nil || !l.RecordDenials {
		t.Fatalf("GetLimit: %+v %v", l, err)
	}
	r := ref("logins", "{d}alice")
	fill := func(cost string, meta ledger.Meta, idem ledger.Idempotency) ledger.FillupResult {
		t.Helper()
		res, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: r, Cost: dec(cost), Meta: meta}}, idem)
		if err != nil {
			t.Fatalf("Fillup %s: %v", cost, err)
		}
		return res
	}
	ok := fill("4", ledger.Meta{"ip": "10.0.0.1"}, ledger.Idempotency{})
	if !ok.Accepted || ok.EntryIDs[0] == "" {
		t.Fatalf("accepted fillup: %+v", ok)
	}
	before := e.state(r)
	e.clock.Advance(time.Second)
	denied := fill("2", ledger.Meta{"ip": "10.0.0.2"}, idem("deny-1", "h1"))
	if denied.Accepted || denied.EntryIDs[0] == "" || denied.EntryIDs[0] == ok.EntryIDs[0] {
		t.Fatalf("denied fillup: %+v", denied)
	}
	// Nothing was written: the bucket's time and holds are as they were,
	// and its level only leaked.
	if after := e.state(r); !after.UpdatedAt.Equal(before.UpdatedAt) || !after.Held.Equal(before.Held) || after.Level.GreaterThan(before.Level) {
		t.Fatalf("a recorded denial changed the bucket: %+v, was %+v", after, before)
	}
	replay := fill("2", ledger.Meta{"ip": "10.0.0.2"}, idem("deny-1", "h1"))
	if !replay.Replayed || replay.EntryIDs[0] != denied.EntryIDs[0] {
		t.Fatalf("replayed denial: %+v, want entry %s", replay, denied.EntryIDs[0])
	}
	return r, map[string]string{"fillup": ok.EntryIDs[0], "denied fillup": denied.EntryIDs[0]}
}

// deniedOthers denies a Reserve and a multi-bucket Fillup of r (after a
// CanAccept that records nothing) and drains it, and returns the entry ids
// the calls named.
func deniedOthers(t *testing.T, e *env, r ledger.BucketRef) map[string]string {
	t.Helper()
	if d := e.can(r, "3"); d.Accepted {
		t.Fatalf("CanAccept 3: %+v", d)
	}
	res, err := e.svc.Reserve(e.ctx, r, dec("3"), time.Minute, ledger.Idempotency{}, ledger.Meta{"job": "j1"})
	if err != nil || res.Decision.Accepted || res.EntryID == "" {
		t.Fatalf("denied reserve: %+v %v", res, err)
	}
	// A multi-bucket call denied by its first item: the second item, which
	// fits, is charged nothing and records nothing.
	other := ref("logins", "{d}bob")
	multi, err := e.svc.Fillup(e.ctx, []ledger.Item{
		{Bucket: r, Cost: dec("5"), Meta: ledger.Meta{"step": "m"}},
		{Bucket: other, Cost: dec("1"), Meta: ledger.Meta{"step": "m"}},
	}, ledger.Idempotency{})
	if err != nil || multi.Accepted || multi.EntryIDs[0] == "" || multi.EntryIDs[1] != "" {
		t.Fatalf("denied multi-bucket call: %+v %v", multi, err)
	}
	if st := e.state(other); !st.Level.IsZero() || !st.UpdatedAt.IsZero() {
		t.Fatalf("the item that fit was written: %+v", st)
	}
	if es, _, err := e.svc.History(e.ctx, other, "", 10); err != nil || len(es) != 0 {
		t.Fatalf("history of the item that fit: %+v %v", es, err)
	}
	dr, err := e.svc.Drain(e.ctx, r, dec("1"), ledger.Idempotency{}, nil)
	if err != nil || dr.EntryID == "" {
		t.Fatalf("drain: %+v %v", dr, err)
	}
	return map[string]string{"denied reserve": res.EntryID, "denied item": multi.EntryIDs[0], "drain": dr.EntryID}
}

// deniedHistory: r's history holds each call's entry, the denials with the
// cost asked and the call's meta, and every entry id a call named.
func deniedHistory(t *testing.T, e *env, r ledger.BucketRef, entries map[string]string) {
	t.Helper()
	es, _, err := e.svc.History(e.ctx, r, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	ids := map[string]string{}
	for _, en := range es {
		got = append(got, fmt.Sprintf("%s %s %s", en.Event, en.Amount, en.Meta.JSON()))
		ids[en.ID] = string(en.Event)
	}
	want := []string{ // newest first
		`drain 1 `,
		`denied 5 {"step":"m"}`,
		`denied 3 {"job":"j1"}`,
		`denied 2 {"ip":"10.0.0.2"}`,
		`fillup 4 {"ip":"10.0.0.1"}`,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("history:\n%q\nwant\n%q", got, want)
	}
	for what, id := range entries {
		if ids[id] == "" {
			t.Errorf("%s: entry_id %q is not in the history", what, id)
		}
	}
}

// testSilentDenials: without record_denials, and without history, a
// denial writes nothing.
func testSilentDenials(t *testing.T, e *env) {
	t.Helper()
	for name, spec := range map[string]ledger.LimitSpec{
		"quiet":      {Capacity: dec("1"), LeakAmount: dec("1"), LeakPer: time.Hour, History: true},
		"no-history": {Capacity: dec("1"), LeakAmount: dec("1"), LeakPer: time.Hour, RecordDenials: true},
	} {
		if _, err := e.svc.PutLimit(e.ctx, name, spec); err != nil {
			t.Fatal(err)
		}
		q := ref(name, "k")
		if res := fill2(t, e, q, "2"); res.Accepted || res.EntryIDs[0] != "" {
			t.Fatalf("%s: denial %+v", name, res)
		}
		if es, _, err := e.svc.History(e.ctx, q, "", 10); err != nil || len(es) != 0 {
			t.Fatalf("%s: history %+v %v", name, es, err)
		}
	}
}

// fill2 charges cost to r without meta or key.
func fill2(t *testing.T, e *env, r ledger.BucketRef, cost string) ledger.FillupResult {
	t.Helper()
	res, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: r, Cost: dec(cost)}}, ledger.Idempotency{})
	if err != nil {
		t.Fatalf("Fillup %s: %v", cost, err)
	}
	return res
}

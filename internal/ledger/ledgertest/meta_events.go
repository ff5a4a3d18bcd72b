package ledgertest

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// testMetaEvents: Reserve then Commit, Reserve then Release, and Drain, each
// with its own meta and an Idempotency-Key, on a leaky and on a periodic
// limit: every history entry carries the meta of the call that made it (a
// committed or released entry the meta of the Commit or Release, not the
// Reserve's; one without meta none), and a replay of each call adds no
// entry and leaves the meta as it was.
func testMetaEvents(t *testing.T, e *env) {
	e.limit("leaky", "100", "1", time.Hour, true)
	e.periodic("monthly", "5000.00", ledger.Period{Every: "month", TZ: "Europe/Berlin"}, true)
	for _, limit := range []string{"leaky", "monthly"} {
		t.Run(limit, func(t *testing.T) { metaEventsOn(t, e, limit) })
	}
}

// metaEventsOn is testMetaEvents on one limit.
func metaEventsOn(t *testing.T, e *env, limit string) {
	r := ref(limit, "{mx}acme")
	want, replays := metaCalls(t, e, r)
	checkMetaHistory(t, e, r, "after the calls", want)

	e.clock.Advance(time.Second)
	for i, replay := range replays {
		if replayed, err := replay(); err != nil || !replayed {
			t.Errorf("replay %d: replayed %v, %v", i, replayed, err)
		}
	}
	checkMetaHistory(t, e, r, "after the replays", want)

	// The meta a caller passed is the caller's: changing the map
	// afterwards changes nothing stored.
	m := ledger.Meta{"reason": "late"}
	if _, err := e.svc.Drain(e.ctx, r, dec("0.5"), ledger.Idempotency{}, m); err != nil {
		t.Fatal(err)
	}
	m["reason"] = "changed"
	entries, _, _ := e.svc.History(e.ctx, r, "", 1)
	if len(entries) != 1 || !maps.Equal(entries[0].Meta, ledger.Meta{"reason": "late"}) {
		t.Errorf("newest entry after the caller changed its map: %+v", entries)
	}
}

// metaCalls makes the calls of testMetaEvents on r and returns the history
// they must leave (newest first, as checkMetaHistory writes it) and a
// replay of each call with an Idempotency-Key, which reports whether it
// was answered as a replay.
func metaCalls(t *testing.T, e *env, r ledger.BucketRef) (want []string, replays []func() (bool, error)) {
	key := func(op string) ledger.Idempotency {
		return ledger.Idempotency{Scope: op + ":" + r.Limit, Key: "k-" + op, Hash: "h-" + op}
	}
	e.fillup(r, "10")
	reserve := func(op, amount string, meta ledger.Meta) ledger.Reservation {
		t.Helper()
		call := func() (ledger.ReserveResult, error) {
			return e.svc.Reserve(e.ctx, r, dec(amount), time.Minute, key(op), meta)
		}
		res, err := call()
		if err != nil || !res.Decision.Accepted {
			t.Fatalf("%s: %+v %v", op, res, err)
		}
		replays = append(replays, func() (bool, error) { res, err := call(); return res.Replayed, err })
		return res.Reservation
	}
	h1 := reserve("reserve1", "5", ledger.Meta{"job": "import-7", "step": "reserve"})
	commit := func() (ledger.ResolveResult, error) {
		return e.svc.Commit(e.ctx, h1.ID, decimal.NewNullDecimal(dec("4")), false, key("commit"), ledger.Meta{"rows": "4000"})
	}
	if _, err := commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	replays = append(replays, func() (bool, error) { res, err := commit(); return res.Replayed, err })

	h2 := reserve("reserve2", "6", ledger.Meta{"job": "import-8"})
	release := func() (ledger.ResolveResult, error) {
		return e.svc.Release(e.ctx, h2.ID, key("release"), ledger.Meta{"why": "cancelled"})
	}
	if _, err := release(); err != nil {
		t.Fatalf("release: %v", err)
	}
	replays = append(replays, func() (bool, error) { res, err := release(); return res.Replayed, err })

	// A commit without meta: its entry has none, not the reserve's.
	h3 := reserve("reserve3", "1", ledger.Meta{"job": "import-9"})
	if _, err := e.svc.Commit(e.ctx, h3.ID, decimal.NullDecimal{}, false, ledger.Idempotency{}, nil); err != nil {
		t.Fatalf("commit without meta: %v", err)
	}

	drain := func() (ledger.DrainResult, error) {
		return e.svc.Drain(e.ctx, r, dec("2.5"), key("drain"), ledger.Meta{"reason": "refund", "order": "A-1"})
	}
	if res, err := drain(); err != nil || !res.Removed.Equal(dec("2.5")) {
		t.Fatalf("drain: %+v %v", res, err)
	}
	replays = append(replays, func() (bool, error) { res, err := drain(); return res.Replayed, err })

	want = []string{ // newest first
		`drain 2.5 - {"order":"A-1","reason":"refund"}`,
		fmt.Sprintf("committed 1 %s -", h3.ID),
		fmt.Sprintf(`reserved 1 %s {"job":"import-9"}`, h3.ID),
		fmt.Sprintf(`released 6 %s {"why":"cancelled"}`, h2.ID),
		fmt.Sprintf(`reserved 6 %s {"job":"import-8"}`, h2.ID),
		fmt.Sprintf(`committed 4 %s {"rows":"4000"}`, h1.ID),
		fmt.Sprintf(`reserved 5 %s {"job":"import-7","step":"reserve"}`, h1.ID),
		`fillup 10 - -`,
	}
	return want, replays
}

// checkMetaHistory fails unless r's history is want: each entry as "event
// amount reservation meta", "-" for none.
func checkMetaHistory(t *testing.T, e *env, r ledger.BucketRef, when string, want []string) {
	t.Helper()
	entries, _, err := e.svc.History(e.ctx, r, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(entries))
	for i, en := range entries {
		id, meta := en.ReservationID, en.Meta.JSON()
		if id == "" {
			id = "-"
		}
		if meta == "" {
			meta = "-"
		}
		got[i] = fmt.Sprintf("%s %s %s %s", en.Event, en.Amount, id, meta)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: history\n%q\nwant\n%q", when, got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s: entry %d = %s, want %s", when, i, got[i], want[i])
		}
	}
}

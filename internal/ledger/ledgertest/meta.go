package ledgertest

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// testMeta: the meta of every kind of event comes back on its history entry
// (fillup, each multi-bucket item, reserve, commit, release, drain; none on
// an expiry), byte for byte, including text that looks like markup; bad
// meta is refused with the field named and nothing charged; and a replay
// with another meta is a reused key.
func testMeta(t *testing.T, e *env) {
	e.limit("m", "100", "1", time.Hour, true)
	a, b := ref("m", "{m}a"), ref("m", "{m}b")
	testMetaKept(t, e, a, b)
	testMetaRefused(t, e, a, b)
}

// metaCharges charges a and b with meta through every operation that
// takes it (one hold expiring), and returns the first Fillup's meta and
// the expired hold's id.
func metaCharges(t *testing.T, e *env, a, b ledger.BucketRef) (order ledger.Meta, expired string) {
	t.Helper()
	order = ledger.Meta{"order": "A-1", "user": "u<script>alert(1)</script>", "note": "ünïcödé ✓", "lines": "a\tb\r\nc\n"}
	mustFill := func(items []ledger.Item) {
		t.Helper()
		res, err := e.svc.Fillup(e.ctx, items, ledger.Idempotency{})
		if err != nil || !res.Accepted {
			t.Fatalf("Fillup %+v: %+v %v", items, res, err)
		}
	}
	mustFill([]ledger.Item{{Bucket: a, Cost: dec("1"), Meta: order}})
	mustFill([]ledger.Item{{Bucket: a, Cost: dec("2"), Meta: ledger.Meta{"item": "0"}}, {Bucket: b, Cost: dec("3"), Meta: ledger.Meta{"item": "1"}}})
	// Two items of one bucket are one charge: same meta is fine.
	mustFill([]ledger.Item{{Bucket: b, Cost: dec("1"), Meta: ledger.Meta{"job": "j"}}, {Bucket: b, Cost: dec("1"), Meta: ledger.Meta{"job": "j"}}})
	hold, err := e.svc.Reserve(e.ctx, a, dec("5"), time.Minute, ledger.Idempotency{}, ledger.Meta{"step": "reserve"})
	if err != nil || !hold.Decision.Accepted {
		t.Fatalf("reserve: %+v %v", hold, err)
	}
	if _, err := e.svc.Commit(e.ctx, hold.Reservation.ID, decimal.NewNullDecimal(dec("4")), false, ledger.Idempotency{}, ledger.Meta{"step": "commit"}); err != nil {
		t.Fatal(err)
	}
	hold2, _ := e.svc.Reserve(e.ctx, a, dec("6"), time.Minute, ledger.Idempotency{}, nil)
	if _, err := e.svc.Release(e.ctx, hold2.Reservation.ID, ledger.Idempotency{}, ledger.Meta{"step": "release"}); err != nil {
		t.Fatal(err)
	}
	expiring, _ := e.svc.Reserve(e.ctx, a, dec("1"), time.Second, ledger.Idempotency{}, ledger.Meta{"step": "expiring"})
	e.clock.Advance(2 * time.Second)
	if _, err := e.svc.Drain(e.ctx, a, dec("0.5"), ledger.Idempotency{}, ledger.Meta{"reason": "refund"}); err != nil {
		t.Fatal(err)
	}
	return order, expiring.Reservation.ID
}

// testMetaKept: each history entry keeps its call's meta (an expiry none),
// two items of one bucket with the same meta are one entry.
func testMetaKept(t *testing.T, e *env, a, b ledger.BucketRef) {
	order, expired := metaCharges(t, e, a, b)
	want := []struct {
		ev   ledger.Event
		meta ledger.Meta
	}{ // newest first
		{ledger.EventDrain, ledger.Meta{"reason": "refund"}},
		{ledger.EventExpired, nil},
		{ledger.EventReserved, ledger.Meta{"step": "expiring"}},
		{ledger.EventReleased, ledger.Meta{"step": "release"}},
		{ledger.EventReserved, nil},
		{ledger.EventCommitted, ledger.Meta{"step": "commit"}},
		{ledger.EventReserved, ledger.Meta{"step": "reserve"}},
		{ledger.EventFillup, ledger.Meta{"item": "0"}},
		{ledger.EventFillup, order},
	}
	entries, _, err := e.svc.History(e.ctx, a, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(want) {
		t.Fatalf("%d history entries, want %d: %+v", len(entries), len(want), entries)
	}
	for i, w := range want {
		got := entries[i]
		if got.Event != w.ev || !maps.Equal(got.Meta, w.meta) {
			t.Errorf("entry %d: %s %v, want %s %v", i, got.Event, got.Meta, w.ev, w.meta)
		}
	}
	if entries[1].ReservationID != expired {
		t.Errorf("the expiry is of %s, want %s", entries[1].ReservationID, expired)
	}
	bh, _, _ := e.svc.History(e.ctx, b, "", 100)
	if len(bh) != 2 || !maps.Equal(bh[0].Meta, ledger.Meta{"job": "j"}) || !bh[0].Amount.Equal(dec("2")) || !maps.Equal(bh[1].Meta, ledger.Meta{"item": "1"}) {
		t.Errorf("history of b = %+v", bh)
	}
}

// testMetaRefused: bad meta is refused, naming the field, and nothing is
// charged.
func testMetaRefused(t *testing.T, e *env, a, b ledger.BucketRef) {
	level := e.state(a).Level
	many := ledger.Meta{}
	for i := range ledger.MaxMetaEntries + 1 {
		many[string(rune('a'+i))] = "v"
	}
	big := ledger.Meta{}
	for i := range 9 {
		big[strings.Repeat(string(rune('a'+i)), 64)] = strings.Repeat("x", 200)
	}
	for _, tc := range []struct {
		meta  ledger.Meta
		field string
	}{
		{many, "meta"},
		{ledger.Meta{strings.Repeat("k", 65): "v"}, "meta"},
		{ledger.Meta{"Upper": "v"}, "meta"},
		{ledger.Meta{"<b>": "v"}, "meta"},
		{ledger.Meta{"": "v"}, "meta"},
		{ledger.Meta{"k": strings.Repeat("v", 257)}, "meta.k"},
		{ledger.Meta{"k": "\xff"}, "meta.k"},
		// Control characters: NUL (which PostgreSQL's jsonb cannot hold)
		// and the rest of C0 but tab and line breaks, on every store.
		{ledger.Meta{"order": "A-1\x00"}, "meta.order"},
		{ledger.Meta{"order": "\x00"}, "meta.order"},
		{ledger.Meta{"k": "\x1b[31m"}, "meta.k"},
		{ledger.Meta{"k": "a\x7f"}, "meta.k"},
		{big, "meta"},
	} {
		_, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: a, Cost: dec("1"), Meta: tc.meta}}, ledger.Idempotency{})
		checkInvalid(t, err, "items[0]."+tc.field)
		_, err = e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: b, Cost: dec("1")}, {Bucket: a, Cost: dec("1"), Meta: tc.meta}}, ledger.Idempotency{})
		checkInvalid(t, err, "items[1]."+tc.field)
		_, err = e.svc.Reserve(e.ctx, a, dec("1"), time.Minute, ledger.Idempotency{}, tc.meta)
		checkInvalid(t, err, tc.field)
		_, err = e.svc.Drain(e.ctx, a, dec("1"), ledger.Idempotency{}, tc.meta)
		checkInvalid(t, err, tc.field)
	}
	_, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: b, Cost: dec("1"), Meta: ledger.Meta{"job": "1"}}, {Bucket: b, Cost: dec("1"), Meta: ledger.Meta{"job": "2"}}}, ledger.Idempotency{})
	checkInvalid(t, err, "items[1].meta")
	if got := e.state(a).Level; !got.Equal(level) {
		t.Errorf("bad meta changed the level: %s, was %s", got, level)
	}
	if hs, _ := e.svc.ListHolds(e.ctx, a); len(hs) != 0 {
		t.Errorf("bad meta left holds: %+v", hs)
	}
}

func checkInvalid(t *testing.T, err error, field string) {
	t.Helper()
	var inv *ledger.InvalidError
	if !errors.As(err, &inv) || inv.Code != ledger.CodeInvalidRequest || inv.Field != field {
		t.Errorf("err = %v, want invalid_request naming %s", err, field)
	}
}

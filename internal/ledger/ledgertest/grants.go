package ledgertest

import (
	"errors"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
)

// RunGrants runs the conformance tests of grants (SPEC "Terms per
// customer") against the stores factory builds. A store that keeps no
// grants must refuse them with ledger.ErrNotServed and change nothing.
func RunGrants(t *testing.T, factory Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"Raises", testGrantRaises},
		{"Expiry", testGrantExpiry},
		{"DefaultExpiry", testGrantDefaultExpiry},
		{"Revoke", testGrantRevoke},
		{"Idempotent", testGrantIdempotent},
		{"Thresholds", testGrantThresholds},
		{"MultiBucket", testGrantMultiBucket},
		{"BadInput", testGrantBadInput},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewClock()
			store := factory(t, clock)
			e := &env{t: t, clock: clock, store: store, svc: ledger.NewService(store), ctx: t.Context()}
			if _, ok := ledger.GrantsOf(store); !ok {
				testGrantsNotServed(t, e)
				return
			}
			tc.fn(t, e)
		})
	}
}

func (e *env) grant(r ledger.BucketRef, amount string, expiresAt time.Time) ledger.GrantResult {
	e.t.Helper()
	res, err := e.svc.AddGrant(e.ctx, r, dec(amount), expiresAt, ledger.Idempotency{}, nil)
	if err != nil {
		e.t.Fatalf("AddGrant(%v, %s): %v", r, amount, err)
	}
	return res
}

func (e *env) grants(r ledger.BucketRef) []ledger.Grant {
	e.t.Helper()
	gs, err := e.svc.ListGrants(e.ctx, r)
	if err != nil {
		e.t.Fatalf("ListGrants(%v): %v", r, err)
	}
	return gs
}

// testGrantsNotServed: a store without grants answers ErrNotServed and
// decides as before.
func testGrantsNotServed(t *testing.T, e *env) {
	e.limit("l", "10", "1", time.Hour, true)
	r := ref("l", "k")
	if _, err := e.svc.AddGrant(e.ctx, r, dec("50"), e.clock.Now().Add(time.Hour), ledger.Idempotency{}, nil); !errors.Is(err, ledger.ErrNotServed) {
		t.Fatalf("AddGrant: %v, want ErrNotServed", err)
	}
	if _, err := e.svc.ListGrants(e.ctx, r); !errors.Is(err, ledger.ErrNotServed) {
		t.Fatalf("ListGrants: %v, want ErrNotServed", err)
	}
	if _, err := e.svc.RevokeGrant(e.ctx, r, "g1", ledger.Idempotency{}, nil); !errors.Is(err, ledger.ErrNotServed) {
		t.Fatalf("RevokeGrant: %v, want ErrNotServed", err)
	}
	if d := e.can(r, "20"); !d.NeverFits {
		t.Fatalf("a refused grant changed the capacity: %+v", d)
	}
}

// testGrantRaises: a grant adds to the capacity of one bucket for
// decisions, remaining and never_fits, and is listed; other buckets keep
// the limit's capacity; grants add up.
func testGrantRaises(t *testing.T, e *env) {
	e.limit("l", "10", "1", time.Hour, true)
	r := ref("l", "team-b")
	if d := e.fillup(r, "10"); !d.Accepted {
		t.Fatal("fillup of the capacity denied")
	}
	if d := e.can(r, "5"); d.Accepted || d.NeverFits {
		t.Fatalf("before the grant: %+v, want a denial that fits later", d)
	}
	until := e.clock.Now().Add(2 * time.Hour)
	res := e.grant(r, "500", until)
	if res.Grant.ID == "" || !res.Grant.ExpiresAt.Equal(until) || !res.Grant.CreatedAt.Equal(e.clock.Now()) {
		t.Fatalf("grant %+v", res.Grant)
	}
	eq(t, "grant answer capacity", res.Bucket.Capacity, "510")
	eq(t, "grant answer grants", res.Bucket.Grants, "500")
	st := e.state(r)
	eq(t, "capacity", st.Capacity, "510")
	eq(t, "remaining", st.Remaining, "500")
	eq(t, "grants", st.Grants, "500")
	if d := e.can(r, "510.000001"); !d.NeverFits {
		t.Errorf("a cost above the granted capacity: %+v, want never_fits", d)
	}
	if d := e.can(r, "500"); !d.Accepted {
		t.Errorf("a cost within the grant: %+v", d)
	}
	d := e.fillup(r, "500")
	if !d.Accepted {
		t.Fatalf("fillup within the grant denied: %+v", d)
	}
	eq(t, "capacity of the decision", d.Capacity, "510")
	if d := e.fillup(r, "1"); d.Accepted || d.NeverFits {
		t.Errorf("fillup past the granted capacity: %+v", d)
	}
	e.grant(r, "0.5", until.Add(time.Hour))
	st = e.state(r)
	eq(t, "capacity with two grants", st.Capacity, "510.5")
	eq(t, "grants", st.Grants, "500.5")
	if gs := e.grants(r); len(gs) != 2 || gs[0].ID != res.Grant.ID || gs[1].Amount.String() != "0.5" {
		t.Errorf("grants listed %+v", gs)
	}
	other := e.state(ref("l", "team-a"))
	eq(t, "another bucket's capacity", other.Capacity, "10")
	eq(t, "another bucket's grants", other.Grants, "0")
}

// testGrantExpiry: a grant counts up to the microsecond before expires_at
// and not from it, with no write; the level is kept and compared with the
// lower capacity.
func testGrantExpiry(t *testing.T, e *env) {
	e.periodic("m", "100", ledger.Period{Every: "month"}, true)
	r := ref("m", "team-b")
	until := e.clock.Now().Add(time.Hour)
	e.grant(r, "500", until)
	if d := e.fillup(r, "550"); !d.Accepted {
		t.Fatalf("fillup within the grant denied: %+v", d)
	}
	e.clock.Set(until.Add(-time.Microsecond))
	st := e.state(r)
	eq(t, "capacity a microsecond before expiry", st.Capacity, "600")
	eq(t, "remaining", st.Remaining, "50")
	e.clock.Set(until)
	st = e.state(r)
	eq(t, "capacity at expiry", st.Capacity, "100")
	eq(t, "grants at expiry", st.Grants, "0")
	eq(t, "level kept", st.Level, "550")
	eq(t, "remaining", st.Remaining, "0")
	if d := e.fillup(r, "1"); d.Accepted {
		t.Errorf("fillup above the capacity after expiry accepted: %+v", d)
	}
	if d := e.can(r, "100.000001"); !d.NeverFits {
		t.Errorf("never_fits after expiry: %+v", d)
	}
	if gs := e.grants(r); len(gs) != 0 {
		t.Errorf("expired grants listed: %+v", gs)
	}
	if _, err := e.svc.RevokeGrant(e.ctx, r, "g1", ledger.Idempotency{}, nil); !errors.Is(err, ledger.ErrGrantNotFound) {
		t.Errorf("revoke of an expired grant: %v", err)
	}
}

// testGrantDefaultExpiry: without expires_at a grant on a periodic limit
// ends with the current period; a non-periodic limit requires it.
func testGrantDefaultExpiry(t *testing.T, e *env) {
	e.clock.Set(time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC))
	e.periodic("m", "100", ledger.Period{Every: "month"}, true)
	r := ref("m", "team-b")
	res := e.grant(r, "500", time.Time{})
	if want := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC); !res.Grant.ExpiresAt.Equal(want) {
		t.Fatalf("default expiry %s, want %s", res.Grant.ExpiresAt, want)
	}
	e.clock.Set(time.Date(2026, 11, 30, 23, 59, 59, 999999000, time.UTC))
	eq(t, "capacity at the end of the month", e.state(r).Capacity, "600")
	e.clock.Set(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	eq(t, "capacity in the next month", e.state(r).Capacity, "100")
	e.limit("l", "10", "1", time.Hour, true)
	_, err := e.svc.AddGrant(e.ctx, ref("l", "k"), dec("5"), time.Time{}, ledger.Idempotency{}, nil)
	var ie *ledger.InvalidError
	if !errors.As(err, &ie) || ie.Field != "expires_at" {
		t.Errorf("a grant without expiry on a leaky limit: %v, want a 400 naming expires_at", err)
	}
}

// testGrantRevoke: a revoked grant counts no more, and history records
// granted and revoked with the amount, the grant id and meta.
func testGrantRevoke(t *testing.T, e *env) {
	e.limit("l", "10", "1", time.Hour, true)
	r := ref("l", "k")
	meta := ledger.Meta{"ticket": "T-1"}
	res, err := e.svc.AddGrant(e.ctx, r, dec("500"), e.clock.Now().Add(time.Hour), ledger.Idempotency{}, meta)
	if err != nil || res.EntryID == "" {
		t.Fatalf("AddGrant: %+v %v", res, err)
	}
	e.fillup(r, "200")
	e.clock.Advance(time.Minute)
	rev, err := e.svc.RevokeGrant(e.ctx, r, res.Grant.ID, ledger.Idempotency{}, nil)
	if err != nil || rev.Grant.ID != res.Grant.ID || rev.EntryID == "" {
		t.Fatalf("RevokeGrant: %+v %v", rev, err)
	}
	eq(t, "capacity after revoke", rev.Bucket.Capacity, "10")
	st := e.state(r)
	eq(t, "capacity after revoke", st.Capacity, "10")
	eq(t, "grants after revoke", st.Grants, "0")
	eq(t, "remaining after revoke", st.Remaining, "0")
	if gs := e.grants(r); len(gs) != 0 {
		t.Errorf("revoked grant listed: %+v", gs)
	}
	if _, err := e.svc.RevokeGrant(e.ctx, r, res.Grant.ID, ledger.Idempotency{}, nil); !errors.Is(err, ledger.ErrGrantNotFound) {
		t.Errorf("second revoke: %v, want ErrGrantNotFound", err)
	}
	h, _, err := e.svc.History(e.ctx, r, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	var granted, revoked *ledger.Entry
	for i := range h {
		switch h[i].Event {
		case ledger.EventGranted:
			granted = &h[i]
		case ledger.EventRevoked:
			revoked = &h[i]
		}
	}
	if granted == nil || granted.ID != res.EntryID || granted.GrantID != res.Grant.ID || !granted.Amount.Equal(dec("500")) || granted.Meta["ticket"] != "T-1" {
		t.Errorf("granted entry %+v in %+v", granted, h)
	}
	if revoked == nil || revoked.ID != rev.EntryID || revoked.GrantID != res.Grant.ID || !revoked.Amount.Equal(dec("500")) {
		t.Errorf("revoked entry %+v in %+v", revoked, h)
	}
	if len(h) != 3 || h[0].Event != ledger.EventRevoked {
		t.Errorf("history %+v, want revoked, fillup, granted (newest first)", h)
	}
}

// testGrantIdempotent: a replayed grant or revoke does not act twice.
func testGrantIdempotent(t *testing.T, e *env) {
	e.limit("l", "10", "1", time.Hour, true)
	r := ref("l", "k")
	until := e.clock.Now().Add(time.Hour)
	idem := ledger.Idempotency{Scope: "grant|l|k", Key: "k1", Hash: "amount=500"}
	first, err := e.svc.AddGrant(e.ctx, r, dec("500"), until, idem, nil)
	if err != nil || first.Replayed {
		t.Fatalf("first grant: %+v %v", first, err)
	}
	again, err := e.svc.AddGrant(e.ctx, r, dec("500"), until, idem, nil)
	if err != nil || !again.Replayed || again.Grant.ID != first.Grant.ID || again.EntryID != first.EntryID {
		t.Fatalf("replayed grant: %+v %v", again, err)
	}
	eq(t, "capacity after a replayed grant", e.state(r).Capacity, "510")
	if gs := e.grants(r); len(gs) != 1 {
		t.Errorf("grants after a replay: %+v", gs)
	}
	if _, err := e.svc.AddGrant(e.ctx, r, dec("600"), until, ledger.Idempotency{Scope: "grant|l|k", Key: "k1", Hash: "amount=600"}, nil); !errors.Is(err, ledger.ErrIdempotencyKeyReused) {
		t.Errorf("the key with another body: %v", err)
	}
	ridem := ledger.Idempotency{Scope: "revoke|l|k|" + first.Grant.ID, Key: "k2", Hash: ""}
	if _, err := e.svc.RevokeGrant(e.ctx, r, first.Grant.ID, ridem, nil); err != nil {
		t.Fatal(err)
	}
	rev, err := e.svc.RevokeGrant(e.ctx, r, first.Grant.ID, ridem, nil)
	if err != nil || !rev.Replayed {
		t.Fatalf("replayed revoke: %+v %v", rev, err)
	}
	if h, _, _ := e.svc.History(e.ctx, r, "", 10); len(h) != 2 {
		t.Errorf("history after replays: %+v, want one granted and one revoked", h)
	}
}

// testGrantThresholds: a percentage threshold follows the granted capacity:
// a bucket above 80% of its limit recovers when a grant lowers its use
// below 80% of the new capacity (noticed at the next write), and crosses
// again at 80% of it.
func testGrantThresholds(t *testing.T, e *env) {
	spec := ledger.LimitSpec{Capacity: dec("100"), Period: &ledger.Period{Every: "month"}, History: true, Thresholds: thresholds(t, "80%")}
	if _, err := e.svc.PutLimit(e.ctx, "spend", spec); err != nil {
		t.Fatal(err)
	}
	r := ref("spend", "team-b")
	_, cursor := e.eventsAfter("", 10)
	e.fillup(r, "80")
	evs, cursor := e.eventsAfter(cursor, 10)
	if len(evs) != 1 || eventText(evs[0]) != "crossed team-b 80% used=80 cap=100" {
		t.Fatalf("events %+v, want team-b crossing 80%% of 100", evs)
	}
	e.grant(r, "100", e.clock.Now().Add(24*time.Hour))
	e.fillup(r, "1")
	evs, cursor = e.eventsAfter(cursor, 10)
	if len(evs) != 1 || eventText(evs[0]) != "recovered team-b 80% used=81 cap=200" {
		t.Fatalf("events %+v, want team-b recovering below 80%% of 200", evs)
	}
	e.fillup(r, "79")
	evs, _ = e.eventsAfter(cursor, 10)
	if len(evs) != 1 || eventText(evs[0]) != "crossed team-b 80% used=160 cap=200" {
		t.Fatalf("events %+v, want team-b crossing 80%% of 200", evs)
	}
}

// testGrantMultiBucket: each item of a multi-bucket Fillup sees its own
// bucket's grants, also when replayed. The keys share a hash tag, as
// Redis Cluster needs for one call.
func testGrantMultiBucket(t *testing.T, e *env) {
	e.limit("l", "10", "1", time.Hour, true)
	e.grant(ref("l", "{t}a"), "100", e.clock.Now().Add(time.Hour))
	items := []ledger.Item{{Bucket: ref("l", "{t}a"), Cost: dec("50")}, {Bucket: ref("l", "{t}b"), Cost: dec("5")}}
	idem := ledger.Idempotency{Scope: "s", Key: "k1", Hash: "h"}
	res, err := e.svc.Fillup(e.ctx, items, idem)
	if err != nil || !res.Accepted || !res.Limits[0].Grants.Equal(dec("100")) || !res.Limits[1].Grants.IsZero() {
		t.Fatalf("multi-bucket Fillup: %+v %v", res, err)
	}
	eq(t, "a capacity", res.Items[0].Capacity, "110")
	eq(t, "a remaining", res.Items[0].Remaining, "60")
	eq(t, "b remaining", res.Items[1].Remaining, "5")
	res, err = e.svc.Fillup(e.ctx, items, idem)
	if err != nil || !res.Replayed || !res.Limits[0].Grants.Equal(dec("100")) {
		t.Fatalf("replay: %+v %v", res, err)
	}
	items[0].Cost = dec("61")
	res, err = e.svc.Fillup(e.ctx, items[:1], ledger.Idempotency{})
	if err != nil || res.Accepted || res.Items[0].NeverFits {
		t.Fatalf("multi-bucket item past the granted capacity: %+v %v", res, err)
	}
}

// testGrantBadInput: every bad grant names its field and changes nothing;
// an unknown limit or grant is not found.
func testGrantBadInput(t *testing.T, e *env) {
	e.limit("l", "10", "1", time.Hour, true)
	r := ref("l", "k")
	now := e.clock.Now()
	later := now.Add(time.Hour)
	for _, c := range []struct {
		amount    string
		expiresAt time.Time
		field     string
	}{
		{"0", later, "amount"},
		{"-1", later, "amount"},
		{"1000000000001", later, "amount"},
		{"999999999991", later, "amount"}, // the capacity with it passes the supported magnitude
		{"1.0000001", later, "amount"},
		{"5", now, "expires_at"},
		{"5", now.Add(-time.Hour), "expires_at"},
		{"5", time.Time{}, "expires_at"},
		{"5", later.Add(time.Nanosecond), "expires_at"},
	} {
		_, err := e.svc.AddGrant(e.ctx, r, dec(c.amount), c.expiresAt, ledger.Idempotency{}, nil)
		var ie *ledger.InvalidError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("AddGrant(%s, %s) = %v, want a 400 naming %s", c.amount, c.expiresAt, err, c.field)
		}
	}
	if _, err := e.svc.AddGrant(e.ctx, ref("nope", "k"), dec("5"), later, ledger.Idempotency{}, nil); !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Errorf("AddGrant on an unknown limit: %v", err)
	}
	if _, err := e.svc.ListGrants(e.ctx, ref("nope", "k")); !errors.Is(err, ledger.ErrLimitNotFound) {
		t.Errorf("ListGrants on an unknown limit: %v", err)
	}
	if _, err := e.svc.RevokeGrant(e.ctx, r, "g-none", ledger.Idempotency{}, nil); !errors.Is(err, ledger.ErrGrantNotFound) {
		t.Errorf("RevokeGrant of an unknown id: %v", err)
	}
	if gs := e.grants(r); len(gs) != 0 {
		t.Errorf("refused grants were stored: %+v", gs)
	}
	st := e.state(r)
	eq(t, "capacity after refused grants", st.Capacity, "10")
	if h, _, _ := e.svc.History(e.ctx, r, "", 10); len(h) != 0 {
		t.Errorf("refused grants wrote history: %+v", h)
	}
}

package http_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
)

// TestGrantsTopUp is SPEC's "Done when" for grants: top up a team's month
// (the README's 5,000.00 a month) by 500.00, see it in the bucket's
// decisions, RateLimit fields and history, and see it end on time (the end
// of the month, with no write). Bad input changes nothing; only an admin
// key may grant. Stores that keep no grants answer 501 not_served.
func TestGrantsTopUp(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.clock.Set(time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC))
		a.expect("PUT", "/v1/limits/team-spend", `{"capacity":"5000.00","period":{"every":"month","tz":"UTC"},"history":true}`, 200)
		b := "/v1/limits/team-spend/buckets/team-b"
		if _, ok := ledger.GrantsOf(a.store); !ok {
			r := a.expect("POST", b+"/grants", `{"amount":"500.00"}`, 501)
			if r.str("code") != "not_served" {
				t.Fatalf("grant on a store without grants: %s", r.raw)
			}
			a.expect("GET", b+"/grants", "", 501)
			a.expect("DELETE", b+"/grants/g1", "", 501)
			return
		}
		a.expect("POST", b+"/fillup", `{"cost":"4900"}`, 200)
		if d := a.expect("POST", b+"/fillup", `{"cost":"300"}`, 429); d.str("grants") != "0" || d.str("capacity") != "5000" {
			t.Fatalf("before the top-up: %s", d.raw)
		}

		// Bad input: 400 naming the field, nothing changed.
		for _, c := range []struct{ body, field string }{
			{`{"amount":"0"}`, "amount"},
			{`{"amount":"-5"}`, "amount"},
			{`{"amount":"abc"}`, "amount"},
			{`{"amount":"1000000000001"}`, "amount"},
			{`{"amount":"5","expires_at":"soon"}`, "expires_at"},
			{`{"amount":"5","expires_at":"2026-03-01T00:00:00Z"}`, "expires_at"},
		} {
			if r := a.expect("POST", b+"/grants", c.body, 400); r.str("field") != c.field {
				t.Errorf("%s: %s, want field %s", c.body, r.raw, c.field)
			}
		}
		a.expect("POST", "/v1/limits/nope/buckets/team-b/grants", `{"amount":"5","expires_at":"2026-04-01T00:00:00Z"}`, 404)
		if r := a.expect("GET", b+"/grants", "", 200); r.raw != `{"items":[],"next_cursor":null}`+"\n" {
			t.Fatalf("refused grants listed: %s", r.raw)
		}

		// The top-up, with an Idempotency-Key: a replay does not grant twice.
		g := a.expect("POST", b+"/grants", `{"amount":"500.00","meta":{"ticket":"T-42"}}`, 201, "Idempotency-Key", "top-up-1")
		grant, _ := g.body["grant"].(map[string]any)
		bucket, _ := g.body["bucket"].(map[string]any)
		if grant["amount"] != "500" || grant["expires_at"] != "2026-04-01T00:00:00.000000Z" || bucket["capacity"] != "5500" || bucket["grants"] != "500" {
			t.Fatalf("grant answer: %s", g.raw)
		}
		again := a.expect("POST", b+"/grants", `{"amount":"500.00","meta":{"ticket":"T-42"}}`, 201, "Idempotency-Key", "top-up-1")
		if again.header.Get("Idempotent-Replayed") != "true" || again.raw != g.raw {
			t.Fatalf("replay: %s %v, first %s", again.raw, again.header, g.raw)
		}
		id, _ := grant["id"].(string)
		if r := a.expect("GET", b+"/grants", "", 200); len(r.body["items"].([]any)) != 1 {
			t.Fatalf("grants: %s", r.raw)
		}

		d := a.expect("POST", b+"/fillup", `{"cost":"300"}`, 200)
		if d.str("capacity") != "5500" || d.str("remaining") != "300" || d.str("grants") != "500" {
			t.Fatalf("fillup with the top-up: %s", d.raw)
		}
		if rl, _ := rateLimits(t, d); rl["team-spend"].q != 5500 || rl["team-spend"].r != 300 {
			t.Fatalf("RateLimit fields with the top-up: %+v", rl)
		}
		if st := a.expect("GET", b, "", 200); st.str("grants") != "500" || st.str("capacity") != "5500" {
			t.Fatalf("bucket state: %s", st.raw)
		}
		h := a.expect("GET", b+"/history", "", 200)
		items, _ := h.body["items"].([]any)
		var granted map[string]any
		for _, it := range items {
			if e := it.(map[string]any); e["event"] == "granted" {
				granted = e
			}
		}
		if granted == nil || granted["amount"] != "500" || granted["grant_id"] != id || granted["id"] != g.str("entry_id") ||
			granted["meta"].(map[string]any)["ticket"] != "T-42" {
			t.Fatalf("history: %s", h.raw)
		}

		// It ends on time: the last microsecond of March counts it, April
		// does not, with no write in between.
		a.clock.Set(time.Date(2026, 3, 31, 23, 59, 59, 999999000, time.UTC))
		if st := a.expect("GET", b, "", 200); st.str("capacity") != "5500" {
			t.Fatalf("the last microsecond of the month: %s", st.raw)
		}
		a.clock.Set(time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC))
		if st := a.expect("GET", b, "", 200); st.str("capacity") != "5000" || st.str("grants") != "0" || st.str("level") != "0" {
			t.Fatalf("in April: %s", st.raw)
		}
		if r := a.expect("DELETE", b+"/grants/"+id, "", 404); r.str("code") != "grant_not_found" {
			t.Fatalf("revoke of an ended grant: %s", r.raw)
		}

		// A revocation lowers the capacity from now and is recorded.
		g = a.expect("POST", b+"/grants", `{"amount":"100","expires_at":"2026-04-10T00:00:00Z"}`, 201)
		id = g.body["grant"].(map[string]any)["id"].(string)
		r := a.expect("DELETE", b+"/grants/"+id, "", 200)
		if r.body["bucket"].(map[string]any)["capacity"] != "5000" || r.str("entry_id") == "" {
			t.Fatalf("revoke: %s", r.raw)
		}
		if h := a.expect("GET", b+"/history?limit=1", "", 200); h.body["items"].([]any)[0].(map[string]any)["event"] != "revoked" {
			t.Fatalf("history after revoke: %s", h.raw)
		}
	})
}

// TestGrantsNeedAdmin: granting and revoking change terms, so a charge key
// may not; a read key may list.
func TestGrantsNeedAdmin(t *testing.T) {
	clock := ledgertest.NewClock()
	a, _, _ := authAPI(t, clock, memory.New(memory.WithClock(clock.Now)))
	admin, charge, read := bearer(adminToken), bearer(chargeToken), bearer(readToken)
	a.expect("PUT", "/v1/limits/team-a", `{"capacity":"10","leak":{"amount":"1","per":"1h"}}`, 200, admin...)
	b := "/v1/limits/team-a/buckets/k"
	body := `{"amount":"5","expires_at":"2099-01-01T00:00:00Z"}`
	a.expect("POST", b+"/grants", body, 403, charge...)
	a.expect("POST", b+"/grants", body, 403, read...)
	a.expect("GET", b+"/grants", "", 200, read...)
	g := a.expect("POST", b+"/grants", body, 201, admin...)
	id := g.body["grant"].(map[string]any)["id"].(string)
	a.expect("DELETE", b+"/grants/"+id, "", 403, charge...)
	a.expect("DELETE", b+"/grants/"+id, "", 200, admin...)
}

// TestGrantsZeroExpiresAt: an explicit expires_at is a time like any other,
// the zero one (0001-01-01T00:00:00Z) included, which is in the past: 400
// naming expires_at, as for any past expiry, and no grant — it was taken as
// "absent", the end of the period on a periodic limit (issue 43). Absent
// and null still mean the default.
func TestGrantsZeroExpiresAt(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.clock.Set(time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC))
		a.expect("PUT", "/v1/limits/team-spend", `{"capacity":"5000.00","period":{"every":"month","tz":"UTC"},"history":true}`, 200)
		a.limit("api", "10", "1", "1s")
		if _, ok := ledger.GrantsOf(a.store); !ok {
			t.Skip("a store without grants answers 501 (TestGrantsTopUp)")
		}
		for _, limit := range []string{"team-spend", "api"} {
			b := "/v1/limits/" + limit + "/buckets/team-b"
			for _, body := range []string{
				`{"amount":"500","expires_at":"0001-01-01T00:00:00Z"}`,
				`{"amount":"500","expires_at":"0001-01-01T00:00:00.000000Z"}`,
				`{"amount":"500","expires_at":"0001-01-01T01:00:00+01:00"}`,
				`{"amount":"500","expires_at":"2026-03-01T00:00:00Z"}`,
			} {
				for _, h := range [][]string{nil, {"Idempotency-Key", "zero-1"}} {
					r := a.expect("POST", b+"/grants", body, 400, h...)
					if r.str("code") != "invalid_request" || r.str("field") != "expires_at" || !strings.Contains(r.str("detail"), "expires_at") ||
						!strings.Contains(r.str("detail"), "is not in the future") || r.header.Get("Content-Type") != "application/problem+json" {
						t.Errorf("%s: POST %s: %s, want 400 invalid_request naming expires_at", limit, body, r.raw)
					}
				}
			}
			if r := a.expect("GET", b+"/grants", "", 200); r.raw != `{"items":[],"next_cursor":null}`+"\n" {
				t.Fatalf("%s: refused grants listed: %s", limit, r.raw)
			}
			if st := a.expect("GET", b, "", 200); st.str("grants") != "0" {
				t.Fatalf("%s: bucket after refused grants: %s", limit, st.raw)
			}
		}
		if h := a.expect("GET", "/v1/limits/team-spend/buckets/team-b/history", "", 200); h.raw != `{"items":[],"next_cursor":null}`+"\n" {
			t.Fatalf("refused grants recorded: %s", h.raw)
		}
		// Absent and null: the end of the period.
		b := "/v1/limits/team-spend/buckets/team-b"
		for _, body := range []string{`{"amount":"1"}`, `{"amount":"1","expires_at":null}`} {
			g := a.expect("POST", b+"/grants", body, 201)
			if g.body["grant"].(map[string]any)["expires_at"] != "2026-04-01T00:00:00.000000Z" {
				t.Fatalf("POST %s: %s, want the end of March", body, g.raw)
			}
		}
	})
}

// TestGrantsRevokeImpossibleID: a grant id that no store can have issued (a
// NUL, bytes that are not UTF-8) is 404 grant_not_found on every store, with
// or without an Idempotency-Key — PostgreSQL answered 500 (issue 43) — and
// an unknown limit is still limit_not_found. Hold ids in the path are 404
// reservation_not_found the same way.
func TestGrantsRevokeImpossibleID(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.expect("PUT", "/v1/limits/team-spend", `{"capacity":"5000.00","period":{"every":"month","tz":"UTC"}}`, 200)
		b := "/v1/limits/team-spend/buckets/team-b"
		if _, ok := ledger.GrantsOf(a.store); !ok {
			t.Skip("a store without grants answers 501 (TestGrantsTopUp)")
		}
		g := a.expect("POST", b+"/grants", `{"amount":"5"}`, 201)
		id := g.body["grant"].(map[string]any)["id"].(string)
		ids := []string{"%00", "%FF", "%C3%28", "%ED%A0%80", url.PathEscape(id) + "%00", url.PathEscape(id) + "%FF", "%00" + url.PathEscape(id), "x%00y"}
		for _, bad := range ids {
			for _, h := range [][]string{nil, {"Idempotency-Key", "revoke-bad"}} {
				if r := a.expect("DELETE", b+"/grants/"+bad, "", 404, h...); r.str("code") != "grant_not_found" {
					t.Errorf("DELETE grants/%s %v: %s, want grant_not_found", bad, h, r.raw)
				}
			}
			if r := a.expect("DELETE", "/v1/limits/nope/buckets/team-b/grants/"+bad, "", 404); r.str("code") != "limit_not_found" {
				t.Errorf("DELETE grants/%s of an unknown limit: %s, want limit_not_found", bad, r.raw)
			}
			for _, c := range []struct{ method, path string }{
				{"GET", "/v1/reservations/" + bad},
				{"POST", "/v1/reservations/" + bad + "/commit"},
				{"POST", "/v1/reservations/" + bad + "/release"},
			} {
				if r := a.expect(c.method, c.path, "", 404); r.str("code") != "reservation_not_found" {
					t.Errorf("%s %s: %s, want reservation_not_found", c.method, c.path, r.raw)
				}
			}
		}
		// The grant is still there, and revocable by its id.
		if st := a.expect("GET", b, "", 200); st.str("grants") != "5" {
			t.Fatalf("after refused revocations: %s", st.raw)
		}
		a.expect("DELETE", b+"/grants/"+url.PathEscape(id), "", 200)
	})
}

package http_test

import (
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
)

// TestOverridesTemporaryRaise follows the README's monthly cap (5,000.00 a
// month, Berlin time) and gives one tenant a temporary raise: its decisions,
// bucket state and RateLimit fields use the raised capacity and name the
// override until expires_at, and the limit's from that instant on, with no
// write in between. Prefix overrides, paging, deletion and bad input on
// every store that keeps overrides; Redis answers 501 not_served.
func TestOverridesTemporaryRaise(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.clock.Set(time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC))
		a.expect("PUT", "/v1/limits/team-spend", `{"capacity":"5000.00","period":{"every":"month","tz":"Europe/Berlin"}}`, 200)
		const raise = `{"capacity":"8000.00","expires_at":"2026-03-20T00:00:00Z"}`
		if _, ok := ledger.OverridesOf(a.store); !ok {
			r := a.expect("PUT", "/v1/limits/team-spend/overrides/acme", raise, 501)
			if r.str("code") != "not_served" {
				t.Fatalf("override on a store without overrides: %s", r.raw)
			}
			a.expect("GET", "/v1/limits/team-spend/overrides", "", 501)
			return
		}
		o := a.expect("PUT", "/v1/limits/team-spend/overrides/acme", raise, 200)
		if o.str("pattern") != "acme" || o.str("capacity") != "8000" || o.str("expires_at") != "2026-03-20T00:00:00.000000Z" ||
			o.body["leak"] != nil || o.body["period"] != nil || o.body["window"] != nil {
			t.Fatalf("override document: %s", o.raw)
		}
		if got := a.expect("GET", "/v1/limits/team-spend/overrides/acme", "", 200); got.raw != o.raw {
			t.Fatalf("GET %s, PUT answered %s", got.raw, o.raw)
		}
		acme, other := "/v1/limits/team-spend/buckets/acme", "/v1/limits/team-spend/buckets/globex"
		d := a.expect("POST", acme+"/fillup", `{"cost":"6000"}`, 200)
		if d.str("capacity") != "8000" || d.str("remaining") != "2000" || d.str("override") != "acme" {
			t.Fatalf("fillup under the raise: %s", d.raw)
		}
		if rl, _ := rateLimits(t, d); rl["team-spend"].q != 8000 || rl["team-spend"].r != 2000 {
			t.Fatalf("RateLimit fields under the raise: %+v", rl)
		}
		d = a.expect("POST", other+"/fillup", `{"cost":"6000"}`, 429)
		if d.str("capacity") != "5000" || d.body["override"] != nil || d.body["never_fits"] != true {
			t.Fatalf("another tenant: %s", d.raw)
		}
		st := a.expect("GET", acme, "", 200)
		if st.str("override") != "acme" || st.str("capacity") != "8000" || st.str("level") != "6000" {
			t.Fatalf("state under the raise: %s", st.raw)
		}

		a.clock.Set(time.Date(2026, 3, 19, 23, 59, 59, 999999000, time.UTC))
		if st := a.expect("GET", acme, "", 200); st.str("capacity") != "8000" {
			t.Fatalf("a microsecond before the end: %s", st.raw)
		}
		a.clock.Set(time.Date(2026, 3, 20, 0, 0, 0, 0, time.UTC))
		st = a.expect("GET", acme, "", 200)
		if st.str("capacity") != "5000" || st.str("remaining") != "0" || st.str("level") != "6000" || st.body["override"] != nil {
			t.Fatalf("when the raise ends: %s", st.raw)
		}
		a.expect("POST", acme+"/fillup", `{"cost":"1"}`, 429)
		if r := a.expect("GET", "/v1/limits/team-spend/overrides/acme", "", 404); r.str("code") != "override_not_found" {
			t.Fatalf("an ended raise: %s", r.raw)
		}

		// Prefixes, the most specific first, and pages of overrides.
		a.expect("PUT", "/v1/limits/team-spend/overrides/team-*", `{"capacity":"100"}`, 200)
		a.expect("PUT", "/v1/limits/team-spend/overrides/team-b*", `{"capacity":"200"}`, 200)
		a.expect("PUT", "/v1/limits/team-spend/overrides/team-b%2Fx", `{"capacity":"300"}`, 200)
		for key, want := range map[string]string{"team-a": "100", "team-bb": "200", "team-b%2Fx": "300", "teams": "5000"} {
			if st := a.expect("GET", "/v1/limits/team-spend/buckets/"+key, "", 200); st.str("capacity") != want {
				t.Fatalf("%s: %s, want capacity %s", key, st.raw, want)
			}
		}
		p1 := a.expect("GET", "/v1/limits/team-spend/overrides?limit=2", "", 200)
		items, _ := p1.body["items"].([]any)
		next, _ := p1.body["next_cursor"].(string)
		if len(items) != 2 || next == "" || items[0].(map[string]any)["pattern"] != "team-*" {
			t.Fatalf("first page: %s", p1.raw)
		}
		p2 := a.expect("GET", "/v1/limits/team-spend/overrides?limit=2&cursor="+next, "", 200)
		items, _ = p2.body["items"].([]any)
		if len(items) != 1 || items[0].(map[string]any)["pattern"] != "team-b/x" || p2.body["next_cursor"] != nil {
			t.Fatalf("second page: %s", p2.raw)
		}
		a.expect("DELETE", "/v1/limits/team-spend/overrides/team-b*", "", 204)
		a.expect("DELETE", "/v1/limits/team-spend/overrides/team-b*", "", 404)
		if st := a.expect("GET", "/v1/limits/team-spend/buckets/team-bb", "", 200); st.str("capacity") != "100" || st.str("override") != "team-*" {
			t.Fatalf("after deleting team-b*: %s", st.raw)
		}

		// Bad input names its field and changes nothing.
		for _, c := range []struct{ pattern, body, field string }{
			{"a*b", `{"capacity":"1"}`, "pattern"},
			{"k", `{"window":{"length":"1m"}}`, "window"},
			{"k", `{"leak":{"amount":"1","per":"1h"}}`, "leak"},
			{"k", `{"period":{"start_day":29}}`, "period.start_day"},
			{"k", `{"period":{"tz":"Mars/Olympus"}}`, "period.tz"},
			{"k", `{"period":{"every":"day"}}`, "period.every"},
			{"k", `{"capacity":"0"}`, "capacity"},
			{"k", `{"capacity":"1","expires_at":"2026-03-19T00:00:00Z"}`, "expires_at"},
			{"k", `{"capacity":"1","expires_at":"next friday"}`, "expires_at"},
			{"k", `{"pattern":"j","capacity":"1"}`, "pattern"},
		} {
			r := a.expect("PUT", "/v1/limits/team-spend/overrides/"+c.pattern, c.body, 400)
			if r.str("field") != c.field || r.header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("PUT %s %s: %s, want a problem naming %s", c.pattern, c.body, r.raw, c.field)
			}
		}
		if r := a.expect("GET", "/v1/limits/team-spend/overrides/k", "", 404); r.str("code") != "override_not_found" {
			t.Fatalf("a refused override was stored: %s", r.raw)
		}
		if r := a.expect("PUT", "/v1/limits/nope/overrides/k", `{"capacity":"1"}`, 404); r.str("code") != "limit_not_found" {
			t.Fatalf("override on an unknown limit: %s", r.raw)
		}
		// A deleted limit takes its overrides with it.
		a.expect("DELETE", "/v1/limits/team-spend", "", 204)
		a.expect("PUT", "/v1/limits/team-spend", `{"capacity":"5000.00","period":{"every":"month","tz":"Europe/Berlin"}}`, 200)
		if p := a.expect("GET", "/v1/limits/team-spend/overrides", "", 200); p.raw != "{\"items\":[],\"next_cursor\":null}\n" {
			t.Fatalf("a re-created limit lists %s", p.raw)
		}
	})
}

// TestOverridesZeroExpiresAt: an explicit expires_at is a time like any
// other, the zero one (0001-01-01T00:00:00Z) included, which is in the past:
// 400 naming expires_at, as for any past expiry, and nothing changes — it
// was taken as "no expiry", turning a temporary raise into a permanent one
// (issue 43). Absent and null still mean no expiry.
func TestOverridesZeroExpiresAt(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.clock.Set(time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC))
		a.expect("PUT", "/v1/limits/team-spend", `{"capacity":"5000.00","period":{"every":"month","tz":"UTC"}}`, 200)
		const path = "/v1/limits/team-spend/overrides/acme"
		zeros := []string{
			`{"capacity":"8000","expires_at":"0001-01-01T00:00:00Z"}`,
			`{"capacity":"8000","expires_at":"0001-01-01T00:00:00.000000Z"}`,
			`{"capacity":"8000","expires_at":"0001-01-01T01:00:00+01:00"}`,
		}
		if _, ok := ledger.OverridesOf(a.store); !ok {
			// Validation comes first (400); a store without overrides may
			// also answer 501. Never a stored override.
			for _, body := range zeros {
				if r := a.do("PUT", path, body); r.status != 400 && r.status != 501 {
					t.Fatalf("PUT %s on a store without overrides: %d %s", body, r.status, r.raw)
				}
			}
			return
		}
		raise := a.expect("PUT", path, `{"capacity":"8000","expires_at":"2026-03-20T00:00:00Z"}`, 200)
		for _, body := range append(zeros, `{"capacity":"8000","expires_at":"2026-03-01T00:00:00Z"}`) {
			r := a.expect("PUT", path, body, 400)
			if r.str("code") != "invalid_request" || r.str("field") != "expires_at" || !strings.Contains(r.str("detail"), "expires_at") ||
				!strings.Contains(r.str("detail"), "is not in the future") || r.header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("PUT %s: %s, want 400 invalid_request naming expires_at", body, r.raw)
			}
			a.expect("PUT", "/v1/limits/team-spend/overrides/other", body, 400)
		}
		// Nothing changed: the raise still ends on the 20th, and no other
		// override was stored.
		if got := a.expect("GET", path, "", 200); got.raw != raise.raw {
			t.Fatalf("after refused PUTs: %s, want %s", got.raw, raise.raw)
		}
		a.expect("GET", "/v1/limits/team-spend/overrides/other", "", 404)
		a.clock.Set(time.Date(2026, 3, 20, 0, 0, 0, 0, time.UTC))
		if st := a.expect("GET", "/v1/limits/team-spend/buckets/acme", "", 200); st.str("capacity") != "5000" || st.body["override"] != nil {
			t.Fatalf("the raise outlived its expiry: %s", st.raw)
		}
		// Absent and null: no expiry.
		for _, body := range []string{`{"capacity":"7000"}`, `{"capacity":"7000","expires_at":null}`} {
			if o := a.expect("PUT", path, body, 200); o.body["expires_at"] != nil {
				t.Fatalf("PUT %s: %s, want no expiry", body, o.raw)
			}
		}
	})
}

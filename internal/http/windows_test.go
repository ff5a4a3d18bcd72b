package http_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	wire "github.com/budgetd/budgetd/api"
	"github.com/shopspring/decimal"
)

// TestWindowLogins follows the README's "5 failed logins per minute": the
// sixth in a minute is denied until the first one's slot ages out, the
// RateLimit fields give the window, and a period's bounds are null.
func TestWindowLogins(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		start := time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC)
		a.clock.Set(start)
		r := a.expect("PUT", "/v1/limits/logins", `{"capacity":"5","window":{"length":"1m"}}`, 200)
		w, _ := r.body["window"].(map[string]any)
		if w["length"] != "1m" || w["precision"] != "1s" || r.body["leak"] != nil || r.body["period"] != nil ||
			!strings.Contains(r.raw, `"leak":null`) || !strings.Contains(r.raw, `"period":null`) {
			t.Fatalf("limit document: %s", r.raw)
		}
		bucket := "/v1/limits/logins/buckets/alice"
		a.expect("POST", bucket+"/fillup", `{"cost":"1"}`, 200)
		a.clock.Set(start.Add(20 * time.Second))
		for range 3 {
			a.expect("POST", bucket+"/fillup", `{"cost":"1"}`, 200)
		}
		a.clock.Set(start.Add(40*time.Second + 500*time.Millisecond))
		fifth := a.expect("POST", bucket+"/fillup", `{"cost":"1"}`, 200)
		rl, _ := rateLimits(t, fifth)
		// The last charge (slot 40s) counts until 101s: 60.5s from now.
		if got := rl["logins"]; got.q != 5 || got.w != 60 || got.r != 0 || !got.hasT || got.t != 61 {
			t.Fatalf("RateLimit of the fifth: %+v (%q %q)", got, fifth.header.Get("RateLimit-Policy"), fifth.header.Get("RateLimit"))
		}
		if fifth.body["period_start"] != nil || fifth.body["resets_at"] != nil {
			t.Fatalf("a window decision has period bounds: %s", fifth.raw)
		}
		a.clock.Set(start.Add(45 * time.Second))
		sixth := a.expect("POST", bucket+"/fillup", `{"cost":"1"}`, 429)
		// The first charge (slot 0s) counts until 61s.
		if sixth.str("retry_after") != "16" || sixth.header.Get("Retry-After") != "16" || sixth.str("level") != "5" {
			t.Fatalf("sixth login: Retry-After %q: %s", sixth.header.Get("Retry-After"), sixth.raw)
		}
		if rl, _ := rateLimits(t, sixth); rl["logins"].t != 16 {
			t.Fatalf("RateLimit t of the denial: %+v", rl["logins"])
		}
		a.clock.Set(start.Add(61*time.Second - time.Microsecond))
		if c := a.expect("GET", bucket+"/can-accept?cost=1", "", 200); c.body["accepted"] != false || c.str("retry_after") != "0.000001" {
			t.Fatalf("a microsecond early: %s", c.raw)
		}
		a.clock.Set(start.Add(61 * time.Second))
		if c := a.expect("POST", bucket+"/fillup", `{"cost":"1"}`, 200); c.str("level") != "5" {
			t.Fatalf("after the first aged out: %s", c.raw)
		}
		// Two minutes later nothing counts; the bucket state says so.
		a.clock.Set(start.Add(3 * time.Minute))
		if st := a.expect("GET", bucket, "", 200); st.str("level") != "0" || st.str("remaining") != "5" {
			t.Fatalf("state after the window: %s", st.raw)
		}
	})
}

// TestWindowCardSpend follows the README's "10,000.00 in any 30 days":
// spend on day 1 and day 15 fills the window; on day 29 a cent is denied
// until day 1's spend stops counting, an hour-slot after 30 days.
func TestWindowCardSpend(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		day := func(n int) time.Time { return time.Date(2026, 4, 1, 9, 30, 0, 0, time.UTC).AddDate(0, 0, n-1) }
		a.clock.Set(day(1))
		a.expect("PUT", "/v1/limits/card-spend", `{"capacity":"10000.00","window":{"length":"720h","precision":"1h"},"history":true}`, 200)
		bucket := "/v1/limits/card-spend/buckets/card-42"
		a.expect("POST", bucket+"/fillup", `{"cost":"9000.00","meta":{"order":"o-1"}}`, 200)
		a.clock.Set(day(15))
		a.expect("POST", bucket+"/fillup", `{"cost":"1000.00"}`, 200)
		a.clock.Set(day(29))
		denied := a.expect("POST", bucket+"/fillup", `{"cost":"0.01"}`, 429)
		// Day 1's 9,000 was charged in the slot 09:00–10:00; it counts until
		// 10:00 thirty days later: day 31 at 10:00, 2 days and 30 minutes on.
		if denied.str("retry_after") != "174600" {
			t.Fatalf("a cent on day 29: %s", denied.raw)
		}
		h := a.expect("GET", bucket+"/history", "", 200)
		if items, _ := h.body["items"].([]any); len(items) != 2 {
			t.Fatalf("history on day 29: %s", h.raw)
		}
		a.clock.Set(day(31).Add(30 * time.Minute))
		ok := a.expect("POST", bucket+"/fillup", `{"cost":"9000.00"}`, 200)
		if ok.str("level") != "10000" {
			t.Fatalf("day 31: %s", ok.raw)
		}
	})
}

// TestWindowSwitch puts a leaky limit, charges it, and switches it to a
// window: the level as of the PUT is kept as one charge made then, which
// stops counting a window later.
func TestWindowSwitch(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		start := time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC)
		a.clock.Set(start)
		a.limit("flex", "10", "1", "1s")
		bucket := "/v1/limits/flex/buckets/k"
		a.expect("POST", bucket+"/fillup", `{"cost":"10"}`, 200)
		a.clock.Set(start.Add(4 * time.Second)) // leaked to 6
		a.expect("PUT", "/v1/limits/flex", `{"capacity":"10","window":{"length":"10s"}}`, 200)
		if st := a.expect("GET", bucket, "", 200); st.str("level") != "6" {
			t.Fatalf("after the switch: %s", st.raw)
		}
		a.clock.Set(start.Add(13 * time.Second))
		if st := a.expect("GET", bucket, "", 200); st.str("level") != "6" {
			t.Fatalf("the kept level counts for the window: %s", st.raw)
		}
		// Slot of 100ms from 4s: counts until 14.1s.
		a.clock.Set(start.Add(14100 * time.Millisecond))
		if st := a.expect("GET", bucket, "", 200); st.str("level") != "0" {
			t.Fatalf("a window after the switch: %s", st.raw)
		}
	})
}

// TestWindowValidationAgrees sends malformed windows to budgetd and to the
// wire contract's own validation (which the Go client runs before it
// sends): both refuse each with invalid_request naming the same field, and
// a good one passes both.
func TestWindowValidationAgrees(t *testing.T) {
	cases := []struct {
		window wire.WindowPut
		field  string
	}{
		{wire.WindowPut{Length: wire.Duration(999 * time.Millisecond)}, "window.length"},
		{wire.WindowPut{Length: wire.Duration(8761 * time.Hour)}, "window.length"},
		{wire.WindowPut{Length: wire.Duration(time.Second + time.Nanosecond)}, "window.length"},
		{wire.WindowPut{Length: wire.Duration(time.Minute), Precision: wire.Duration(7 * time.Second)}, "window.precision"},
		{wire.WindowPut{Length: wire.Duration(time.Hour), Precision: wire.Duration(time.Millisecond)}, "window.precision"},
		{wire.WindowPut{Length: wire.Duration(time.Minute), Precision: wire.Duration(2 * time.Minute)}, "window.precision"},
		{wire.WindowPut{Length: wire.Duration(time.Second + 100*time.Microsecond)}, "window.precision"},
		{wire.WindowPut{Length: wire.Duration(1200 * time.Hour)}, "window.precision"}, // 1h gives 1200 slots, 24h only 50
		{wire.WindowPut{Length: wire.Duration(1200 * time.Hour), Precision: wire.Duration(2 * time.Hour)}, ""},
		{wire.WindowPut{Length: wire.Duration(8760 * time.Hour)}, ""},
		{wire.WindowPut{Length: wire.Duration(time.Second)}, ""},
	}
	eachStore(t, func(t *testing.T, a *api) {
		for _, tc := range cases {
			put := wire.LimitPut{Capacity: decimal.NewFromInt(5), Window: &tc.window}
			b, _ := json.Marshal(put)
			r := a.do("PUT", "/v1/limits/w", string(b))
			err := put.Validate()
			if tc.field == "" {
				if err != nil || r.status != 200 {
					t.Errorf("%s: budgetd %d %s, client %v; want both to take it", b, r.status, r.raw, err)
				}
				continue
			}
			var p *wire.Problem
			if !errors.As(err, &p) || p.Code != wire.CodeInvalidRequest || p.Field != tc.field {
				t.Errorf("%s: the client's validation says %v, want invalid_request on %s", b, err, tc.field)
			}
			if r.status != 400 || r.str("code") != "invalid_request" || r.str("field") != tc.field {
				t.Errorf("%s: budgetd %d %s, want 400 invalid_request on %s", b, r.status, r.raw, tc.field)
			}
		}
	})
}

// TestLevelsWindow: the level series of a window bucket steps up at each
// charge and down when its slot stops counting (a minute after the end of
// the slot).
func TestLevelsWindow(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
		a.clock.Set(t0)
		a.expect("PUT", "/v1/limits/logins", `{"capacity":"5","window":{"length":"1m"}}`, 200)
		b := "/v1/limits/logins/buckets/alice"
		a.expect("POST", b+"/fillup", `{"cost":"2"}`, 200)
		a.clock.Set(t0.Add(20*time.Second + 500*time.Millisecond))
		a.expect("POST", b+"/fillup", `{"cost":"3"}`, 200)
		a.clock.Set(t0.Add(2 * time.Minute))
		ls, _ := a.levels(b + "/levels?points=3&from=2026-03-01T10:00:00Z")
		want := `0s 0 0
0s 2 0 fillup
0s 2 0
20.5s 2 0
20.5s 5 0 fillup
1m0s 5 0
1m1s 5 0
1m1s 3 0
1m21s 3 0
1m21s 0 0
2m0s 0 0
`
		if got := ls.points(t, t0); got != want {
			t.Errorf("points:\n%s\nwant:\n%s", got, want)
		}
	})
}

// TestRecordDenials follows the README: failed logins with every denial
// recorded. The sixth login is denied and its denied entry, with the
// caller's meta, is in the history under the entry_id the answer gave;
// accepted fillups and a drain name their entries too, and CanAccept none.
func TestRecordDenials(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		start := time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC)
		a.clock.Set(start)
		r := a.expect("PUT", "/v1/limits/logins", `{"capacity":"5","window":{"length":"1m"},"record_denials":true}`, 200)
		if r.body["record_denials"] != true || r.body["history"] != true {
			t.Fatalf("limit document: %s", r.raw)
		}
		bucket := "/v1/limits/logins/buckets/alice"
		ids := map[string]bool{}
		for range 5 {
			f := a.expect("POST", bucket+"/fillup", `{"cost":"1","meta":{"ip":"10.0.0.1"}}`, 200)
			if f.str("entry_id") == "" || ids[f.str("entry_id")] {
				t.Fatalf("accepted fillup: entry_id %q: %s", f.str("entry_id"), f.raw)
			}
			ids[f.str("entry_id")] = true
		}
		denied := a.expect("POST", bucket+"/fillup", `{"cost":"1","meta":{"ip":"203.0.113.9"}}`, 429, "Idempotency-Key", "login-6")
		id := denied.str("entry_id")
		if id == "" || ids[id] {
			t.Fatalf("denied fillup: entry_id %q: %s", id, denied.raw)
		}
		if again := a.expect("POST", bucket+"/fillup", `{"cost":"1","meta":{"ip":"203.0.113.9"}}`, 429, "Idempotency-Key", "login-6"); again.raw != denied.raw {
			t.Fatalf("replay of the denial:\n%s\n%s", denied.raw, again.raw)
		}
		if c := a.expect("GET", bucket+"/can-accept?cost=1", "", 200); c.body["entry_id"] != nil || !strings.Contains(c.raw, `"entry_id":null`) {
			t.Fatalf("CanAccept: %s", c.raw)
		}
		h := a.expect("GET", bucket+"/history", "", 200)
		items, _ := h.body["items"].([]any)
		if len(items) != 6 {
			t.Fatalf("history (the replay must not record again): %s", h.raw)
		}
		newest, _ := items[0].(map[string]any)
		meta, _ := newest["meta"].(map[string]any)
		if newest["event"] != "denied" || newest["amount"] != "1" || newest["id"] != id || meta["ip"] != "203.0.113.9" {
			t.Fatalf("newest entry: %v", newest)
		}
		if st := a.expect("GET", bucket, "", 200); st.str("level") != "5" {
			t.Fatalf("state after the denial: %s", st.raw)
		}
		d := a.expect("POST", bucket+"/drain", `{"amount":"1"}`, 200)
		if d.str("entry_id") == "" || d.str("entry_id") == id {
			t.Fatalf("drain: %s", d.raw)
		}
		// A limit without record_denials answers entry_id null on a denial.
		a.expect("PUT", "/v1/limits/logins", `{"capacity":"4","window":{"length":"1m"}}`, 200)
		if q := a.expect("POST", bucket+"/fillup", `{"cost":"1"}`, 429); q.body["entry_id"] != nil || !strings.Contains(q.raw, `"entry_id":null`) {
			t.Fatalf("unrecorded denial: %s", q.raw)
		}
	})
}

// TestShadowDeniedHistory: on a shadow limit with record_denials, GET
// history shows "shadow_denied":true on the fillup entry enforce would have
// denied, and no shadow_denied field on the one within capacity.
func TestShadowDeniedHistory(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.clock.Set(time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC))
		a.expect("PUT", "/v1/limits/trial", `{"capacity":"5","window":{"length":"1m"},"mode":"shadow","record_denials":true}`, 200)
		bucket := "/v1/limits/trial/buckets/alice"
		a.expect("POST", bucket+"/fillup", `{"cost":"4"}`, 200)
		if f := a.expect("POST", bucket+"/fillup", `{"cost":"2"}`, 200); f.body["shadow_denied"] != true {
			t.Fatalf("shadow fillup: %s", f.raw)
		}
		h := a.expect("GET", bucket+"/history", "", 200)
		items, _ := h.body["items"].([]any)
		if len(items) != 2 {
			t.Fatalf("history: %s", h.raw)
		}
		newest, _ := items[0].(map[string]any)
		oldest, _ := items[1].(map[string]any)
		if newest["event"] != "fillup" || newest["amount"] != "2" || newest["shadow_denied"] != true {
			t.Fatalf("the shadow-denied entry: %v", newest)
		}
		if _, ok := oldest["shadow_denied"]; ok || oldest["amount"] != "4" {
			t.Fatalf("the entry within capacity: %v", oldest)
		}
	})
}

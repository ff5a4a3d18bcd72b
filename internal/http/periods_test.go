package http_test

import (
	"strings"
	"testing"
	"time"
)

// TestPeriods follows the README: a monthly cap in Europe/Berlin whose
// resets_at is the next 1st at 00:00 Berlin time, in UTC, in every decision,
// bucket state and limit document, on every store.
func TestPeriods(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.clock.Set(time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC))
		put := `{"capacity":"5000.00","period":{"every":"month","tz":"Europe/Berlin"},"history":true}`
		r := a.expect("PUT", "/v1/limits/team-spend", put, 200)
		if r.body["leak"] != nil {
			t.Fatalf("leak of a periodic limit: %s", r.raw)
		}
		p, _ := r.body["period"].(map[string]any)
		if p["every"] != "month" || p["tz"] != "Europe/Berlin" || p["start_day"] != float64(1) {
			t.Fatalf("period: %s", r.raw)
		}
		const start, reset = "2026-02-28T23:00:00.000000Z", "2026-03-31T22:00:00.000000Z"
		bucket := "/v1/limits/team-spend/buckets/acme"
		check := func(what string, r response) {
			t.Helper()
			if r.str("period_start") != start || r.str("resets_at") != reset {
				t.Fatalf("%s: period_start %q resets_at %q, want %s %s: %s", what, r.str("period_start"), r.str("resets_at"), start, reset, r.raw)
			}
		}
		check("fillup", a.expect("POST", bucket+"/fillup", `{"cost":"4000"}`, 200))
		check("state", a.expect("GET", bucket, "", 200))
		denied := a.expect("POST", bucket+"/fillup", `{"cost":"1000.01"}`, 429)
		check("denial", denied)
		// 16 days, 10 hours to the reset.
		if denied.str("retry_after") != "1418400" || denied.header.Get("Retry-After") != "1418400" {
			t.Fatalf("retry_after %q, Retry-After %q: %s", denied.str("retry_after"), denied.header.Get("Retry-After"), denied.raw)
		}
		check("can accept", a.expect("GET", bucket+"?cost=1", "", 200))
		res := a.expect("POST", bucket+"/reservations", `{"amount":"500","ttl":"1h"}`, 201)
		check("reserve", res)
		id := res.str("id")
		committed := a.expect("POST", "/v1/reservations/"+id+"/commit", `{"amount":"100"}`, 200)
		b, _ := committed.body["bucket"].(map[string]any)
		if b["period_start"] != start || b["resets_at"] != reset || b["level"] != "4100" || committed.str("period_start") != start || committed.str("resets_at") != reset {
			t.Fatalf("commit: %s", committed.raw)
		}
		check("drain", a.expect("POST", bucket+"/drain", `{"amount":"0"}`, 200))
		a.clock.Set(time.Date(2026, 3, 31, 21, 59, 0, 0, time.UTC)) // a minute before the reset
		multi := a.expect("POST", "/v1/fillup", `{"items":[{"limit":"team-spend","key":"acme","cost":"1"}]}`, 200, "Idempotency-Key", "m1")
		items, _ := multi.body["items"].([]any)
		item, _ := items[0].(map[string]any)
		if item["period_start"] != start || item["resets_at"] != reset {
			t.Fatalf("multi-bucket item: %s", multi.raw)
		}

		a.clock.Set(time.Date(2026, 3, 31, 22, 0, 0, 0, time.UTC))
		replay := a.expect("POST", "/v1/fillup", `{"items":[{"limit":"team-spend","key":"acme","cost":"1"}]}`, 200, "Idempotency-Key", "m1")
		if replay.raw != multi.raw {
			t.Fatalf("a replay after the reset differs:\n%s\n%s", multi.raw, replay.raw)
		}
		st := a.expect("GET", bucket, "", 200)
		if st.str("level") != "0" || st.str("period_start") != reset || st.str("resets_at") != "2026-04-30T22:00:00.000000Z" {
			t.Fatalf("April in Berlin: %s", st.raw)
		}

		// Leaky limits carry null bounds; switching kind keeps the level.
		a.expect("POST", bucket+"/fillup", `{"cost":"10"}`, 200)
		a.limit("team-spend", "5000", "1", "1h")
		st = a.expect("GET", bucket, "", 200)
		if st.str("level") != "10" || st.body["period_start"] != nil || st.body["resets_at"] != nil || !strings.Contains(st.raw, `"resets_at":null`) {
			t.Fatalf("after the switch to a leak: %s", st.raw)
		}
		doc := a.expect("GET", "/v1/limits/team-spend", "", 200)
		if doc.body["period"] != nil || !strings.Contains(doc.raw, `"period":null`) {
			t.Fatalf("leaky document: %s", doc.raw)
		}
	})
}

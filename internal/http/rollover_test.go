package http_test

import (
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
)

// TestRolloverMonthlyCap is the README's monthly cap (5,000.00 a month)
// with rollover up to 1,000.00: what a team left unused in March is there
// in April, in decisions, bucket state, RateLimit fields and Idempotency
// replays, and gone in May when April used it; a new team starts with
// none. Bad input names its field and changes nothing. Stores that do not
// serve rollover yet answer 501 not_served and change nothing.
func TestRolloverMonthlyCap(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.clock.Set(time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC))
		limit := "/v1/limits/team-spend"
		a.expect("PUT", limit, `{"capacity":"5000.00","period":{"every":"month","tz":"UTC"},"history":true}`, 200)
		withRollover := `{"capacity":"5000.00","period":{"every":"month","tz":"UTC"},"rollover":{"max":"1000.00"}}`
		if !ledger.ServesRollover(a.store) {
			if r := a.expect("PUT", limit, withRollover, 501); r.str("code") != "not_served" {
				t.Fatalf("rollover on a store without it: %s", r.raw)
			}
			if l := a.expect("GET", limit, "", 200); l.body["rollover"] != nil {
				t.Fatalf("a refused PUT changed the limit: %s", l.raw)
			}
			a.expect("PUT", "/v1/limits/other", withRollover, 501)
			a.expect("GET", "/v1/limits/other", "", 404)
			return
		}

		// Bad input: 400 naming the field, the limit as it was.
		for _, c := range []struct{ body, field string }{
			{`{"capacity":"5000","leak":{"amount":"1","per":"1h"},"rollover":{"max":"10"}}`, "rollover"},
			{`{"capacity":"5000","window":{"length":"1h"},"rollover":{"max":"10"}}`, "rollover"},
			{`{"capacity":"5000","period":{"every":"month"},"rollover":{}}`, "rollover.max"},
			{`{"capacity":"5000","period":{"every":"month"},"rollover":{"max":"-1"}}`, "rollover.max"},
			{`{"capacity":"5000","period":{"every":"month"},"rollover":{"max":"1.0000001"}}`, "rollover.max"},
			{`{"capacity":"5000","period":{"every":"month"},"rollover":{"max":"1000000000001"}}`, "rollover.max"},
			{`{"capacity":"5000","period":{"every":"month"},"rollover":{"max":"10","min":"1"}}`, "rollover.min"},
			{`{"capacity":"5000","period":{"every":"month"},"rollover":"10"}`, "rollover"},
		} {
			if r := a.expect("PUT", limit, c.body, 400); r.str("field") != c.field {
				t.Errorf("%s: %s, want field %s", c.body, r.raw, c.field)
			}
		}
		if l := a.expect("GET", limit, "", 200); l.body["rollover"] != nil || l.str("capacity") != "5000" {
			t.Fatalf("refused PUTs changed the limit: %s", l.raw)
		}

		l := a.expect("PUT", limit, withRollover, 200)
		if ro, _ := l.body["rollover"].(map[string]any); ro["max"] != "1000" {
			t.Fatalf("limit with rollover: %s", l.raw)
		}
		b := limit + "/buckets/%7Bacme%7Dteam-b"
		d := a.expect("POST", b+"/fillup", `{"cost":"3700.00"}`, 200)
		if d.str("rollover") != "0" || d.str("capacity") != "5000" {
			t.Fatalf("March: %s", d.raw)
		}

		// April, before any write: 1,300.00 unused, 1,000.00 carried.
		a.clock.Set(time.Date(2026, 4, 2, 9, 0, 0, 0, time.UTC))
		if st := a.expect("GET", b, "", 200); st.str("capacity") != "6000" || st.str("rollover") != "1000" || st.str("level") != "0" || st.str("grants") != "0" {
			t.Fatalf("April's state: %s", st.raw)
		}
		if c := a.expect("GET", b+"/can-accept?cost=6000", "", 200); c.str("rollover") != "1000" {
			t.Fatalf("April's CanAccept: %s", c.raw)
		}
		d = a.expect("POST", b+"/fillup", `{"cost":"5500"}`, 200, "Idempotency-Key", "april-1")
		if d.str("capacity") != "6000" || d.str("remaining") != "500" || d.str("rollover") != "1000" {
			t.Fatalf("April's fillup: %s", d.raw)
		}
		if rl, _ := rateLimits(t, d); rl["team-spend"].q != 6000 || rl["team-spend"].r != 500 {
			t.Fatalf("RateLimit fields with rollover: %+v", rl)
		}
		if again := a.expect("POST", b+"/fillup", `{"cost":"5500"}`, 200, "Idempotency-Key", "april-1"); again.raw != d.raw {
			t.Fatalf("replay: %s, first %s", again.raw, d.raw)
		}
		if d := a.expect("POST", b+"/fillup", `{"cost":"600"}`, 429); d.str("rollover") != "1000" || d.body["never_fits"] != false {
			t.Fatalf("past the capacity with rollover: %s", d.raw)
		}
		if d := a.expect("POST", b+"/fillup", `{"cost":"6000.01"}`, 429); d.body["never_fits"] != true {
			t.Fatalf("above the capacity with rollover: %s", d.raw)
		}
		// The teams share a hash tag: one slot in Redis Cluster.
		multi := a.expect("POST", "/v1/fillup", `{"items":[{"limit":"team-spend","key":"{acme}team-b","cost":"1"},{"limit":"team-spend","key":"{acme}team-new","cost":"1"}]}`, 200)
		items, _ := multi.body["items"].([]any)
		if len(items) != 2 || items[0].(map[string]any)["rollover"] != "1000" || items[1].(map[string]any)["rollover"] != "0" {
			t.Fatalf("multi-bucket items: %s", multi.raw)
		}
		// A team first written in April starts with none.
		if st := a.expect("GET", limit+"/buckets/%7Bacme%7Dteam-new", "", 200); st.str("capacity") != "5000" || st.str("rollover") != "0" {
			t.Fatalf("a new team: %s", st.raw)
		}

		// May: April used 5,501 of the 5,000 in force (the rollover it
		// received is not carried again): nothing carried.
		a.clock.Set(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
		if st := a.expect("GET", b, "", 200); st.str("capacity") != "5000" || st.str("rollover") != "0" {
			t.Fatalf("May's state: %s", st.raw)
		}
		if st := a.expect("GET", limit+"/buckets/%7Bacme%7Dteam-new", "", 200); st.str("capacity") != "6000" || st.str("rollover") != "1000" {
			t.Fatalf("May for the new team: %s", st.raw)
		}
		page := a.expect("GET", limit+"/buckets", "", 200)
		for _, it := range page.body["items"].([]any) {
			m := it.(map[string]any)
			if want := map[string]string{"{acme}team-b": "0", "{acme}team-new": "1000"}[m["key"].(string)]; m["rollover"] != want {
				t.Errorf("listed %v, want rollover %s", m, want)
			}
		}

		// A PUT without rollover removes it.
		a.expect("PUT", limit, `{"capacity":"5000.00","period":{"every":"month","tz":"UTC"}}`, 200)
		if st := a.expect("GET", limit+"/buckets/%7Bacme%7Dteam-new", "", 200); st.str("capacity") != "5000" || st.str("rollover") != "0" {
			t.Fatalf("after removing rollover: %s", st.raw)
		}
	})
}

package http_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/shopspring/decimal"
)

// rateLimit is one limit's member of RateLimit-Policy and RateLimit, read
// as RFC 9651 structured fields.
type rateLimit struct {
	q, w, r, t int64
	hasT       bool
}

// rateLimits parses the RateLimit fields of an answer into members by
// limit name, failing on anything that is not a valid structured-field list
// of strings with integer parameters.
func rateLimits(t *testing.T, r response) (map[string]rateLimit, []string) {
	t.Helper()
	policy, err := httpsfv.UnmarshalList(r.header.Values("RateLimit-Policy"))
	if err != nil {
		t.Fatalf("RateLimit-Policy %q: %v", r.header.Values("RateLimit-Policy"), err)
	}
	state, err := httpsfv.UnmarshalList(r.header.Values("RateLimit"))
	if err != nil {
		t.Fatalf("RateLimit %q: %v", r.header.Values("RateLimit"), err)
	}
	if len(policy) == 0 || len(policy) != len(state) {
		t.Fatalf("RateLimit-Policy %q and RateLimit %q", r.header.Values("RateLimit-Policy"), r.header.Values("RateLimit"))
	}
	out := map[string]rateLimit{}
	var names []string
	param := func(p *httpsfv.Params, name string) (int64, bool) {
		v, ok := p.Get(name)
		if !ok {
			return 0, false
		}
		n, isInt := v.(int64)
		if !isInt {
			t.Fatalf("parameter %s = %v (%T), want an integer", name, v, v)
		}
		return n, true
	}
	for i := range policy {
		p, ok1 := policy[i].(httpsfv.Item)
		s, ok2 := state[i].(httpsfv.Item)
		if !ok1 || !ok2 {
			t.Fatalf("member %d is not an item", i)
		}
		name, ok1 := p.Value.(string)
		name2, ok2 := s.Value.(string)
		if !ok1 || !ok2 || name != name2 {
			t.Fatalf("member %d names %v and %v", i, p.Value, s.Value)
		}
		var rl rateLimit
		var ok bool
		if rl.q, ok = param(p.Params, "q"); !ok {
			t.Fatalf("%s: no q", name)
		}
		if rl.w, ok = param(p.Params, "w"); !ok {
			t.Fatalf("%s: no w", name)
		}
		if rl.r, ok = param(s.Params, "r"); !ok {
			t.Fatalf("%s: no r", name)
		}
		rl.t, rl.hasT = param(s.Params, "t")
		out[name] = rl
		names = append(names, name)
	}
	return out, names
}

// checkDecision checks a member against a decision document: q and r are
// capacity and remaining rounded down; on a denial t is Retry-After.
func checkDecision(t *testing.T, rl rateLimit, doc map[string]any, retryAfter string) {
	t.Helper()
	floor := func(field string) int64 {
		s, _ := doc[field].(string)
		return decimal.RequireFromString(s).Floor().IntPart()
	}
	if rl.q != floor("capacity") || rl.r != floor("remaining") {
		t.Fatalf("q=%d r=%d for %v", rl.q, rl.r, doc)
	}
	if doc["accepted"] == false {
		if doc["never_fits"] == true {
			if rl.hasT {
				t.Fatalf("t=%d on a cost that never fits", rl.t)
			}
			return
		}
		ra, _ := doc["retry_after"].(string)
		want := decimal.RequireFromString(ra).Ceil().IntPart()
		if !rl.hasT || rl.t != want {
			t.Fatalf("t=%d (%v), want %d for %v", rl.t, rl.hasT, want, doc)
		}
		if retryAfter != "" && decimal.RequireFromString(retryAfter).IntPart() != rl.t {
			t.Fatalf("t=%d, Retry-After %s", rl.t, retryAfter)
		}
	}
}

func TestRateLimitFields(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.limit("rows", "100", "10", "1s")         // a full bucket leaks empty in 10 s
		path := "/v1/limits/rows/buckets/%7Ba%7Dk" // {a}: one Redis Cluster hash slot for the multi-bucket calls

		r := a.expect("POST", path+"/fillup", `{"cost":"25"}`, 200)
		rl, _ := rateLimits(t, r)
		if got := rl["rows"]; got != (rateLimit{q: 100, w: 10, r: 75, t: 3, hasT: true}) {
			t.Fatalf("accepted fillup: %+v", got)
		}
		checkDecision(t, rl["rows"], r.body, "")

		r = a.expect("POST", path+"/fillup", `{"cost":"80"}`, 429) // fits in 0.5 s
		rl, _ = rateLimits(t, r)
		if got := rl["rows"]; got != (rateLimit{q: 100, w: 10, r: 75, t: 1, hasT: true}) || r.header.Get("Retry-After") != "1" {
			t.Fatalf("denied fillup: %+v, Retry-After %q", got, r.header.Get("Retry-After"))
		}
		checkDecision(t, rl["rows"], r.body, r.header.Get("Retry-After"))

		for _, cost := range []string{"1", "75", "76", "200"} {
			r = a.expect("GET", path+"?cost="+cost, "", 200)
			rl, _ = rateLimits(t, r)
			checkDecision(t, rl["rows"], r.body, "")
		}
		if rl["rows"].hasT {
			t.Fatalf("a cost that never fits has t=%d", rl["rows"].t)
		}

		r = a.expect("POST", path+"/reservations", `{"amount":"30.5"}`, 201)
		rl, _ = rateLimits(t, r)
		if got := rl["rows"]; got.r != 44 || got.t != 3 {
			t.Fatalf("reserve: %+v", got)
		}
		checkDecision(t, rl["rows"], r.body, "")
		r = a.expect("POST", path+"/reservations", `{"amount":"50"}`, 429)
		rl, _ = rateLimits(t, r)
		checkDecision(t, rl["rows"], r.body, r.header.Get("Retry-After"))

		// Fractions: q and r round down, w rounds up (12.5 / 0.3 = 41.7 s).
		a.limit("frac", "12.5", "0.3", "1s")
		r = a.expect("POST", "/v1/limits/frac/buckets/k/fillup", `{"cost":"0.7"}`, 200)
		rl, _ = rateLimits(t, r)
		if got := rl["frac"]; got != (rateLimit{q: 12, w: 42, r: 11, t: 3, hasT: true}) {
			t.Fatalf("fractions: %+v", got)
		}

		// Multi-bucket: one member per limit, in the order of the items.
		a.limit("team", "1000", "1000", "1h")
		r = a.expect("POST", "/v1/fillup", `{"items":[{"limit":"team","key":"{a}t","cost":"10"},{"limit":"rows","key":"{a}k","cost":"1"},{"limit":"rows","key":"{a}k2","cost":"1"}]}`, 200)
		rl, names := rateLimits(t, r)
		if strings.Join(names, ",") != "team,rows" || rl["team"] != (rateLimit{q: 1000, w: 3600, r: 990, t: 36, hasT: true}) {
			t.Fatalf("multi-bucket: %v %+v", names, rl)
		}
		r = a.expect("POST", "/v1/fillup", `{"items":[{"limit":"team","key":"{a}t","cost":"10"},{"limit":"rows","key":"{a}k2","cost":"1"},{"limit":"rows","key":"{a}k","cost":"90"}]}`, 429)
		rl, _ = rateLimits(t, r)
		items := r.body["items"].([]any)
		checkDecision(t, rl["rows"], items[2].(map[string]any), r.header.Get("Retry-After")) // the denied bucket of rows
		checkDecision(t, rl["team"], items[0].(map[string]any), "")

		// A replay repeats the fields as they were.
		first := a.expect("POST", path+"/fillup", `{"cost":"90"}`, 429, "Idempotency-Key", "rl")
		a.clock.Advance(time.Hour)
		again := a.expect("POST", path+"/fillup", `{"cost":"90"}`, 429, "Idempotency-Key", "rl")
		for _, h := range []string{"RateLimit-Policy", "RateLimit", "Retry-After"} {
			if first.header.Get(h) != again.header.Get(h) || first.header.Get(h) == "" {
				t.Fatalf("replayed %s = %q, first %q", h, again.header.Get(h), first.header.Get(h))
			}
		}
	})
}

// Numbers beyond what a structured-field integer holds are clamped, in
// Retry-After too.
func TestHeaderIntegersAreClamped(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.limit("slow", "1000000000000", "0.000001", "87600h")
		path := "/v1/limits/slow/buckets/k"
		a.expect("POST", path+"/fillup", `{"cost":"1000000000000"}`, 200)
		r := a.expect("POST", path+"/fillup", `{"cost":"1000000000000"}`, 429)
		if ra := r.header.Get("Retry-After"); ra != "999999999999999" {
			t.Fatalf("Retry-After %q, retry_after %s", ra, r.str("retry_after"))
		}
		rl, _ := rateLimits(t, r)
		if got := rl["slow"]; got != (rateLimit{q: 1000000000000, w: 999999999999999, r: 0, t: 999999999999999, hasT: true}) {
			t.Fatalf("clamped: %+v", got)
		}
	})
}

// TestRateLimitFieldsPeriodic: for a calendar-period limit w is the
// period's length and t the seconds until it resets, on an accepted call
// and, as Retry-After, on a denied one.
func TestRateLimitFieldsPeriodic(t *testing.T) {
	a := newAPI(t)
	a.clock.Set(time.Date(2026, 11, 23, 18, 0, 0, 0, time.UTC))
	a.expect("PUT", "/v1/limits/daily", `{"capacity":"10","period":{"every":"day","tz":"Europe/Berlin"}}`, 200)
	path := "/v1/limits/daily/buckets/k"
	// Berlin's next midnight is 23:00 UTC: 5 h = 18000 s away; the day is 86400 s.
	r := a.expect("POST", path+"/fillup", `{"cost":"4"}`, 200)
	rl, _ := rateLimits(t, r)
	if got := rl["daily"]; got != (rateLimit{q: 10, w: 86400, r: 6, t: 18000, hasT: true}) {
		t.Fatalf("accepted: %+v", got)
	}
	a.clock.Advance(time.Second + time.Millisecond)
	r = a.expect("POST", path+"/fillup", `{"cost":"7"}`, 429)
	rl, _ = rateLimits(t, r)
	if got := rl["daily"]; got != (rateLimit{q: 10, w: 86400, r: 6, t: 17999, hasT: true}) || r.header.Get("Retry-After") != "17999" {
		t.Fatalf("denied: %+v, Retry-After %q", got, r.header.Get("Retry-After"))
	}
	r = a.expect("GET", path+"?cost=2", "", 200)
	rl, _ = rateLimits(t, r)
	if got := rl["daily"]; got != (rateLimit{q: 10, w: 86400, r: 6, t: 17999, hasT: true}) {
		t.Fatalf("CanAccept: %+v", got)
	}
}

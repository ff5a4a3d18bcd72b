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

// TestModeShadowRollout follows an operator trying a new cap on live
// traffic: in shadow mode a charge over the cap answers 200 marked
// shadow_denied and is charged; the limit document says the mode; a PUT to
// enforce keeps the level and the next charge is a 429.
func TestModeShadowRollout(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.clock.Set(time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC))
		r := a.expect("PUT", "/v1/limits/new-cap", `{"capacity":"100","period":{"every":"month"},"mode":"shadow"}`, 200)
		if r.body["mode"] != "shadow" || !strings.Contains(r.raw, `"grace":null`) {
			t.Fatalf("limit document: %s", r.raw)
		}
		bucket := "/v1/limits/new-cap/buckets/team-a"
		if d := a.expect("POST", bucket+"/fillup", `{"cost":"80"}`, 200); d.body["shadow_denied"] != false || d.body["over_capacity"] != false {
			t.Fatalf("a charge within the cap: %s", d.raw)
		}
		if c := a.expect("GET", bucket+"/can-accept?cost=30", "", 200); c.body["accepted"] != true || c.body["shadow_denied"] != true {
			t.Fatalf("CanAccept over the cap: %s", c.raw)
		}
		d := a.expect("POST", bucket+"/fillup", `{"cost":"30"}`, 200)
		if d.body["accepted"] != true || d.body["shadow_denied"] != true || d.str("level") != "110" || d.str("remaining") != "0" || d.body["retry_after"] != nil {
			t.Fatalf("a charge over the cap in shadow mode: %s", d.raw)
		}
		if h := d.header.Get("Retry-After"); h != "" {
			t.Fatalf("an accepted shadow charge has Retry-After %q", h)
		}
		res := a.expect("POST", bucket+"/reservations", `{"amount":"5","ttl":"1m"}`, 201)
		if res.body["shadow_denied"] != true {
			t.Fatalf("a hold over the cap in shadow mode: %s", res.raw)
		}
		multi := a.expect("POST", "/v1/fillup", `{"items":[{"limit":"new-cap","key":"team-a","cost":"1"}]}`, 200)
		if !strings.Contains(multi.raw, `"shadow_denied":true`) {
			t.Fatalf("a multi-bucket item over the cap: %s", multi.raw)
		}
		a.expect("PUT", "/v1/limits/new-cap", `{"capacity":"100","period":{"every":"month"},"mode":"enforce"}`, 200)
		if d := a.expect("POST", bucket+"/fillup", `{"cost":"1"}`, 429); d.str("level") != "111" || d.body["shadow_denied"] != false {
			t.Fatalf("enforce after shadow: %s", d.raw)
		}
	})
}

// TestModeSoftGrace: a soft limit with a 10% grace accepts to 110% marked
// over_capacity, denies past it with the wait until it fits under the
// grace, and reads back its grace.
func TestModeSoftGrace(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.clock.Set(time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC))
		r := a.expect("PUT", "/v1/limits/spend", `{"capacity":"1000.00","leak":{"amount":"1","per":"1s"},"mode":"soft","grace":"10%"}`, 200)
		if r.body["mode"] != "soft" || r.str("grace") != "10%" {
			t.Fatalf("limit document: %s", r.raw)
		}
		got := a.expect("GET", "/v1/limits/spend", "", 200)
		if got.body["mode"] != "soft" || got.str("grace") != "10%" {
			t.Fatalf("GET limit: %s", got.raw)
		}
		bucket := "/v1/limits/spend/buckets/team-b"
		if d := a.expect("POST", bucket+"/fillup", `{"cost":"1000"}`, 200); d.body["over_capacity"] != false {
			t.Fatalf("to capacity: %s", d.raw)
		}
		if d := a.expect("POST", bucket+"/fillup", `{"cost":"99.5"}`, 200); d.body["over_capacity"] != true || d.str("level") != "1099.5" {
			t.Fatalf("within the grace: %s", d.raw)
		}
		d := a.expect("POST", bucket+"/fillup", `{"cost":"2"}`, 429)
		if d.str("retry_after") != "1.5" || d.body["over_capacity"] != false || d.body["never_fits"] != false {
			t.Fatalf("past the grace: %s", d.raw)
		}
		if d := a.expect("POST", bucket+"/fillup", `{"cost":"1100.01"}`, 429); d.body["never_fits"] != true {
			t.Fatalf("a cost above capacity + grace: %s", d.raw)
		}
	})
}

// TestModeValidationAgrees sends bad modes and graces to budgetd and to the
// wire contract's validation (the Go client's): both refuse each naming the
// same field, nothing is changed, and good ones pass both.
func TestModeValidationAgrees(t *testing.T) {
	pct := func(s string) *wire.Percent { return wire.NewPercent(decimal.RequireFromString(s)) }
	cases := []struct {
		mode  wire.Mode
		grace *wire.Percent
		field string
	}{
		{"strict", nil, "mode"},
		{"SHADOW", nil, "mode"},
		{wire.ModeShadow, pct("10"), "grace"},
		{wire.ModeEnforce, pct("0"), "grace"},
		{"", pct("5"), "grace"},
		{wire.ModeSoft, pct("100.01"), "grace"},
		{wire.ModeSoft, pct("1.005"), "grace"},
		{wire.ModeSoft, pct("100"), ""},
		{wire.ModeSoft, pct("0"), ""},
		{wire.ModeSoft, nil, ""},
		{wire.ModeShadow, nil, ""},
		{wire.ModeEnforce, nil, ""},
	}
	eachStore(t, func(t *testing.T, a *api) {
		a.expect("PUT", "/v1/limits/m", `{"capacity":"5","leak":{"amount":"1","per":"1s"}}`, 200)
		for _, tc := range cases {
			put := wire.LimitPut{Capacity: decimal.NewFromInt(7), Leak: &wire.Leak{Amount: decimal.NewFromInt(1), Per: wire.Duration(time.Second)}, Mode: tc.mode, Grace: tc.grace}
			b, _ := json.Marshal(put)
			err := put.Validate()
			if tc.field == "" {
				if r := a.do("PUT", "/v1/limits/good", string(b)); err != nil || r.status != 200 {
					t.Errorf("%s: budgetd %d %s, client %v; want both to take it", b, r.status, r.raw, err)
				}
				continue
			}
			r := a.do("PUT", "/v1/limits/m", string(b))
			var p *wire.Problem
			if !errors.As(err, &p) || p.Code != wire.CodeInvalidRequest || p.Field != tc.field {
				t.Errorf("%s: the client's validation says %v, want invalid_request on %s", b, err, tc.field)
			}
			if r.status != 400 || r.str("code") != "invalid_request" || r.str("field") != tc.field {
				t.Errorf("%s: budgetd %d %s, want 400 invalid_request on %s", b, r.status, r.raw, tc.field)
			}
		}
		for _, body := range []string{
			`{"capacity":"5","leak":{"amount":"1","per":"1s"},"mode":"soft","grace":"10"}`,
			`{"capacity":"5","leak":{"amount":"1","per":"1s"},"mode":"soft","grace":"-1%"}`,
			`{"capacity":"5","leak":{"amount":"1","per":"1s"},"mode":"soft","grace":"1e1%"}`,
			`{"capacity":"5","leak":{"amount":"1","per":"1s"},"mode":"soft","grace":10}`,
			`{"capacity":"5","leak":{"amount":"1","per":"1s"},"mode":""}`,
			`{"capacity":"5","leak":{"amount":"1","per":"1s"},"mode":1}`,
		} {
			if r := a.do("PUT", "/v1/limits/m", body); r.status != 400 || (r.str("field") != "grace" && r.str("field") != "mode") {
				t.Errorf("%s: %d %s, want 400 naming mode or grace", body, r.status, r.raw)
			}
		}
		if l := a.expect("GET", "/v1/limits/m", "", 200); l.str("capacity") != "5" || l.body["mode"] != "enforce" {
			t.Errorf("a refused PUT changed the limit: %s", l.raw)
		}
	})
}

// TestShadowDeniedMetric: each charge a shadow limit accepted over its cap
// counts once in budgetd_shadow_denied_total by limit and operation; a
// CanAccept, a charge within the cap and a replay do not.
func TestShadowDeniedMetric(t *testing.T) {
	h := openHandler(t)
	serveReq(h, "PUT", "/v1/limits/s", `{"capacity":"10","leak":{"amount":"1","per":"1h"},"mode":"shadow"}`)
	serveReq(h, "POST", "/v1/limits/s/buckets/k/fillup", `{"cost":"10"}`)
	serveReq(h, "GET", "/v1/limits/s/buckets/k/can-accept?cost=1", "")
	for range 2 {
		serveReq(h, "POST", "/v1/limits/s/buckets/k/fillup", `{"cost":"1"}`, "Idempotency-Key", "once")
	}
	serveReq(h, "POST", "/v1/fillup", `{"items":[{"limit":"s","key":"k","cost":"1"}]}`)
	serveReq(h, "POST", "/v1/limits/s/buckets/k/reservations", `{"amount":"1"}`)
	m := scrape(t, h, "")
	for _, want := range []string{
		`budgetd_shadow_denied_total{limit="s",op="fillup"} 1`,
		`budgetd_shadow_denied_total{limit="s",op="multi_fillup"} 1`,
		`budgetd_shadow_denied_total{limit="s",op="reserve"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("no %s in the metrics", want)
		}
	}
	if strings.Contains(m, `budgetd_shadow_denied_total{limit="s",op="check"}`) {
		t.Errorf("a CanAccept counted as a shadow denial")
	}
	if t.Failed() {
		t.Log(m)
	}
}

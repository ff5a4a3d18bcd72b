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

// TestEventsMonthlyCap follows SPEC's user: 50% and 80% thresholds on the
// README's monthly cap, charges past 80%, and exactly two crossed events
// to read, each once across pages; a drain below 80% recovers it, on every
// store.
func TestEventsMonthlyCap(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.clock.Set(time.Date(2026, 11, 10, 9, 0, 0, 0, time.UTC))
		body := `{"capacity":"5000.00","period":{"every":"month","tz":"Europe/Berlin"},"thresholds":["50%","80%"]}`
		r := a.do("PUT", "/v1/limits/team-spend", body)
		if r.status != 200 || !strings.Contains(r.raw, `"thresholds":["50%","80%"]`) {
			t.Fatalf("PUT: %d %s", r.status, r.raw)
		}
		start := a.expect("GET", "/v1/events", "", 200).str("next_cursor")
		bucket := "/v1/limits/team-spend/buckets/team-a"
		for _, cost := range []string{"1000", "2000", "500", "1000", "100"} {
			a.expect("POST", bucket+"/fillup", `{"cost":"`+cost+`"}`, 200)
		}
		a.expect("POST", bucket+"/fillup", `{"cost":"1000"}`, 429) // denied: no event
		var got []map[string]any
		cursor := start
		for range 10 {
			p := a.expect("GET", "/v1/events?limit=1&after="+cursor, "", 200)
			var page struct {
				Items []map[string]any `json:"items"`
				Next  string           `json:"next_cursor"`
			}
			if err := json.Unmarshal([]byte(p.raw), &page); err != nil {
				t.Fatal(err)
			}
			if len(page.Items) == 0 {
				if page.Next != cursor {
					t.Fatalf("an empty page moved the cursor: %s", p.raw)
				}
				break
			}
			got = append(got, page.Items...)
			cursor = page.Next
		}
		if len(got) != 2 || got[0]["type"] != "threshold.crossed" || got[0]["threshold"] != "50%" || got[0]["used"] != "3000" ||
			got[1]["threshold"] != "80%" || got[1]["used"] != "4500" || got[1]["capacity"] != "5000" ||
			got[1]["limit"] != "team-spend" || got[1]["key"] != "team-a" || got[1]["period_start"] != "2026-10-31T23:00:00.000000Z" {
			t.Fatalf("events: %v", got)
		}
		a.expect("POST", bucket+"/drain", `{"amount":"1000"}`, 200)
		p := a.expect("GET", "/v1/events?after="+cursor, "", 200)
		if !strings.Contains(p.raw, `"type":"threshold.recovered"`) || !strings.Contains(p.raw, `"used":"3600"`) || strings.Count(p.raw, `"id"`) != 1 {
			t.Fatalf("after the drain: %s", p.raw)
		}
		if bad := a.do("GET", "/v1/events?after=nope", ""); bad.status != 400 || bad.str("field") != "after" {
			t.Fatalf("a malformed cursor: %d %s", bad.status, bad.raw)
		}
		// The bucket's own view: newest first, at most ?limit.
		if p := a.expect("GET", bucket+"/events?limit=2", "", 200); strings.Count(p.raw, `"id"`) != 2 ||
			strings.Index(p.raw, `"threshold.recovered"`) > strings.Index(p.raw, `"threshold.crossed"`) {
			t.Fatalf("the bucket's events: %s", p.raw)
		}
		for _, q := range []string{"limit=0", "limit=101", "limit=abc", "limit=+5"} {
			if bad := a.do("GET", bucket+"/events?"+q, ""); bad.status != 400 || bad.str("field") != "limit" {
				t.Fatalf("?%s: %d %s", q, bad.status, bad.raw)
			}
		}
		if bad := a.do("GET", "/v1/limits/nope/buckets/team-a/events", ""); bad.status != 404 {
			t.Fatalf("an unknown limit's bucket events: %d %s", bad.status, bad.raw)
		}
	})
}

// TestThresholdValidationAgrees: malformed thresholds are refused by
// budgetd and by the wire contract's validation alike, naming the same
// field, with nothing changed.
func TestThresholdValidationAgrees(t *testing.T) {
	nine := []string{"1%", "2%", "3%", "4%", "5%", "6%", "7%", "8%", "9%"}
	cases := []struct {
		ts    []string
		field string
	}{
		{[]string{"0%"}, "thresholds[0]"},
		{[]string{"50%", "200.01%"}, "thresholds[1]"},
		{[]string{"1.005%"}, "thresholds[0]"},
		{[]string{"-1"}, "thresholds[0]"},
		{[]string{"0"}, "thresholds[0]"},
		{[]string{"abc"}, "thresholds[0]"},
		{[]string{"1e3"}, "thresholds[0]"},
		{[]string{"80%", "80.0%"}, "thresholds[1]"},
		{[]string{"80", "80.00"}, "thresholds[1]"},
		{[]string{"0.0000001"}, "thresholds[0]"},
		{nine, "thresholds"},
		{nine[:8], ""},
		{[]string{"200%", "80", "80%", "0.000001"}, ""},
	}
	eachStore(t, func(t *testing.T, a *api) {
		a.expect("PUT", "/v1/limits/t", `{"capacity":"5","leak":{"amount":"1","per":"1s"}}`, 200)
		for _, tc := range cases {
			put := wire.LimitPut{Capacity: decimal.NewFromInt(100), Leak: &wire.Leak{Amount: decimal.NewFromInt(1), Per: wire.Duration(time.Second)}, Thresholds: tc.ts}
			b, _ := json.Marshal(put)
			err := put.Validate()
			r := a.do("PUT", "/v1/limits/t", string(b))
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
		a.expect("PUT", "/v1/limits/t", `{"capacity":"5","leak":{"amount":"1","per":"1s"}}`, 200)
		for _, body := range []string{
			`{"capacity":"5","leak":{"amount":"1","per":"1s"},"thresholds":"80%"}`,
			`{"capacity":"5","leak":{"amount":"1","per":"1s"},"thresholds":[80]}`,
		} {
			if r := a.do("PUT", "/v1/limits/t", body); r.status != 400 || !strings.HasPrefix(r.str("field"), "thresholds") {
				t.Errorf("%s: %d %s, want 400 naming thresholds", body, r.status, r.raw)
			}
		}
		if l := a.expect("GET", "/v1/limits/t", "", 200); l.str("capacity") != "5" || !strings.Contains(l.raw, `"thresholds":[]`) {
			t.Errorf("a refused PUT changed the limit: %s", l.raw)
		}
	})
}

// TestEventsEmptyFeedCursor: GET /v1/events is a feed to poll, not a list
// that ends, so next_cursor is never null (SPEC's "null at the end" is for
// the lists of limits and history): it is always a string (EventPage), the
// cursor given on an empty page, "" when none was given, and polling with
// it (?after=) lists the events written since, each once, on every store.
func TestEventsEmptyFeedCursor(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		empty := a.expect("GET", "/v1/events", "", 200)
		if !strings.Contains(empty.raw, `"items":[]`) || !strings.Contains(empty.raw, `"next_cursor":""`) {
			t.Fatalf("an empty feed: %s", empty.raw)
		}
		if again := a.expect("GET", "/v1/events?after=", "", 200); again.raw != empty.raw {
			t.Fatalf("polling an empty feed with its cursor: %s, then %s", empty.raw, again.raw)
		}
		a.expect("PUT", "/v1/limits/feed", `{"capacity":"10","leak":{"amount":"1","per":"1h"},"thresholds":["50%"]}`, 200)
		a.expect("POST", "/v1/limits/feed/buckets/k/fillup", `{"cost":"6"}`, 200)
		p := a.expect("GET", "/v1/events?after="+empty.str("next_cursor"), "", 200)
		var page struct {
			Items []wire.WebhookEvent `json:"items"`
			Next  *string             `json:"next_cursor"`
		}
		if err := json.Unmarshal([]byte(p.raw), &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Items) != 1 || page.Items[0].Threshold != "50%" || page.Next == nil || *page.Next != page.Items[0].ID {
			t.Fatalf("the event written since: %s", p.raw)
		}
		last := a.expect("GET", "/v1/events?after="+*page.Next, "", 200)
		if !strings.Contains(last.raw, `"items":[]`) || !strings.Contains(last.raw, `"next_cursor":"`+*page.Next+`"`) {
			t.Fatalf("nothing new after %s: %s", *page.Next, last.raw)
		}
	})
}

package http_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// levelSeries is the answer of GET …/levels, decoded loosely.
type levelSeries struct {
	Items []struct {
		At    string `json:"at"`
		Level string `json:"level"`
		Held  string `json:"held"`
		Event string `json:"event"`
	} `json:"items"`
	Capacity    string  `json:"capacity"`
	From        string  `json:"from"`
	To          string  `json:"to"`
	PeriodStart *string `json:"period_start"`
	ResetsAt    *string `json:"resets_at"`
	Complete    bool    `json:"complete"`
}

func (a *api) levels(path string) (levelSeries, string) {
	a.t.Helper()
	raw := a.expect("GET", path, "", 200).raw
	var ls levelSeries
	if err := json.Unmarshal([]byte(raw), &ls); err != nil {
		a.t.Fatal(err)
	}
	return ls, raw
}

// points writes the items as "at level held event" lines, times as
// offsets from t0.
func (ls levelSeries) points(t *testing.T, t0 time.Time) string {
	var b strings.Builder
	for _, it := range ls.Items {
		at, err := time.Parse(time.RFC3339Nano, it.At)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(strings.TrimSpace(at.Sub(t0).String() + " " + it.Level + " " + it.Held + " " + it.Event))
		b.WriteByte('\n')
	}
	return b.String()
}

// TestLevelsLeaky: the level series of a leaky bucket is its history
// replayed by the rule, on every store: a step before and after each event
// (fillups, a hold and its expiry), evenly spaced samples, and the instant
// the bucket leaks empty.
func TestLevelsLeaky(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
		a.clock.Set(t0)
		a.expect("PUT", "/v1/limits/spend", `{"capacity":"100","leak":{"amount":"10","per":"1h"},"history":true}`, 200)
		b := "/v1/limits/spend/buckets/k"
		a.expect("POST", b+"/fillup", `{"cost":"40"}`, 200)
		a.clock.Set(t0.Add(time.Hour))
		a.expect("POST", b+"/fillup", `{"cost":"20"}`, 200)
		a.clock.Set(t0.Add(2 * time.Hour))
		a.expect("POST", b+"/reservations", `{"amount":"5","ttl":"30m"}`, 201)
		a.clock.Set(t0.Add(8 * time.Hour))
		ls, raw := a.levels(b + "/levels?points=5&from=2026-03-01T00:00:00Z&to=2026-03-01T08:00:00Z")
		want := `0s 0 0
0s 40 0 fillup
0s 40 0
1h0m0s 30 0
1h0m0s 50 0 fillup
2h0m0s 40 0
2h0m0s 40 5 reserved
2h0m0s 40 5
2h30m0s 35 5
2h30m0s 35 0 expired
4h0m0s 20 0
6h0m0s 0 0
8h0m0s 0 0
`
		if got := ls.points(t, t0); got != want {
			t.Errorf("points:\n%s\nwant:\n%s", got, want)
		}
		if ls.Capacity != "100" || !ls.Complete || ls.PeriodStart != nil || ls.ResetsAt != nil ||
			ls.From != "2026-03-01T00:00:00.000000Z" || ls.To != "2026-03-01T08:00:00.000000Z" {
			t.Errorf("series: %s", raw)
		}
		// Without from and to: from the first entry to now, 200 samples.
		ls, raw = a.levels(b + "/levels")
		if ls.From != "2026-03-01T00:00:00.000000Z" || ls.To != "2026-03-01T08:00:00.000000Z" || len(ls.Items) != 200+8+1 {
			t.Errorf("default window: %d items: %.300s", len(ls.Items), raw)
		}
		// A level that leaks to zero between samples has a point there, and
		// the rounding is the rule's: 10 per 3h leaves 10/3 after 2h, to 12
		// digits, rounded down.
		a.expect("PUT", "/v1/limits/slow", `{"capacity":"100","leak":{"amount":"10","per":"3h"},"history":true}`, 200)
		a.clock.Set(t0.Add(10 * time.Hour))
		a.expect("POST", "/v1/limits/slow/buckets/k/fillup", `{"cost":"10"}`, 200)
		a.clock.Set(t0.Add(14 * time.Hour))
		ls, _ = a.levels("/v1/limits/slow/buckets/k/levels?points=3&from=2026-03-01T10:00:00Z")
		want = `0s 0 0
0s 10 0 fillup
0s 10 0
2h0m0s 3.333333333334 0
3h0m0s 0 0
4h0m0s 0 0
`
		if got := ls.points(t, t0.Add(10*time.Hour)); got != want {
			t.Errorf("slow points:\n%s\nwant:\n%s", got, want)
		}
	})
}

// TestLevelsPeriodic: the README's monthly Berlin cap across a reset, on
// every store: the level steps up with each fillup, drops to zero at
// midnight in Berlin (23:00 UTC), and the answer says when the current
// period resets.
func TestLevelsPeriodic(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		t0 := time.Date(2026, 1, 31, 20, 0, 0, 0, time.UTC)
		a.clock.Set(t0)
		a.expect("PUT", "/v1/limits/team-spend", `{"capacity":"5000.00","period":{"every":"month","tz":"Europe/Berlin"},"history":true}`, 200)
		b := "/v1/limits/team-spend/buckets/team-a"
		a.expect("POST", b+"/fillup", `{"cost":"100"}`, 200)
		a.clock.Set(t0.Add(150 * time.Minute))
		a.expect("POST", b+"/fillup", `{"cost":"50.25"}`, 200)
		a.clock.Set(t0.Add(5 * time.Hour))
		a.expect("POST", b+"/fillup", `{"cost":"30"}`, 200)
		a.clock.Set(t0.Add(6 * time.Hour))
		ls, raw := a.levels(b + "/levels?points=4&from=2026-01-31T20:00:00Z")
		want := `0s 0 0
0s 100 0 fillup
0s 100 0
2h0m0s 100 0
2h30m0s 100 0
2h30m0s 150.25 0 fillup
3h0m0s 150.25 0
3h0m0s 0 0
4h0m0s 0 0
5h0m0s 0 0
5h0m0s 30 0 fillup
6h0m0s 30 0
`
		if got := ls.points(t, t0); got != want {
			t.Errorf("points:\n%s\nwant:\n%s", got, want)
		}
		if ls.Capacity != "5000" || !ls.Complete || ls.PeriodStart == nil || ls.ResetsAt == nil ||
			*ls.PeriodStart != "2026-01-31T23:00:00.000000Z" || *ls.ResetsAt != "2026-02-28T23:00:00.000000Z" {
			t.Errorf("series: %s", raw)
		}
		// A window that ends before the reset reports that period.
		ls, raw = a.levels(b + "/levels?points=2&from=2026-01-31T20:00:00Z&to=2026-01-31T22:00:00Z")
		if ls.PeriodStart == nil || *ls.PeriodStart != "2025-12-31T23:00:00.000000Z" || *ls.ResetsAt != "2026-01-31T23:00:00.000000Z" ||
			len(ls.Items) != 4 || ls.Items[3].Level != "100" {
			t.Errorf("January window: %s", raw)
		}
	})
}

// TestLevelsBadInput: every parameter keeps its 400 with field; a limit
// without history answers an empty, incomplete series; a missing limit 404.
func TestLevelsBadInput(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
		a.clock.Set(t0)
		a.expect("PUT", "/v1/limits/quiet", `{"capacity":"10","leak":{"amount":"1","per":"1s"},"history":false}`, 200)
		a.expect("POST", "/v1/limits/quiet/buckets/k/fillup", `{"cost":"4"}`, 200)
		b := "/v1/limits/quiet/buckets/k/levels"
		for q, field := range map[string]string{
			"?points=1":                  "points",
			"?points=1001":               "points",
			"?points=abc":                "points",
			"?points=+5":                 "points",
			"?points=":                   "points",
			"?from=yesterday":            "from",
			"?to=2026-03-01":             "to",
			"?from=2026-03-01T00:00:00Z": "from", // = to (now)
			"?from=2026-03-01T00:00:01Z": "from", // after to
			"?to=2026-03-01T00:00:01Z":   "to",   // after now
			"?to=1969-12-31T00:00:00Z":   "to",
		} {
			r := a.expect("GET", b+q, "", 400)
			if r.str("code") != "invalid_request" || r.str("field") != field {
				t.Errorf("%s: %s, want field %s", q, r.raw, field)
			}
		}
		a.expect("GET", "/v1/limits/missing/buckets/k/levels", "", 404)
		a.expect("GET", "/v1/limits/quiet/buckets/"+strings.Repeat("x", 300)+"/levels", "", 400)
		ls, raw := a.levels(b)
		if len(ls.Items) != 0 || ls.Complete || ls.Capacity != "10" || ls.To != "2026-03-01T00:00:00.000000Z" {
			t.Errorf("history off: %s", raw)
		}
	})
}

// TestLevelsIncompleteHistory: a bucket charged before its history was
// turned on (as one whose oldest entries were pruned) is replayed from the
// least level that ends at its level now, and the series says it is not
// complete.
func TestLevelsIncompleteHistory(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
		a.clock.Set(t0)
		a.expect("PUT", "/v1/limits/late", `{"capacity":"100","leak":{"amount":"10","per":"1h"},"history":false}`, 200)
		b := "/v1/limits/late/buckets/k"
		a.expect("POST", b+"/fillup", `{"cost":"30"}`, 200)
		a.clock.Set(t0.Add(time.Hour))
		a.expect("PUT", "/v1/limits/late", `{"capacity":"100","leak":{"amount":"10","per":"1h"},"history":true}`, 200)
		a.expect("POST", b+"/fillup", `{"cost":"10.5"}`, 200)
		a.clock.Set(t0.Add(2 * time.Hour))
		ls, raw := a.levels(b + "/levels?points=2&from=2026-03-01T01:00:00Z")
		want := `0s 20 0
0s 30.5 0 fillup
0s 30.5 0
1h0m0s 20.5 0
`
		if got := ls.points(t, t0.Add(time.Hour)); got != want || ls.Complete {
			t.Errorf("points:\n%s\nwant:\n%s%s", got, want, raw)
		}
	})
}

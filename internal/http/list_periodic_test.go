package http_test

import (
	"encoding/json"
	"testing"
	"time"
)

// TestListBucketsPeriodic: GET /v1/limits/{name}/buckets of the README's
// monthly cap answers 200 on every store (PostgreSQL answered 503), each
// bucket with its period_start and resets_at, as GET of the one bucket
// says.
func TestListBucketsPeriodic(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.clock.Set(time.Date(2026, 1, 31, 22, 30, 0, 0, time.UTC)) // 23:30 on 31 January in Berlin
		a.expect("PUT", "/v1/limits/team-spend", `{"capacity":"5000.00","period":{"every":"month","tz":"Europe/Berlin"}}`, 200)
		a.expect("POST", "/v1/limits/team-spend/buckets/team-a/fillup", `{"cost":"12.50"}`, 200)
		a.expect("POST", "/v1/limits/team-spend/buckets/team-b/reservations", `{"amount":"30","ttl":"2h"}`, 201)
		var list struct {
			Items []struct {
				Key         string  `json:"key"`
				Level       string  `json:"level"`
				Held        string  `json:"held"`
				PeriodStart *string `json:"period_start"`
				ResetsAt    *string `json:"resets_at"`
			} `json:"items"`
		}
		raw := a.expect("GET", "/v1/limits/team-spend/buckets", "", 200).raw
		if err := json.Unmarshal([]byte(raw), &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 2 {
			t.Fatalf("buckets: %s", raw)
		}
		for i, want := range [][2]string{{"team-a", "12.5"}, {"team-b", "0"}} {
			it := list.Items[i]
			if it.Key != want[0] || it.Level != want[1] || it.PeriodStart == nil || it.ResetsAt == nil ||
				*it.PeriodStart != "2025-12-31T23:00:00.000000Z" || *it.ResetsAt != "2026-01-31T23:00:00.000000Z" {
				t.Errorf("item %d: %s", i, raw)
			}
		}
	})
}

package api_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/budgetd/budgetd/api"
	"github.com/shopspring/decimal"
)

// TestNewWebhookEvent: each argument lands in its own field, and a zero
// period start is written as null.
func TestNewWebhookEvent(t *testing.T) {
	at := time.Date(2026, 11, 25, 9, 59, 59, 1000, time.UTC)
	for _, c := range []struct {
		start time.Time
		want  string
	}{
		{time.Time{}, `{"id":"17","type":"threshold.crossed","time":"2026-11-25T09:59:59.000001Z","limit":"team-spend","key":"team-a","threshold":"80%","used":"4012.5","capacity":"5000","period_start":null}`},
		{at.Truncate(24 * time.Hour), `{"id":"17","type":"threshold.crossed","time":"2026-11-25T09:59:59.000001Z","limit":"team-spend","key":"team-a","threshold":"80%","used":"4012.5","capacity":"5000","period_start":"2026-11-25T00:00:00.000000Z"}`},
	} {
		e := api.NewWebhookEvent("17", api.EventThresholdCrossed, at, "team-spend", "team-a", "80%", decimal.RequireFromString("4012.5"), decimal.NewFromInt(5000), c.start)
		b, err := json.Marshal(e)
		if err != nil || string(b) != c.want {
			t.Errorf("got %s, %v\nwant %s", b, err, c.want)
		}
	}
}

package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestCLIOverrides: budgetd overrides put|get|list|delete give one tenant a
// temporary raise that its decisions name, and refuse what budgetd refuses.
func TestCLIOverrides(t *testing.T) {
	server := startBudgetd(t)
	expect := func(wantCode int, wantOut string, args ...string) string {
		t.Helper()
		out, code := cliRun(t, server, args...)
		if code != wantCode || !strings.Contains(out, wantOut) {
			t.Fatalf("budgetd %s: exit %d, want %d; output:\n%s\nwant it to contain %q", strings.Join(args, " "), code, wantCode, out, wantOut)
		}
		return out
	}
	expect(0, "team-spend", "limits", "put", "team-spend", "--capacity", "5000", "--period", "month", "--tz", "Europe/Berlin")
	until := time.Now().Add(24 * time.Hour).UTC().Truncate(time.Second)
	expect(0, "acme     8000", "overrides", "put", "team-spend", "acme", "--capacity", "8000", "--expires-at", until.Format(time.RFC3339))
	expect(0, "team-*   100", "overrides", "put", "team-spend", "team-*", "--capacity", "100", "--start-day", "3")
	out := expect(0, "PATTERN", "overrides", "list", "team-spend")
	if strings.Index(out, "acme") > strings.Index(out, "team-*") || !strings.Contains(out, "day 3") {
		t.Fatalf("overrides list:\n%s", out)
	}
	out = expect(0, `"pattern": "acme"`, "overrides", "get", "team-spend", "acme", "--json")
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil || doc["capacity"] != "8000" || doc["expires_at"] != until.Format("2006-01-02T15:04:05.000000Z") {
		t.Fatalf("overrides get --json: %v\n%s", err, out)
	}
	expect(0, "accepted  6000", "fillup", "team-spend", "acme", "6000")
	expect(0, `"override": "acme"`, "check", "team-spend", "acme", "--json")
	expect(3, "never fits", "check", "team-spend", "globex", "6000")
	expect(0, "deleted override acme of team-spend", "overrides", "delete", "team-spend", "acme")
	expect(1, "override_not_found", "overrides", "get", "team-spend", "acme")
	expect(1, "(field window)", "overrides", "put", "team-spend", "k", "--window", "1m")
	expect(1, "limit_not_found", "overrides", "put", "nope", "k", "--capacity", "1")
	expect(2, "needs at least one of", "overrides", "put", "team-spend", "k")
	expect(2, "--expires-at", "overrides", "put", "team-spend", "k", "--capacity", "1", "--expires-at", "friday")
}

// TestCLIExpiresIn: --expires-at +DURATION is that long from now, so the
// README's example stays valid whenever it runs; a malformed one is a usage
// error.
func TestCLIExpiresIn(t *testing.T) {
	server := startBudgetd(t)
	expect := cliExpect(t, server)
	expect(0, "team-spend", "limits", "put", "team-spend", "--capacity", "5000", "--period", "month")
	before := time.Now()
	out := expect(0, `"expires_at"`, "overrides", "put", "team-spend", "acme", "--capacity", "8000", "--expires-at", "+72h", "--json")
	var doc struct {
		ExpiresAt time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || doc.ExpiresAt.Before(before.Add(72*time.Hour-time.Second)) || doc.ExpiresAt.After(time.Now().Add(72*time.Hour)) {
		t.Fatalf("--expires-at +72h: %v, expires_at %v, want 72h after %v\n%s", err, doc.ExpiresAt, before, out)
	}
	expect(0, "8001", "grants", "add", "team-spend", "acme", "1", "--expires-at", "+1h")
	expect(2, "+DURATION", "overrides", "put", "team-spend", "acme", "--capacity", "1", "--expires-at", "+soon")
	expect(2, "+DURATION", "grants", "add", "team-spend", "acme", "1", "--expires-at", "+-1h")
}

package main

import (
	"strings"
	"testing"
)

// TestCLIGrants: budgetd grants add|list|revoke top up a team's month,
// which its decisions use, and refuse what budgetd refuses.
func TestCLIGrants(t *testing.T) {
	server := startBudgetd(t)
	expect := func(wantCode int, wantOut string, args ...string) string {
		t.Helper()
		out, code := cliRun(t, server, args...)
		if code != wantCode || !strings.Contains(out, wantOut) {
			t.Fatalf("budgetd %s: exit %d, want %d; output:\n%s\nwant it to contain %q", strings.Join(args, " "), code, wantCode, out, wantOut)
		}
		return out
	}
	expect(0, "team-spend", "limits", "put", "team-spend", "--capacity", "5000", "--period", "month")
	out := expect(0, "5500", "grants", "add", "team-spend", "team-b", "500.00")
	id := strings.Fields(strings.Split(out, "\n")[1])[0]
	expect(0, id+"  500", "grants", "list", "team-spend", "team-b")
	expect(0, `"grants": "500"`, "check", "team-spend", "team-b", "--json")
	expect(0, "accepted  5400", "fillup", "team-spend", "team-b", "5400")
	expect(0, "5000", "grants", "revoke", "team-spend", "team-b", id)
	expect(1, "grant_not_found", "grants", "revoke", "team-spend", "team-b", id)
	expect(1, "(field amount)", "grants", "add", "team-spend", "team-b", "0")
	expect(1, "limit_not_found", "grants", "add", "nope", "team-b", "5")
	expect(2, "--expires-at", "grants", "add", "team-spend", "team-b", "5", "--expires-at", "friday")
}

package main

import (
	"strings"
	"testing"
)

// TestCLIRollover: budgetd limits put --rollover-max gives a monthly limit
// rollover, shown in the limit and in decisions, and refuses it where
// budgetd does.
func TestCLIRollover(t *testing.T) {
	server := startBudgetd(t)
	expect := func(wantCode int, wantOut string, args ...string) {
		t.Helper()
		out, code := cliRun(t, server, args...)
		if code != wantCode || !strings.Contains(out, wantOut) {
			t.Fatalf("budgetd %s: exit %d, want %d; output:\n%s\nwant it to contain %q", strings.Join(args, " "), code, wantCode, out, wantOut)
		}
	}
	expect(0, "rollover up to 1000", "limits", "put", "team-spend", "--capacity", "5000", "--period", "month", "--rollover-max", "1000")
	expect(0, `"max": "1000"`, "limits", "get", "team-spend", "--json")
	expect(0, `"rollover": "0"`, "check", "team-spend", "team-b", "--json")
	expect(2, "--rollover-max", "limits", "put", "logins", "--capacity", "5", "--leak", "1/1s", "--rollover-max", "10")
	expect(2, "--rollover-max", "limits", "put", "team-spend", "--capacity", "5000", "--period", "month", "--rollover-max", "lots")
	expect(1, "(field rollover.max)", "limits", "put", "team-spend", "--capacity", "5000", "--period", "month", "--rollover-max", "-1")
}

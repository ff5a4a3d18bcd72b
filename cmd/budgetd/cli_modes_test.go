package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCLIModes: a limit put in soft mode with a grace, and in shadow mode,
// shows its mode in the table and the document; a charge above capacity is
// accepted and said so in words and in --json.
func TestCLIModes(t *testing.T) {
	server := startBudgetd(t)
	expect := cliExpect(t, server)
	expect(0, "per month from day 1, UTC, soft +10%", "limits", "put", "spend", "--capacity", "100", "--period", "month", "--mode", "soft", "--grace", "10%")
	expect(0, `"grace": "10%"`, "limits", "get", "spend", "--json")
	expect(0, "per month from day 1, UTC, shadow", "limits", "put", "trial", "--capacity", "100", "--period", "month", "--mode", "shadow")
	expect(0, "accepted", "fillup", "spend", "team", "100")
	expect(0, "accepted (over capacity)", "fillup", "spend", "team", "5")
	expect(3, "denied", "fillup", "spend", "team", "5.01")
	out := expect(0, "", "fillup", "trial", "team", "150", "--json")
	var d map[string]any
	if err := json.Unmarshal([]byte(out), &d); err != nil || d["shadow_denied"] != true || d["accepted"] != true {
		t.Fatalf("fillup --json in shadow mode: %v\n%s", err, out)
	}
	expect(0, "accepted (shadow: enforce denies)", "fillup", "trial", "team", "1")
	expect(2, "--grace goes with --mode soft", "limits", "put", "x", "--capacity", "1", "--period", "day", "--grace", "5%")
	expect(2, "not a percentage", "limits", "put", "x", "--capacity", "1", "--period", "day", "--mode", "soft", "--grace", "ten")
	expect(2, "(field mode)", "limits", "put", "x", "--capacity", "1", "--period", "day", "--mode", "strict")
}

// TestCLIEvents: a limit put with --threshold lists its events with
// budgetd events, and --after continues after them.
func TestCLIEvents(t *testing.T) {
	server := startBudgetd(t)
	expect := cliExpect(t, server)
	expect(0, `"80%"`, "limits", "put", "spend", "--capacity", "100", "--period", "month", "--threshold", "50%", "--threshold", "80%", "--json")
	expect(0, "accepted", "fillup", "spend", "team", "85")
	out := expect(0, "threshold.crossed", "events")
	if strings.Count(out, "threshold.crossed") != 2 || !strings.Contains(out, "next: --after 2") {
		t.Fatalf("events:\n%s", out)
	}
	if out := expect(0, `"items": []`, "events", "--after", "2", "--json"); !strings.Contains(out, `"next_cursor": "2"`) {
		t.Fatalf("events --after 2 --json:\n%s", out)
	}
	expect(2, "(field thresholds[0])", "limits", "put", "x", "--capacity", "1", "--period", "day", "--threshold", "0%")
}

// cliExpect returns a runner of operator commands against server that
// fails the test unless the exit status is wantCode and the output contains
// wantOut, and returns the output.
func cliExpect(t *testing.T, server string) func(wantCode int, wantOut string, args ...string) string {
	return func(wantCode int, wantOut string, args ...string) string {
		t.Helper()
		out, code := cliRun(t, server, args...)
		if code != wantCode || !strings.Contains(out, wantOut) {
			t.Fatalf("budgetd %s: exit %d, want %d; output:\n%s\nwant it to contain %q", strings.Join(args, " "), code, wantCode, out, wantOut)
		}
		return out
	}
}

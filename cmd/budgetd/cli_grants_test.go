package main

import (
	"fmt"
	"github.com/budgetd/budgetd/internal/testenv"
	"strings"
	"testing"
	"time"
)

// TestCLIGrants: budgetd grants add|list|revoke top up a team's month,
// which its decisions use, and refuse what budgetd refuses, on every store
// that keeps grants.
func TestCLIGrants(t *testing.T) {
	stores := map[string]string{"memory": "memory", "postgres": storeURL(t, "BUDGETD_TEST_POSTGRES"), "mysql": testenv.MySQLDatabase(t)}
	for name, url := range stores {
		t.Run(name, func(t *testing.T) {
			server := startBudgetdArgs(t, "--store", url)
			expect := func(wantCode int, wantOut string, args ...string) string {
				t.Helper()
				out, code := cliRun(t, server, args...)
				if code != wantCode || !strings.Contains(out, wantOut) {
					t.Fatalf("budgetd %s: exit %d, want %d; output:\n%s\nwant it to contain %q", strings.Join(args, " "), code, wantCode, out, wantOut)
				}
				return out
			}
			// The PostgreSQL database is shared with other tests: a name of its own.
			limit := fmt.Sprintf("team-spend-%d", time.Now().UnixNano())
			expect(0, limit, "limits", "put", limit, "--capacity", "5000", "--period", "month")
			out := expect(0, "5500", "grants", "add", limit, "team-b", "500.00")
			id := strings.Fields(strings.Split(out, "\n")[1])[0]
			expect(0, id+"  500", "grants", "list", limit, "team-b")
			expect(0, `"grants": "500"`, "check", limit, "team-b", "--json")
			expect(0, "accepted  5400", "fillup", limit, "team-b", "5400")
			expect(0, "5000", "grants", "revoke", limit, "team-b", id)
			expect(1, "grant_not_found", "grants", "revoke", limit, "team-b", id)
			expect(1, "(field amount)", "grants", "add", limit, "team-b", "0")
			expect(1, "limit_not_found", "grants", "add", limit+"-nope", "team-b", "5")
			expect(2, "--expires-at", "grants", "add", limit, "team-b", "5", "--expires-at", "friday")
			expect(0, "deleted", "limits", "delete", limit)
		})
	}
}

// TestCLIGrantsQuiet: budgetd grants add -q prints the grant's id and
// nothing else, so that grant=$(budgetd grants add … -q) names the grant
// that budgetd grants revoke then takes.
func TestCLIGrantsQuiet(t *testing.T) {
	server := startBudgetd(t)
	if out, code := cliRun(t, server, "limits", "put", "team-spend", "--capacity", "5000", "--period", "month"); code != 0 {
		t.Fatalf("limits put: exit %d\n%s", code, out)
	}
	out, code := cliRun(t, server, "grants", "add", "team-spend", "team-b", "500", "-q")
	id := strings.TrimSuffix(out, "\n")
	if code != 0 || id == "" || strings.ContainsAny(id, " \t\n") {
		t.Fatalf("grants add -q: exit %d, printed %q; want the grant's id alone on a line", code, out)
	}
	if out, code := cliRun(t, server, "grants", "list", "team-spend", "team-b", "--json"); code != 0 || !strings.Contains(out, `"id": "`+id+`"`) {
		t.Fatalf("grants list: exit %d; the id %q printed by -q is not the grant's:\n%s", code, id, out)
	}
	if out, code := cliRun(t, server, "grants", "revoke", "team-spend", "team-b", id, "-q"); code != 0 || out != id+"\n" {
		t.Fatalf("grants revoke -q: exit %d, printed %q; want %q", code, out, id+"\n")
	}
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// limitsYAML is the limits file of the apply tests: names carry suffix, so
// that a store shared with other tests keeps them apart.
func limitsYAML(suffix string) string {
	return strings.ReplaceAll(`limits:
  - name: spend-SFX
    capacity: 5000.00
    period: {every: month, tz: Europe/Berlin}
    thresholds: ["80%"]
  - name: rows-SFX
    capacity: 250000
    leak: {amount: 250000, per: 1h}
    history: false
  - name: logins-SFX
    capacity: 5
    window: {length: 1m}
overrides:
  - limit: spend-SFX
    pattern: enterprise-*
    capacity: 50000
envoy:
  - domain: api
    descriptors:
      - entries: [{key: tenant}]
        limit: rows-SFX
        bucket: "{tenant}"
`, "SFX", suffix)
}

// writeFile writes text into a file of t's temporary directory.
func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// applySteps runs the apply cycle on server with the file's names
// suffixed: a dry run writes nothing; apply creates; the same file again
// changes nothing; a change is planned field by field; without --prune
// nothing is deleted. With isolated (a store no other test writes to) it
// also checks that export → apply is a no-op and that --prune deletes.
func applySteps(t *testing.T, server, suffix string, isolated bool) {
	expect := cliExpect(t, server)
	file := writeFile(t, "limits.yaml", limitsYAML(suffix))
	spend := "spend-" + suffix
	if isolated {
		// What earlier runs left in the store goes first.
		expect(0, "", "apply", "-f", file, "--prune")
		expect(0, "deleted", "limits", "delete", spend)
	}

	out := expect(0, "dry run: nothing was written", "apply", "-f", file, "--dry-run")
	for _, want := range []string{"limit " + spend + ": create\n    capacity: 5000", "override enterprise-* of limit " + spend + ": create", "period.tz: Europe/Berlin"} {
		if !strings.Contains(out, want) {
			t.Errorf("the dry run's plan lacks %q:\n%s", want, out)
		}
	}
	expect(1, "limit_not_found", "limits", "get", spend)

	expect(0, "applied", "apply", "-f", file)
	expect(0, "capacity:        5000\n", "limits", "get", spend)
	expect(0, "50000", "overrides", "get", spend, "enterprise-*")
	expect(0, "no changes (4 unchanged)", "apply", "-f", file)

	changed := writeFile(t, "changed.yaml", strings.Replace(strings.Replace(limitsYAML(suffix), "capacity: 5000.00", "capacity: 6000", 1), "tz: Europe/Berlin", "tz: Asia/Tokyo", 1))
	out = expect(0, "dry run", "apply", "-f", changed, "--dry-run")
	if !strings.Contains(out, "limit "+spend+": change\n    capacity: 5000 → 6000\n    period.tz: Europe/Berlin → Asia/Tokyo\n") {
		t.Errorf("the change's plan:\n%s", out)
	}
	expect(0, "Europe/Berlin", "limits", "get", spend)
	expect(0, "plan: 0 to create, 1 to change, 0 to delete, 3 unchanged", "apply", "-f", changed)
	expect(0, "6000", "limits", "get", spend)

	smaller := writeFile(t, "smaller.yaml", fmt.Sprintf("limits:\n  - name: rows-%s\n    capacity: 250000\n    leak: {amount: 250000, per: 1h}\n    history: false\n", suffix))
	expect(0, "no changes (1 unchanged)", "apply", "-f", smaller)
	expect(0, "Asia/Tokyo", "limits", "get", spend)
	if !isolated {
		return
	}
	export := expect(0, "limits:", "limits", "export")
	exported := writeFile(t, "exported.yaml", export)
	expect(0, "no changes (4 unchanged)", "apply", "-f", exported, "--prune")

	out = expect(0, "plan: 0 to create, 0 to change, 2 to delete, 1 unchanged", "apply", "-f", smaller, "--prune")
	for _, want := range []string{"limit " + spend + ": delete", "limit logins-" + suffix + ": delete"} {
		if !strings.Contains(out, want) {
			t.Errorf("the prune's plan lacks %q:\n%s", want, out)
		}
	}
	expect(1, "limit_not_found", "limits", "get", spend)
	expect(0, "limits:\n- name: rows-"+suffix+"\n", "limits", "export")
}

// TestApplyCLI: budgetd apply and limits export against a budgetd on the
// memory store, and a bad file refused whole with its line and field.
func TestApplyCLI(t *testing.T) {
	server := startBudgetd(t)
	applySteps(t, server, "mem", true)

	expect := cliExpect(t, server)
	before := expect(0, "limits:", "limits", "export")
	bad := writeFile(t, "bad.yaml", "limits:\n  - name: new-one\n    capacity: 1\n    leak: {amount: 1, per: 1s}\n  - name: other\n    capacity: 1e3\n    leak: {amount: 1, per: 1s}\n")
	expect(2, "bad.yaml: limits file: line 6: limits[1].capacity:", "apply", "-f", bad)
	unknown := writeFile(t, "unknown.yaml", "limits:\n  - name: new-one\n    capacity: 1\n    leak: {amount: 1, per: 1s}\n    histroy: false\n")
	expect(2, "line 5: limits[0].histroy: unknown field", "apply", "-f", unknown)
	orphan := writeFile(t, "orphan.yaml", "limits:\n  - name: new-one\n    capacity: 1\n    leak: {amount: 1, per: 1s}\noverrides:\n  - limit: nowhere\n    pattern: x\n    capacity: 1\n")
	expect(2, "line 6: overrides[0].limit: no limit \"nowhere\"", "apply", "-f", orphan)
	if after := expect(0, "limits:", "limits", "export"); after != before {
		t.Errorf("a refused file changed budgetd:\n%s\nthen:\n%s", before, after)
	}
	expect(2, "needs -f FILE", "apply")
	expect(2, "no such file", "apply", "-f", filepath.Join(t.TempDir(), "missing.yaml"))

	out := expect(0, `"action": "create"`, "apply", "-f", writeFile(t, "j.json", `{"limits":[{"name":"j","capacity":"1","leak":{"amount":"1","per":"1s"}}]}`), "--json", "--dry-run")
	var plan struct {
		Steps []struct {
			Action, Limit string
		}
		DryRun, Changed bool `json:"-"`
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil || len(plan.Steps) != 1 || plan.Steps[0].Limit != "j" {
		t.Errorf("apply --json: %v\n%s", err, out)
	}
}

// TestApplyOnEveryStore: the apply cycle on every store budgetd serves.
// PostgreSQL runs in a schema of its own, MySQL in a database of its own
// and Redis in a database of its own, so --prune and export see only this
// test's limits; Redis Cluster, which has one database, shared with other
// tests, runs the cycle without them.
func TestApplyOnEveryStore(t *testing.T) {
	stores := map[string]string{
		"postgres": pgSchemaURL(t),
		"mysql":    testenv.MySQLDatabase(t),
		"redis":    strings.TrimSuffix(storeURL(t, "BUDGETD_TEST_REDIS"), "/0") + "/7",
		"cluster":  "redis+cluster://" + storeURL(t, "BUDGETD_TEST_REDIS_CLUSTER"),
	}
	for name, url := range stores {
		t.Run(name, func(t *testing.T) {
			server := startBudgetdArgs(t, "--store", url)
			applySteps(t, server, fmt.Sprintf("%s-%d", name, time.Now().UnixNano()), name != "cluster")
		})
	}
}

// pgSchemaURL makes a schema of its own for t on the PostgreSQL of the
// tests, dropped when t ends, and returns the URL that puts budgetd in it.
func pgSchemaURL(t *testing.T) string {
	t.Helper()
	base := storeURL(t, "BUDGETD_TEST_POSTGRES")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	schema := fmt.Sprintf("limitsfile_%d", time.Now().UnixNano())
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Error(err)
		}
	})
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return base + sep + "search_path=" + schema
}

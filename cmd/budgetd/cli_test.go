package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// startBudgetd runs budgetd (memory store) on a free port for the CLI
// tests and returns its URL.
func startBudgetd(t *testing.T) string {
	t.Helper()
	return startBudgetdArgs(t)
}

// startBudgetdArgs is startBudgetd with more flags (--store URL).
func startBudgetdArgs(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"--addr", "127.0.0.1:0"}, args...), env(nil), &stdout, &stderr)
	}()
	url := waitURL(t, &stdout, done)
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return url
}

// cliRun runs one operator command and returns its output and exit status.
func cliRun(t *testing.T, server string, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	err := run(context.Background(), args, env(map[string]string{"BUDGETD_SERVER": server}), &out, &out)
	code := 0
	msg := ""
	if err != nil {
		code = exitCode(err)
		msg = "budgetd: " + err.Error() + "\n"
	}
	return out.String() + msg, code
}

func TestCLI(t *testing.T) {
	server := startBudgetd(t)
	expect := func(wantCode int, wantOut string, args ...string) string {
		t.Helper()
		out, code := cliRun(t, server, args...)
		if code != wantCode || !strings.Contains(out, wantOut) {
			t.Fatalf("budgetd %s: exit %d, want %d; output:\n%s\nwant it to contain %q", strings.Join(args, " "), code, wantCode, out, wantOut)
		}
		return out
	}
	expect(0, "rule:            5000 per 720h", "limits", "put", "team-spend", "--capacity", "5000", "--leak", "5000/720h")
	expect(0, "rows", "limits", "put", "rows", "--capacity", "10", "--leak", "1/1s", "--history=false")
	out := expect(0, "NAME", "limits", "list")
	if strings.Index(out, "rows") > strings.Index(out, "team-spend") {
		t.Fatalf("limits are not ordered by name:\n%s", out)
	}
	expect(0, `"per": "720h"`, "limits", "get", "team-spend", "--json")

	expect(0, "accepted  4999.99", "fillup", "team-spend", "team/a", "4999.99")
	expect(3, "denied: retry after ", "fillup", "team-spend", "team/a", "0.02")
	out = expect(3, "", "check", "team-spend", "team/a", "0.02", "--json")
	var d map[string]any
	if err := json.Unmarshal([]byte(strings.SplitN(out, "budgetd:", 2)[0]), &d); err != nil || d["accepted"] != false || d["retry_after"] == nil {
		t.Fatalf("check --json: %v\n%s", err, out)
	}
	expect(3, "never fits", "check", "team-spend", "team/a", "6000")
	expect(0, "0.01", "check", "team-spend", "team/a")
	expect(0, "fillup", "history", "team-spend", "team/a")
	expect(0, `"event": "fillup"`, "history", "team-spend", "team/a", "--json")

	// holds needs GET …/buckets/{key}/reservations (SPEC "Seeing the spend").
	if res, err := http.Get(server + "/v1/limits/team-spend/buckets/h/reservations"); err == nil {
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			res, _ := http.Post(server+"/v1/limits/team-spend/buckets/h/reservations", "application/json", strings.NewReader(`{"amount":"7.5","ttl":"1h"}`))
			res.Body.Close()
			expect(0, "active  7.5", "holds", "team-spend", "h")
		}
	}

	// budgetd's problems: detail and field, a non-zero exit.
	expect(1, "limit_not_found", "fillup", "nope", "k", "1")
	expect(2, "(field leak.per)", "limits", "put", "bad", "--capacity", "1", "--leak", "1/0s") // refused before sending
	expect(2, "invalid_amount", "fillup", "rows", "k", "0.0000001")                            // refused before sending
	expect(2, "not a plain decimal", "fillup", "rows", "k", "1e3")
	expect(2, "wrong arguments", "fillup", "rows")
	expect(0, "deleted limit rows", "limits", "delete", "rows")
	expect(1, "limit_not_found", "limits", "get", "rows")

	// An unreachable budgetd.
	out, code := cliRun(t, "http://127.0.0.1:1", "limits", "list", "--timeout", "2s")
	if code != 4 || !strings.Contains(out, "could not be reached") {
		t.Fatalf("unreachable: exit %d\n%s", code, out)
	}
}

// The CLI against a budgetd with access control and HTTPS: --token and
// BUDGETD_TOKEN, --ca and BUDGETD_CA.
func TestCLIWithTokenAndTLS(t *testing.T) {
	dir := t.TempDir()
	admin, adminLine := mintKey(t, "ops", "--scopes", "admin")
	reader, readerLine := mintKey(t, "dash", "--scopes", "read")
	file := filepath.Join(dir, "keys")
	if err := os.WriteFile(file, []byte(adminLine+"\n"+readerLine+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsFiles(t, dir, "cli")
	s := start(t, "--addr", "127.0.0.1:0", "--auth-file", file, "--tls-cert", filepath.Join(dir, "cert.pem"), "--tls-key", filepath.Join(dir, "key.pem"))
	ca := filepath.Join(dir, "ca.pem")
	cli := func(vars map[string]string, args ...string) (string, int) {
		t.Helper()
		vars["BUDGETD_SERVER"] = s.url
		var out bytes.Buffer
		err := run(context.Background(), args, env(vars), &out, &out)
		if err != nil {
			return out.String() + err.Error(), exitCode(err)
		}
		return out.String(), 0
	}
	if out, code := cli(map[string]string{"BUDGETD_TOKEN": admin, "BUDGETD_CA": ca}, "limits", "put", "spend", "--capacity", "10", "--leak", "1/1h"); code != 0 {
		t.Fatalf("admin put: exit %d\n%s", code, out)
	}
	if out, code := cli(map[string]string{"BUDGETD_TOKEN": admin}, "fillup", "spend", "k", "1", "--token", reader, "--ca", ca); code != 1 || !strings.Contains(out, "forbidden") {
		t.Fatalf("reader fillup: exit %d\n%s", code, out)
	}
	if out, code := cli(map[string]string{"BUDGETD_CA": ca}, "check", "spend", "k"); code != 1 || !strings.Contains(out, "unauthorized") {
		t.Fatalf("no token: exit %d\n%s", code, out)
	}
	if out, code := cli(map[string]string{"BUDGETD_TOKEN": reader, "BUDGETD_CA": ca}, "check", "spend", "k", "2"); code != 0 || !strings.Contains(out, "accepted") {
		t.Fatalf("reader check: exit %d\n%s", code, out)
	}
	if out, code := cli(map[string]string{"BUDGETD_TOKEN": admin}, "limits", "list", "--timeout", "5s"); code != 4 || !strings.Contains(out, "certificate") {
		t.Fatalf("an unknown CA: exit %d\n%s", code, out)
	}
}

package main

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The CLI handles both limit kinds end to end against a real budgetd: the
// README's monthly Berlin cap is created, listed and read with when it
// resets; holds are made, committed and released with meta, the hold id
// captured from -q; drains carry meta; problems exit 1 with code and field.
func TestCLIEveryKind(t *testing.T) {
	server := startBudgetd(t)
	expect := func(wantCode int, wantOut string, args ...string) string {
		t.Helper()
		out, code := cliRun(t, server, args...)
		if code != wantCode || !strings.Contains(out, wantOut) {
			t.Fatalf("budgetd %s: exit %d, want %d; output:\n%s\nwant it to contain %q", strings.Join(args, " "), code, wantCode, out, wantOut)
		}
		return out
	}
	expect(0, "per month from day 1, Europe/Berlin", "limits", "put", "team-spend", "--capacity", "5000.00", "--period", "month", "--tz", "Europe/Berlin")
	expect(0, "per week from Wednesday, UTC", "limits", "put", "weekly", "--capacity", "7", "--period", "week", "--start-day", "3")
	expect(0, "10 per 1s", "limits", "put", "rows", "--capacity", "10", "--leak", "10/1s")
	out := expect(0, "team-spend", "limits", "list")
	// Next month's first midnight in Berlin, as budgetd says.
	berlin, _ := time.LoadLocation("Europe/Berlin")
	now := time.Now().In(berlin)
	next := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, berlin).UTC().Format(cliTime)
	if !strings.Contains(out, next) || !strings.Contains(out, "10 per 1s") {
		t.Fatalf("limits list does not say the cap resets at %s:\n%s", next, out)
	}
	out = expect(0, `"every": "month"`, "limits", "get", "team-spend", "--json")
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil || doc["leak"] != nil || doc["capacity"] != "5000" {
		t.Fatalf("limits get --json: %v\n%s", err, out)
	}
	expect(0, next, "limits", "get", "team-spend")
	// Resized, still monthly.
	expect(0, "6000", "limits", "put", "team-spend", "--capacity", "6000", "--period", "month", "--tz", "Europe/Berlin")

	expect(0, next, "fillup", "team-spend", "team-a", "12.37", "--meta", "order=A-1042")
	expect(0, next, "check", "team-spend", "team-a")
	id := strings.TrimSpace(expect(0, "", "reserve", "team-spend", "team-a", "40", "--ttl", "10m", "-q", "--meta", "job=nightly"))
	if id == "" || strings.ContainsAny(id, " \n") {
		t.Fatalf("reserve -q printed %q, not one hold id", id)
	}
	expect(0, id, "holds", "team-spend", "team-a")
	expect(0, "committed  38.12", "commit", id, "38.12", "--meta", "rows=5000")
	expect(1, "reservation_closed", "release", id)
	id2 := strings.TrimSpace(expect(0, "", "reserve", "team-spend", "team-a", "1", "-q"))
	expect(0, "released", "release", id2, "--meta", "why=cancelled")
	expect(0, "10", "drain", "team-spend", "team-a", "10", "--meta", "refund=R-7")
	out = expect(0, "order=A-1042", "history", "team-spend", "team-a")
	for _, want := range []string{"committed", "released", "drain", "reserved"} {
		if !strings.Contains(out, want) {
			t.Errorf("history lacks %s:\n%s", want, out)
		}
	}
	expect(0, `"meta"`, "history", "team-spend", "team-a", "--json")
	expect(3, "denied", "reserve", "team-spend", "team-a", "100000", "-q")

	// Problems: budgetd's code, detail and field, exit 1; input refused
	// before sending, exit 2.
	expect(1, "(field period.tz)", "limits", "put", "bad", "--capacity", "1", "--period", "month", "--tz", "Mars/Olympus")
	expect(2, "(field period.start_day)", "limits", "put", "bad", "--capacity", "1", "--period", "month", "--start-day", "31")
	expect(2, "--period", "limits", "put", "bad", "--capacity", "1")
	expect(2, "--period", "limits", "put", "bad", "--capacity", "1", "--period", "day", "--leak", "1/1s")
	expect(2, "KEY=VALUE", "fillup", "rows", "k", "1", "--meta", "novalue")
	expect(1, "reservation_not_found", "commit", "no-such-hold")

	out = expect(0, "Exit status", "help")
	for _, want := range []string{"--period", "--cert", "reserve", "--store", "5  budgetd's answer was not understood"} {
		if !strings.Contains(out, want) {
			t.Errorf("budgetd help lacks %q", want)
		}
	}
}

// An answer that is not budgetd's document exits 5, not 4 ("unreachable").
func TestCLIAnswerNotUnderstood(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"items":[{"name":"x","capacity":{"not":"a decimal"}}],"next_cursor":null}`))
	}))
	defer srv.Close()
	out, code := cliRun(t, srv.URL, "limits", "list")
	if code != 5 || !strings.Contains(out, "not understood") {
		t.Fatalf("exit %d, want 5:\n%s", code, out)
	}
}

// --cert and --key (and BUDGETD_CERT/BUDGETD_KEY) reach a budgetd that
// requires client certificates.
func TestCLIClientCertificate(t *testing.T) {
	dir := t.TempDir()
	_, clientCert := tlsFiles(t, dir, "mtls")
	certFile, keyFile := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	kb, err := x509.MarshalECPrivateKey(clientCert.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: clientCert.Certificate[0]}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	s := start(t, "--addr", "127.0.0.1:0", "--tls-cert", filepath.Join(dir, "cert.pem"), "--tls-key", filepath.Join(dir, "key.pem"),
		"--tls-client-ca", filepath.Join(dir, "ca.pem"))
	ca := filepath.Join(dir, "ca.pem")
	if out, code := cliRun(t, s.url, "limits", "list", "--ca", ca, "--timeout", "5s"); code != 4 || !strings.Contains(out, "may require a client certificate") || !strings.Contains(out, "--cert") {
		t.Fatalf("without a client certificate: exit %d, want 4 and a hint at --cert\n%s", code, out)
	}
	if out, code := cliRun(t, s.url, "limits", "put", "spend", "--capacity", "10", "--period", "day", "--ca", ca, "--cert", certFile, "--key", keyFile); code != 0 {
		t.Fatalf("with --cert/--key: exit %d\n%s", code, out)
	}
	if out, code := cliRun(t, s.url, "limits", "list", "--ca", ca, "--cert", certFile); code != 2 || !strings.Contains(out, "--key") {
		t.Fatalf("--cert without --key: exit %d\n%s", code, out)
	}
	vars := map[string]string{"BUDGETD_SERVER": s.url, "BUDGETD_CA": ca, "BUDGETD_CERT": certFile, "BUDGETD_KEY": keyFile}
	var out strings.Builder
	if err := run(t.Context(), []string{"check", "spend", "k", "1"}, env(vars), &out, &out); err != nil {
		t.Fatalf("with BUDGETD_CERT/BUDGETD_KEY: %v\n%s", err, out.String())
	}
}

// A 200 that is JSON but not budgetd's document exits 5 with a message, not
// 0 with zero values printed.
func TestCLIWrongShape(t *testing.T) {
	body := ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(body))
	}))
	defer srv.Close()
	for _, b := range []string{`{}`, `{"status":"ok"}`, `{"level":"1","held":"0","remaining":"9","capacity":"10"}`} {
		body = b
		for _, args := range [][]string{{"check", "spend", "k"}, {"fillup", "spend", "k", "1"}, {"limits", "get", "spend"}, {"drain", "spend", "k", "1", "--json"}} {
			out, code := cliRun(t, srv.URL, args...)
			if code != 5 || !strings.Contains(out, "not understood") || !strings.Contains(out, "has no member") {
				t.Errorf("budgetd %s answered %s: exit %d, want 5 and what is missing:\n%s", strings.Join(args, " "), b, code, out)
			}
		}
	}
}

// A 404 (or another 4xx) that is not budgetd's problem document — a proxy,
// a load balancer, another service at --server — exits 5 (not understood),
// as documented, not 1 (budgetd refused the call); budgetd's own 404 stays 1.
func TestCLIForeignNotFound(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NotFound(w, r)
	}))
	defer srv.Close()
	for _, args := range [][]string{{"limits", "get", "spend"}, {"fillup", "spend", "k", "1"}, {"limits", "list"}} {
		out, code := cliRun(t, srv.URL, args...)
		if code != 5 || !strings.Contains(out, "not budgetd") || !strings.Contains(out, "HTTP 404") || !strings.Contains(out, "404 page not found") {
			t.Errorf("budgetd %s against a foreign 404: exit %d, want 5:\n%s", strings.Join(args, " "), code, out)
		}
	}
	server := startBudgetd(t)
	if out, code := cliRun(t, server, "limits", "get", "nope"); code != 1 || !strings.Contains(out, "limit_not_found") {
		t.Errorf("budgetd's own 404: exit %d, want 1:\n%s", code, out)
	}
}

// Waits print as a Go duration with the instant they end, not as
// "205855.759798s".
func TestCLIWait(t *testing.T) {
	now := time.Date(2026, 11, 28, 15, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{
		205855759798 * time.Microsecond: "57h10m55.76s (at 2026-12-01T00:10:56Z)",
		518400 * time.Millisecond:       "8m38.4s (at 2026-11-28T15:08:39Z)",
		1001 * time.Millisecond:         "1.01s (at 2026-11-28T15:00:02Z)",
		250 * time.Microsecond:          "250µs (at 2026-11-28T15:00:01Z)",
		2 * time.Second:                 "2s (at 2026-11-28T15:00:02Z)",
	} {
		if got := wait(d, now); got != want {
			t.Errorf("wait(%v) = %q, want %q", d, got, want)
		}
	}
	server := startBudgetd(t)
	expect := cliExpect(t, server)
	expect(0, "", "limits", "put", "spend", "--capacity", "5000", "--leak", "5000/720h")
	expect(0, "accepted", "fillup", "spend", "k", "5000")
	out := expect(3, "denied: retry after 8m38.", "fillup", "spend", "k", "1")
	if !strings.Contains(out, " (at 20") || strings.Contains(out, "518.") {
		t.Errorf("a denial's wait:\n%s", out)
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer that run may write while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var servingRE = regexp.MustCompile(`serving on (https?://\S+)`)

// waitURL waits for run's start-up line and returns the address it serves.
func waitURL(t *testing.T, out interface{ String() string }, done <-chan error) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if m := servingRE.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
		select {
		case err := <-done:
			t.Fatalf("run returned before serving: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("no start-up line in %q", out.String())
	return ""
}

// stopRun cancels a run started with done as its result and waits for it
// to return nil.
func stopRun(t *testing.T, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not stop")
	}
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestRunServesAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--addr", "127.0.0.1:0"}, env(map[string]string{"BUDGETD_ADDR": "127.0.0.1:1"}), &stdout, &stderr)
	}()
	url := waitURL(t, &stdout, done)
	if !strings.Contains(stdout.String(), "memory store (state does not survive a restart)") {
		t.Fatalf("start-up line does not name the store: %q", stdout.String())
	}
	get := func(path string) (int, string) {
		res, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz %d", code)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Fatalf("/readyz %d", code)
	}
	req, _ := http.NewRequest("PUT", url+"/v1/limits/e2e", strings.NewReader(`{"capacity":"2","leak":{"amount":"1","per":"1h"}}`))
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 200 {
		t.Fatalf("PUT limit: %v %v", res, err)
	}
	codes := []int{}
	for i := 0; i < 3; i++ {
		res, err := http.Post(url+"/v1/limits/e2e/buckets/k/fillup", "application/json", strings.NewReader(`{"cost":"1"}`))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		codes = append(codes, res.StatusCode)
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
		t.Fatalf("fillups answered %v", codes)
	}
	stopRun(t, cancel, done)
	if !strings.Contains(stdout.String(), "budgetd: stopped") {
		t.Fatalf("no shutdown line: %q", stdout.String())
	}
}

func TestConfig(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, env(nil), &out, io.Discard); err != nil {
		t.Fatalf("--help: %v", err)
	}
	for _, o := range options {
		if !strings.Contains(out.String(), "--"+o.flag) || !strings.Contains(out.String(), o.env) {
			t.Errorf("--help does not list --%s / %s", o.flag, o.env)
		}
	}
	cfg, _, err := parseConfig([]string{"--max-ttl", "2h"}, env(map[string]string{"BUDGETD_MAX_TTL": "1h", "BUDGETD_ADDR": ":9999"}), io.Discard)
	if err != nil || cfg.maxTTL != 2*time.Hour || cfg.addr != ":9999" || cfg.store != "memory" {
		t.Fatalf("flag over env over default: %+v %v", cfg, err)
	}
	for _, args := range [][]string{{"--max-ttl", "soon"}, {"--max-ttl", "10ms"}, {"--nope"}, {"--redis-eviction-check", "maybe"}, {"serve", "now"}} {
		err := run(context.Background(), args, env(nil), io.Discard, io.Discard)
		var ue usageError
		if !errors.As(err, &ue) || exitCode(err) != 2 {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
	if err := run(context.Background(), []string{"--store", "mysql://x"}, env(nil), io.Discard, io.Discard); err == nil {
		t.Error("an unknown store URL started")
	}
}

// TestSIGTERM builds budgetd, starts it and stops it with SIGTERM: it must
// finish in-flight work and exit 0.
func TestSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "budgetd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "BUDGETD_STORE=memory")
	stdout, _ := cmd.StdoutPipe()
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || !servingRE.MatchString(lines.Text()) {
		t.Fatalf("start-up line %q, stderr %q", lines.Text(), stderr.String())
	}
	url := servingRE.FindStringSubmatch(lines.Text())[1]
	if res, err := http.Get(url + "/healthz"); err != nil || res.StatusCode != 200 {
		t.Fatalf("/healthz: %v %v", res, err)
	}
	// The warning follows the start-up line on another pipe: give it time.
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(stderr.String(), "lost when budgetd stops"); {
		if time.Now().After(deadline) {
			t.Fatalf("no warning that memory state is lost: %q", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v (stderr %q)", err, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("budgetd did not exit after SIGTERM")
	}
}

// TestHelpAgreesWithREADME: --help says what the code does and the README
// says: migrate applies the migrations of both SQL stores, --max-conns
// closes a connection when all are taken, and every flag of the README's
// table has the variable and default --help gives it.
func TestHelpAgreesWithREADME(t *testing.T) {
	var help bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, env(nil), &help, io.Discard); err != nil {
		t.Fatal(err)
	}
	migrateLine := regexp.MustCompile(`(?m)^  budgetd migrate .*$`).FindString(help.String())
	for _, store := range []string{"PostgreSQL", "MySQL"} {
		if !strings.Contains(migrateLine, store) {
			t.Errorf("--help on migrate does not name %s: %q", store, migrateLine)
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][2]string{} // flag: env, default as the README's table gives them
	for _, m := range regexp.MustCompile("(?m)^\\| (`--[^|]+) \\| ([^|]+) \\| ([^|]+) \\|").FindAllStringSubmatch(string(readme), -1) {
		flags, envs := strings.Split(m[1], ", "), strings.Split(m[2], ", ")
		for i, f := range flags {
			if i < len(envs) {
				rows[strings.Trim(f, "`")] = [2]string{strings.Trim(envs[i], "`"), strings.Trim(m[3], "`")}
			}
		}
	}
	if len(rows) < len(options)/2 {
		t.Fatalf("README's flag table not found: %d rows", len(rows))
	}
	for _, o := range options {
		row, ok := rows["--"+o.flag]
		if o.env == "" {
			continue
		}
		def := o.def
		if def == "" {
			def = "none"
		}
		if !ok || row != [2]string{o.env, def} {
			t.Errorf("README's row for --%s: %q, --help: %s %q", o.flag, row, o.env, def)
		}
		if o.flag == "max-conns" && !strings.Contains(o.help, "idle longest is closed") {
			t.Errorf("--help on --max-conns does not say that the connection idle longest is closed: %q", o.help)
		}
	}
}

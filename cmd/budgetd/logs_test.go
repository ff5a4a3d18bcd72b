package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// serveAndStop runs budgetd on the memory store with args, makes one
// request, stops it and returns what it wrote on stdout and stderr.
func serveAndStop(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errs syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"--addr", "127.0.0.1:0"}, args...), env(nil), &out, &errs)
	}()
	url := waitURL(t, &out, done)
	res, err := http.Get(url + "/v1/limits/nothing-here")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	stopRun(t, cancel, done)
	return out.String(), errs.String()
}

// lines is s cut at its newlines; s must end with one.
func lines(t *testing.T, s string) []string {
	t.Helper()
	if !strings.HasSuffix(s, "\n") {
		t.Fatalf("output does not end with a newline: %q", s)
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// TestEveryLineThroughTheLogger: budgetd serving writes nothing but log
// records, in the format of --log-format, on stdout (the start-up and stop
// lines) as on stderr (the log and the access log); a log shipper that
// reads both streams parses every line.
func TestEveryLineThroughTheLogger(t *testing.T) {
	textRE := regexp.MustCompile(`^time=\S+ level=(DEBUG|INFO|WARN|ERROR) msg=`)
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			stdout, stderr := serveAndStop(t, "--log-format", format, "--log-level", "debug")
			var msgs []string
			for _, line := range append(lines(t, stdout), lines(t, stderr)...) {
				if format == "text" {
					if !textRE.MatchString(line) {
						t.Errorf("not a text log record: %q", line)
					}
					continue
				}
				var rec struct{ Time, Level, Msg string }
				if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Time == "" || rec.Level == "" || rec.Msg == "" {
					t.Errorf("not a JSON log record (%v): %q", err, line)
				}
				msgs = append(msgs, rec.Msg)
			}
			all := strings.Join(msgs, "\n")
			for _, want := range []string{"budgetd: serving on http://", "authentication is off", "request", "shutting down", "budgetd: stopped"} {
				if format == "json" && !strings.Contains(all, want) {
					t.Errorf("no record %q among\n%s", want, all)
				}
			}
		})
	}
}

// TestStartLineWhateverLogLevel: the start-up and stop lines are written
// on stdout also when --log-level leaves out INFO, since scripts wait for
// the first to learn where budgetd serves; stderr keeps the level.
func TestStartLineWhateverLogLevel(t *testing.T) {
	stdout, stderr := serveAndStop(t, "--log-level", "error")
	if !strings.Contains(stdout, "level=INFO") || !strings.Contains(stdout, "budgetd: stopped") {
		t.Errorf("stdout with --log-level error: %q", stdout)
	}
	if stderr != "" {
		t.Errorf("stderr with --log-level error: %q", stderr)
	}
}

// TestLogDurationsWithUnit: a duration in a log record is written with its
// unit, as time.Duration.String writes it, in JSON as in text (where slog
// wrote it so already), also inside a group; other values are left alone.
func TestLogDurationsWithUnit(t *testing.T) {
	for format, want := range map[string]string{
		"json": `"msg":"m","wait":"1.5ms","n":1500000,"g":{"ttl":"2h0m0s","neg":"-3s"}}`,
		"text": ` msg=m wait=1.5ms n=1500000 g.ttl=2h0m0s g.neg=-3s`,
	} {
		var b bytes.Buffer
		log := newLogger(config{logFormat: format, logLevel: "info"}, &b)
		log.Info("m", "wait", 1500*time.Microsecond, "n", 1500000, slog.Group("g", "ttl", 2*time.Hour, "neg", -3*time.Second))
		if got := strings.TrimSuffix(b.String(), "\n"); !strings.HasSuffix(got, want) {
			t.Errorf("%s: %s\nwant it to end with %s", format, got, want)
		}
	}
}

// TestShutdownLineDurations: budgetd's own record of its shutdown says
// --shutdown-delay and --shutdown-timeout with their unit in JSON.
func TestShutdownLineDurations(t *testing.T) {
	_, stderr := serveAndStop(t, "--log-format", "json", "--shutdown-timeout", "1m30s")
	for _, line := range lines(t, stderr) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		if rec["msg"] == "shutting down" {
			if rec["delay"] != "0s" || rec["timeout"] != "1m30s" {
				t.Errorf("shutdown record %s: want delay 0s and timeout 1m30s", line)
			}
			return
		}
	}
	t.Fatalf("no shutdown record in\n%s", stderr)
}

// TestStartFailureLogged: once the log is configured, the error budgetd
// stops with is a record of it (here JSON), with the exit status it had,
// and main does not print it again; an error before (a bad flag) is
// printed as before.
func TestStartFailureLogged(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	var stdout, stderr bytes.Buffer
	err = run(context.Background(), []string{"--addr", busy.Addr().String(), "--log-format", "json"}, env(nil), &stdout, &stderr)
	if err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), "listen on "+busy.Addr().String()) {
		t.Fatalf("run on a busy address: %v (exit %d)", err, exitCode(err))
	}
	var failed bool
	for _, line := range lines(t, stderr.String()) {
		var rec struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("not a JSON log record (%v): %q", err, line)
		}
		failed = failed || rec.Level == "ERROR" && rec.Msg == "budgetd: "+err.Error()
	}
	if !failed {
		t.Errorf("no ERROR record of %q in\n%s", err, stderr.String())
	}
	var printed bytes.Buffer
	if code := fail(err, &printed); code != 1 || printed.Len() != 0 {
		t.Errorf("main on a logged error: exit %d, printed %q", code, printed.String())
	}
	err = run(context.Background(), []string{"--max-ttl", "soon", "--log-format", "json"}, env(nil), io.Discard, io.Discard)
	if code := fail(err, &printed); code != 2 || !strings.HasPrefix(printed.String(), "budgetd: --max-ttl") {
		t.Errorf("main on a bad flag: exit %d, printed %q", code, printed.String())
	}
}

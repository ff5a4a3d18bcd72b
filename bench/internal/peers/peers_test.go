package peers

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The samples in testdata are wrk 4.1.0's real output (Debian's wrk),
// captured on this project's machine: against budgetd, gubernator and the
// echo handler, a run answered 404 throughout, and one with more
// connections than budgetd allows per address (read errors).
func TestParse(t *testing.T) {
	cases := []struct {
		file string
		want Run
	}{
		{"budgetd-hot.txt", Run{Requests: 110537, Seconds: 5.04, RPS: 21942.15, P50: 3.07, P75: 6.70, P90: 11.32, P99: 26.55, MaxLatency: 90.66}},
		{"gubernator-spread.txt", Run{Requests: 28914, Seconds: 5.07, RPS: 5697.67, P50: 9.96, P75: 14.53, P90: 21.33, P99: 73.58, MaxLatency: 130.87}},
		{"echo-404.txt", Run{Requests: 48442, Seconds: 2.01, RPS: 24156.44, P50: 0.246, P75: 0.640, P90: 2.58, P99: 8.84, MaxLatency: 36.22, Non2xx: 48442}},
		{"budgetd-1100-conns.txt", Run{Requests: 42936, Seconds: 2.08, RPS: 20597.86, P50: 48.12, P75: 89.58, P90: 133.95, P99: 220.10, MaxLatency: 263.20, SocketErrors: 3531}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			got, err := Parse(readSample(t, c.file))
			if err != nil {
				t.Fatal(err)
			}
			if !sameRun(got, c.want) {
				t.Errorf("Parse =\n%+v\nwant\n%+v", got, c.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	full := readSample(t, "budgetd-hot.txt")
	cases := map[string]string{
		"usage text":              readSample(t, "usage.txt"),
		"no latency distribution": cutLines(full, "50%", "75%", "90%", "99%", "Latency Distribution"),
		"no Requests/sec":         cutLines(full, "Requests/sec:"),
		"no request count":        cutLines(full, "requests in"),
		"time without unit":       strings.Replace(full, "3.07ms", "3.07", 1),
		"socket errors garbled":   strings.Replace(full, "Requests/sec:", "  Socket errors: connect x\nRequests/sec:", 1),
	}
	for name, out := range cases {
		if r, err := Parse(out); err == nil {
			t.Errorf("%s: Parse = %+v, want an error", name, r)
		}
	}
}

func TestParseTime(t *testing.T) {
	for in, want := range map[string]float64{"850.00us": 0.85, "3.07ms": 3.07, "1.02s": 1020, "2.00m": 120000, "1.00h": 3600000} {
		got, err := parseTime(in)
		if err != nil || math.Abs(got-want) > 1e-9 {
			t.Errorf("parseTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

// testdata/run is a results directory of a real run of scripts/bench-peers
// (2 rounds of 2 s, --keep).
func TestCollectAndMarkdown(t *testing.T) {
	r, err := Collect(filepath.Join("testdata", "run"))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Cases) != 6 || len(r.Failures) != 0 || len(r.Skipped) != 0 {
		t.Fatalf("cases %d, failures %v, skipped %v; want 6 cases", len(r.Cases), r.Failures, r.Skipped)
	}
	bd, ec := r.Case("budgetd", "hot"), r.Case("echo", "hot")
	// budgetd-hot-{1,2}.txt: 14662.88 and 6833.38 req/s, p99 27.62 and
	// 173.87 ms; echo-hot-{1,2}.txt: 14767.93 and 8619.51, p99 102.96 and
	// 108.51.
	if len(bd.Rounds) != 2 || bd.Rounds[0].Round != 1 || bd.Rounds[0].RPS != 14662.88 || bd.Rounds[1].RPS != 6833.38 {
		t.Fatalf("budgetd hot rounds = %+v", bd.Rounds)
	}
	if !near(bd.Median.RPS, 10748.13) || !near(bd.Median.P99, 100.745) || !near(ec.Median.RPS, 11693.72) || !near(ec.Median.P99, 105.735) {
		t.Errorf("medians: budgetd %+v, echo %+v", bd.Median, ec.Median)
	}

	md := Markdown(r)
	for _, want := range []string{
		BeginMarker, EndMarker,
		"| hot key | 10748 | 11694 | ",
		"**0.92**",                         // 10748.13 / 11693.72
		"hot key 0.99, 0.79 (median 0.89)", // round by round
		"| hot key: throughput ≥ 0.9x the echo handler | 0.92x | met |",
		"| hot key: p99 ≤ 1.3x the echo handler's | 0.95x (100.75 ms vs 105.73 ms) | met |",
		"| CPUs (nproc) | 2 |",
		"wrk -t2 -c64 -d2s --latency -s bench/peers/gub_rand.lua http://127.0.0.1:PORT/v1/GetRateLimits",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the section lacks %q:\n%s", want, md)
		}
	}

	// Through the results file, as bench/report reads it: the same section.
	path := filepath.Join(t.TempDir(), "peers.json")
	if err := r.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := Markdown(back); got != md {
		t.Errorf("the section from peers.json differs:\n%s\nwant\n%s", got, md)
	}
}

func TestCollectSkippedAndUnreadable(t *testing.T) {
	dir := t.TempDir()
	must(t, os.CopyFS(dir, os.DirFS(filepath.Join("testdata", "run"))))
	for _, f := range []string{"gubernator-hot-1.txt", "gubernator-hot-2.txt", "gubernator-spread-1.txt", "gubernator-spread-2.txt"} {
		must(t, os.Remove(filepath.Join(dir, "wrk", f)))
	}
	must(t, os.WriteFile(filepath.Join(dir, "skipped-gubernator.txt"), []byte("go install failed: proxy refused\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "wrk", "echo-spread-2.txt"), []byte("unable to connect to 127.0.0.1:1 Connection refused\n"), 0o644))
	r, err := Collect(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r.Skipped["gubernator"] != "go install failed: proxy refused" || len(r.Failures) != 1 || len(r.Case("echo", "spread").Rounds) != 1 {
		t.Fatalf("skipped %v, failures %v", r.Skipped, r.Failures)
	}
	md := Markdown(r)
	for _, want := range []string{
		"gubernator was not measured: go install failed: proxy refused",
		"| hot key: throughput ≥ 4x gubernator | —x | not measured |",
		"echo-spread-2.txt: wrk: no request count",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the section lacks %q:\n%s", want, md)
		}
	}
}

func TestSplice(t *testing.T) {
	doc := "# Benchmarks\n\n## Results\n\ntable\n\n## Targets\n\n| t |\n\n## Calendar periods\n\nmore\n"
	one := Splice(doc, BeginMarker+"\nfirst\n"+EndMarker+"\n")
	want := "# Benchmarks\n\n## Results\n\ntable\n\n## Targets\n\n| t |\n\n" + BeginMarker + "\nfirst\n" + EndMarker + "\n\n## Calendar periods\n\nmore\n"
	if one != want {
		t.Fatalf("first splice:\n%q\nwant\n%q", one, want)
	}
	two := Splice(one, BeginMarker+"\nsecond\n"+EndMarker+"\n")
	if two != strings.Replace(want, "first", "second", 1) {
		t.Fatalf("second splice replaced the wrong text:\n%q", two)
	}
	if got := Splice("", "s\n"); got != "s\n" {
		t.Errorf("into an empty file: %q", got)
	}
	if got := Splice("# Other\ntext", "s\n"); got != "# Other\ntext\n\ns\n" {
		t.Errorf("without targets: %q", got)
	}
}

func readSample(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "samples", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// cutLines drops the lines containing any of subs.
func cutLines(s string, subs ...string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		drop := false
		for _, sub := range subs {
			drop = drop || strings.Contains(l, sub)
		}
		if !drop {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

func sameRun(a, b Run) bool {
	return a.Requests == b.Requests && near(a.Seconds, b.Seconds) && near(a.RPS, b.RPS) && near(a.P50, b.P50) &&
		near(a.P75, b.P75) && near(a.P90, b.P90) && near(a.P99, b.P99) && near(a.MaxLatency, b.MaxLatency) &&
		a.Non2xx == b.Non2xx && a.SocketErrors == b.SocketErrors
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6*math.Max(1, math.Abs(b)) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The commands of a run are marked as a record, not an example that
// docs/examples_test.go runs.
func TestCommandsMarkedNoRun(t *testing.T) {
	md := Markdown(&Results{Commands: []string{"budgetd --addr 127.0.0.1:PORT"}})
	if !strings.Contains(md, CommandsNoRun+"\n```\nbudgetd --addr 127.0.0.1:PORT\n```") {
		t.Errorf("no no-run marker right before the commands:\n%s", md)
	}
}

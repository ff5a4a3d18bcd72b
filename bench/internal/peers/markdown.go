package peers

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The markers around the section in docs/benchmarks.md: Splice replaces
// what lies between them.
const (
	BeginMarker = "<!-- peers: begin (scripts/bench-peers writes this section; docs/peers.json holds its figures) -->"
	EndMarker   = "<!-- peers: end -->"
)

// The targets (issue 28) for budgetd in its default configuration:
// throughput at least 0.9x the echo handler's and 4x gubernator's, p99 at
// most 1.3x the echo handler's.
const (
	TargetEcho       = 0.9
	TargetGubernator = 4.0
	TargetP99Echo    = 1.3
)

// loadName says what each load is in the tables.
var loadName = map[string]string{"hot": "hot key", "spread": "100,000 keys"}

// Markdown is the section of docs/benchmarks.md for r, markers included.
func Markdown(r *Results) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	m := r.Machine
	w("%s\n## Peers under wrk: budgetd as users start it\n\n", BeginMarker)
	w("Written by `scripts/bench-peers` on %s (figures in `docs/peers.json`); ", m["date"])
	w("`scripts/bench` keeps this section when it rewrites the report.")
	if m["quick"] == "true" {
		w(" **A `--quick` run**: %s rounds of %s — indicative only.", m["rounds"], m["duration"])
	}
	w("\n\nbudgetd in its **default configuration**, started the way the README starts it (memory store, access log on at ")
	w("level info, text format; only the port is given, `--addr`), its stderr going to a file; ")
	w("the least an HTTP JSON service can do, `bench/baseline --mode echo` (echo/v4, binds the same body, answers a fixed decision); ")
	w("and gubernator %s, one node, through its HTTP gateway (`/v1/GetRateLimits`, leaky bucket). ", orDash(m["gubernator"]))
	w("Each is driven by `wrk -t2 -c64 -d%s --latency` with the scripts in `bench/peers/`: ", m["duration"])
	w("one Fillup of cost 1 per request (budgetd's limit `bench` holds 10^12 and leaks 1 per 87600h, history off), ")
	w("on one hot key or spread uniformly over 100,000 keys. ")
	w("%s rounds; in each round every system runs each load once, the order rotating from round to round; the tables show medians. ", m["rounds"])
	w("wrk and the service share the machine's CPUs, so the figures to read are the ratios, measured side by side in one run.\n\n")

	w("| machine | |\n| --- | --- |\n")
	for _, k := range []string{"nproc", "cpu", "ram", "kernel", "go", "wrk", "gubernator", "commit", "load", "load_end"} {
		if v := m[k]; v != "" {
			name := map[string]string{"nproc": "CPUs (nproc)", "cpu": "CPU model", "ram": "RAM", "kernel": "kernel", "go": "Go",
				"wrk": "wrk", "gubernator": "gubernator", "commit": "budgetd commit", "load": "load average at start", "load_end": "load average at end"}[k]
			w("| %s | %s |\n", name, v)
		}
	}
	if n := m["note"]; n != "" {
		w("\n%s\n", n)
	}

	w("\n| load | budgetd req/s | echo req/s | gubernator req/s | **budgetd / echo** | **budgetd / gubernator** | ")
	w("budgetd p50 / p99 ms | echo p50 / p99 ms | gubernator p50 / p99 ms | **p99 budgetd / echo** | errors |\n")
	w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, load := range Loads {
		bd, ec, gb := r.median("budgetd", load), r.median("echo", load), r.median("gubernator", load)
		w("| %s | %s | %s | %s | **%s** | **%s** | %s / %s | %s / %s | %s / %s | **%s** | %d |\n", loadName[load],
			f0(bd.RPS), f0(ec.RPS), f0(gb.RPS), f2(bd.RPS/ec.RPS), f2(bd.RPS/gb.RPS),
			f2(bd.P50), f2(bd.P99), f2(ec.P50), f2(ec.P99), f2(gb.P50), f2(gb.P99), f2(bd.P99/ec.P99),
			bd.Errors+ec.Errors+gb.Errors)
	}
	for _, sys := range Systems {
		if why, ok := r.Skipped[sys]; ok {
			w("\n%s was not measured: %s\n", sys, why)
		}
	}

	var perRound []string
	for _, load := range Loads {
		perRound = append(perRound, loadName[load]+" "+r.roundRatios(load))
	}
	w("\nbudgetd / echo throughput round by round: %s.\n", strings.Join(perRound, "; "))
	w("\n| target (issue 28, default configuration) | measured | |\n| --- | --- | --- |\n")
	for _, load := range Loads {
		bd, ec := r.median("budgetd", load), r.median("echo", load)
		v := bd.RPS / ec.RPS
		w("| %s: throughput ≥ %gx the echo handler | %sx | %s |\n", loadName[load], TargetEcho, f2(v), verdict(v >= TargetEcho, v))
	}
	for _, load := range Loads {
		bd, gb := r.median("budgetd", load), r.median("gubernator", load)
		v := bd.RPS / gb.RPS
		w("| %s: throughput ≥ %gx gubernator | %sx | %s |\n", loadName[load], TargetGubernator, f2(v), verdict(v >= TargetGubernator, v))
	}
	for _, load := range Loads {
		bd, ec := r.median("budgetd", load), r.median("echo", load)
		v := bd.P99 / ec.P99
		w("| %s: p99 ≤ %gx the echo handler's | %sx (%s ms vs %s ms) | %s |\n", loadName[load], TargetP99Echo, f2(v), f2(bd.P99), f2(ec.P99), verdict(v <= TargetP99Echo, v))
	}
	if len(r.Failures) > 0 {
		w("\nwrk outputs that could not be read:\n\n```\n%s\n```\n", strings.Join(r.Failures, "\n"))
	}
	w("\nTo reproduce: `scripts/install-deps` (installs wrk), then `scripts/bench-peers`")
	if m["quick"] == "true" {
		w(" --quick")
	}
	w(" (see `scripts/bench-peers --help`). What this run ran, in order (ports chosen at random on 127.0.0.1; ")
	// The commands are a record of this run, not an example to run: docs/examples_test.go skips them by the marker.
	w("the wrk commands once each, every round ran them again):\n\n%s\n```\n%s\n```\n%s\n", CommandsNoRun,
		strings.Join(r.Commands, "\n"), EndMarker)
	return b.String()
}

// median is the medians of a case, NaN when it was not measured.
func (r *Results) median(system, load string) MedianValues {
	if c := r.Case(system, load); c != nil {
		return c.Median
	}
	return MedianValues{RPS: math.NaN(), P50: math.NaN(), P99: math.NaN()}
}

// roundRatios lists budgetd/echo throughput round by round, and their
// median.
func (r *Results) roundRatios(load string) string {
	bd, ec := r.Case("budgetd", load), r.Case("echo", load)
	if bd == nil || ec == nil {
		return "—"
	}
	var parts []string
	var v []float64
	for _, rr := range bd.Rounds {
		e, ok := ec.round(rr.Round)
		if !ok || e.RPS == 0 {
			continue
		}
		v = append(v, rr.RPS/e.RPS)
		parts = append(parts, f2(rr.RPS/e.RPS))
	}
	if len(v) == 0 {
		return "—"
	}
	return strings.Join(parts, ", ") + " (median " + f2(median(v)) + ")"
}

// Splice puts section into doc: in place of the section between the
// markers, or else before the heading that follows "## Targets" (beside the
// main table), or else at the end.
func Splice(doc, section string) string {
	section = strings.TrimRight(section, "\n") + "\n"
	if i := strings.Index(doc, BeginMarker); i >= 0 {
		if j := strings.Index(doc[i:], EndMarker); j >= 0 {
			rest := strings.TrimPrefix(doc[i+j+len(EndMarker):], "\n")
			return doc[:i] + section + rest
		}
	}
	if t := strings.Index(doc, "\n## Targets"); t >= 0 {
		if h := strings.Index(doc[t+1:], "\n## "); h >= 0 {
			at := t + 1 + h + 1
			return doc[:at] + section + "\n" + doc[at:]
		}
	}
	if doc != "" && !strings.HasSuffix(doc, "\n") {
		doc += "\n"
	}
	if doc != "" {
		doc += "\n"
	}
	return doc + section
}

// whyMissed is the hand-written section of docs/benchmarks.md (kept from
// bench/NOTES.md) that gives the measured reason for a missed target.
const whyMissed = "#the-default-configuration-under-wrk-against-an-echo-handler-and-gubernator"

func verdict(ok bool, v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "not measured"
	case ok:
		return "met"
	}
	return "**missed** ([why](" + whyMissed + "))"
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func f0(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

func f2(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// CommandsNoRun marks the generated list of commands a run of
// scripts/bench-peers ran as a record, not an example that
// docs/examples_test.go should run.
const CommandsNoRun = "<!-- no-run: a record of what scripts/bench-peers ran: budgetd, an echo handler and gubernator under wrk on the ports of that run -->"

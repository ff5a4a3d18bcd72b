// Command report turns the results scripts/bench collected into
// docs/benchmarks.md and a grouped bar chart, docs/benchmarks.svg. With
// --peers it keeps the section scripts/bench-peers writes (budgetd, an echo
// handler and gubernator under wrk), rendered from that script's results
// file.
//
//	report --results DIR --md docs/benchmarks.md --svg docs/benchmarks.svg [--notes bench/NOTES.md] [--peers docs/peers.json]
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"html"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/budgetd/budgetd/bench/internal/peers"
)

// run is the part of budgetload's --json summary the report reads.
type run struct {
	Throughput float64 `json:"ops_per_second"`
	Errors     uint64  `json:"errors"`
	Ops        uint64  `json:"ops"`
	Latency    struct {
		P50  float64 `json:"p50_ms"`
		P99  float64 `json:"p99_ms"`
		P999 float64 `json:"p999_ms"`
	} `json:"latency"`
	Verify *struct {
		OK      bool   `json:"ok"`
		Skipped string `json:"skipped"`
		Checked int    `json:"checked"`
		Keys    int    `json:"keys"`
	} `json:"verify"`
	cpu *cpuSample // from the .cpu file beside the run's JSON, when scripts/bench wrote one
}

// cpuSample is what the service, the store and the load tool used of the
// CPUs over a run's measured window (scripts/bench's cpu_window).
type cpuSample struct {
	service, store, load float64 // seconds of CPU
	seconds              float64 // the window
}

// readCPU reads a .cpu file ("service=TICKS" … "hz=N"); nil when absent or
// incomplete.
func readCPU(path string) *cpuSample {
	v := map[string]float64{}
	for _, line := range strings.Split(readText(path), "\n") {
		k, x, ok := strings.Cut(line, "=")
		if f, err := strconv.ParseFloat(x, 64); ok && err == nil {
			v[k] = f
		}
	}
	if v["hz"] <= 0 || v["seconds"] <= 0 || v["service"] < 0 || v["store"] < 0 || v["load"] < 0 {
		return nil // incomplete, or a process was gone at the second sample
	}
	return &cpuSample{service: v["service"] / v["hz"], store: v["store"] / v["hz"], load: v["load"] / v["hz"], seconds: v["seconds"]}
}

// cpuPerOp is the median over the runs of each part's CPU per operation, in
// µs (NaN where no run was sampled).
func (s series) cpuPerOp() (service, store, load float64) {
	var sv, st, ld []float64
	for _, r := range s {
		if r.cpu == nil || r.Throughput <= 0 {
			continue
		}
		ops := r.Throughput * r.cpu.seconds
		sv, st, ld = append(sv, r.cpu.service/ops*1e6), append(st, r.cpu.store/ops*1e6), append(ld, r.cpu.load/ops*1e6)
	}
	return median(sv), median(st), median(ld)
}

// series is several runs of one case.
type series []run

func (s series) median(f func(run) float64) float64 {
	v := make([]float64, len(s))
	for i, r := range s {
		v[i] = f(r)
	}
	return median(v)
}

// median is the median of v (which it sorts), NaN for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func (s series) tput() float64 { return s.median(func(r run) float64 { return r.Throughput }) }
func (s series) p50() float64  { return s.median(func(r run) float64 { return r.Latency.P50 }) }
func (s series) p99() float64  { return s.median(func(r run) float64 { return r.Latency.P99 }) }
func (s series) errors() (n uint64) {
	for _, r := range s {
		n += r.Errors
	}
	return n
}

// verdict says how verify went over the runs.
func (s series) verdict() string {
	ok, checked := 0, 0
	for _, r := range s {
		if r.Verify == nil || r.Verify.Skipped != "" {
			continue
		}
		checked++
		if r.Verify.OK {
			ok++
		}
	}
	switch {
	case checked == 0:
		return "—"
	case ok == checked:
		return fmt.Sprintf("ok ×%d", ok)
	}
	return fmt.Sprintf("**FAILED** %d of %d", checked-ok, checked)
}

func load(dir, prefix string) series {
	var s series
	files, _ := filepath.Glob(filepath.Join(dir, prefix+"-*.json"))
	slices.Sort(files)
	for _, f := range files {
		if r, ok := readRun(f); ok {
			s = append(s, r)
		}
	}
	return s
}

// readRun is the run of one budgetload --json file (with its .cpu beside
// it); false when it is missing, unreadable or did nothing.
func readRun(f string) (run, bool) {
	b, err := os.ReadFile(f)
	if err != nil {
		return run{}, false
	}
	var r run
	if json.Unmarshal(b, &r) != nil || r.Ops == 0 {
		return run{}, false
	}
	r.cpu = readCPU(strings.TrimSuffix(f, ".json") + ".cpu")
	return r, true
}

func readText(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func readMeta(path string) map[string]string {
	m := map[string]string{}
	f, err := os.Open(path)
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			m[k] = v
		}
	}
	return m
}

var stores = []string{"memory", "postgres", "redis", "mysql"}

var baselineName = map[string]string{
	"memory":   "bare echo handler",
	"postgres": "one upsert per request (pgxpool)",
	"redis":    "one EVALSHA per request",
	"mysql":    "one upsert per request (database/sql)",
}

// target is the least budgetd/baseline throughput ratio the issues ask for
// (issue 13's, which raised issue 5's: memory 0.9×, Redis 1.2×, PostgreSQL
// 2× spread and 4× on one hot key). MySQL's (issue 44, which raised issue
// 27's parity once the MySQL store took the calls of many buckets into one
// batch): 1.5× the one-upsert baseline spread, 4× on one hot key.
func target(store, mode string) float64 {
	switch {
	case store == "memory":
		return 0.9
	case store == "redis":
		return 1.2
	case mode == "hot":
		return 4.0
	case store == "mysql":
		return 1.5
	}
	return 2.0
}

// p99Target is the most budgetd's p99 may be, as a multiple of the
// baseline's (issue 13: 1.5× on the memory store; issue 5: 2× elsewhere).
func p99Target(store string) float64 {
	if store == "memory" {
		return 1.5
	}
	return 2
}

// allocTarget is the most allocations per op issue 28 asks of a Go
// benchmark of package pkg (as go test -bench -benchmem reports them).
type allocTarget struct {
	pkg, bench, what string
	most             float64
}

var allocTargets = []allocTarget{
	{"internal/bucket", "BenchmarkFillup", "the bucket rule", 0},
	{"internal/http", "BenchmarkFillup", "one bucket through the handler", 20},
	{"internal/http", "BenchmarkMultiFillup3", "three buckets in one call", 60},
}

// benchAllocs reads the output of go test -bench -benchmem (gobench.txt):
// allocs/op by package and benchmark ("internal/http.BenchmarkFillup", the
// -GOMAXPROCS suffix dropped), the median of repeated lines. A package's
// lines come before its "ok" line, which names it.
func benchAllocs(text string) map[string]float64 {
	const module = "github.com/budgetd/budgetd/"
	out := map[string]float64{}
	pending := map[string][]float64{}
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "ok":
			for name, v := range pending {
				out[strings.TrimPrefix(f[1], module)+"."+name] = median(v)
			}
			clear(pending)
		case len(f) >= 4 && strings.HasPrefix(f[0], "Benchmark") && f[len(f)-1] == "allocs/op":
			v, err := strconv.ParseFloat(f[len(f)-2], 64)
			if err != nil {
				continue
			}
			name := f[0]
			if i := strings.LastIndexByte(name, '-'); i > 0 {
				if _, err := strconv.Atoi(name[i+1:]); err == nil {
					name = name[:i]
				}
			}
			pending[name] = append(pending[name], v)
		}
	}
	return out
}

type row struct {
	store, mode     string
	bd, bl          series
	ratio, p99Ratio float64
	pgb             series // PostgreSQL only: pgbench running the baseline's upsert
}

// pgbenchTarget is the least budgetd's throughput may be, as a multiple of
// pgbench running the baseline's single upsert from as many clients against
// the same server in the same run (issue 28: spread only; the hot key's
// target is against the baseline service).
const pgbenchTarget = 1.2

// kindRow compares a calendar-period limit with a leaky one on one store.
type kindRow struct {
	store                   string
	periodic, window, leaky series
	ratio, p99Ratio         float64 // periodic against leaky
	wRatio, wP99Ratio       float64 // window against leaky
	thresholds              series  // the leaky limit with three thresholds it never reaches
	tRatio                  float64 // thresholds against leaky
}

// overridesTarget is the least a limit with 100,000 overrides may do, as
// a multiple of the same limit without (SPEC "Terms per customer": within
// 10%).
const overridesTarget = 0.9

// thresholdsTarget is the least a limit with three thresholds may do, as a
// multiple of the same limit without (issue 25: within 10%).
const thresholdsTarget = 0.9

type scaleRow struct {
	store          string
	perBucket      float64
	method         string
	many, few      series
	manyN          string
	ratio          float64
	populateSecond float64
}

func main() {
	results := flag.String("results", "", "directory scripts/bench wrote")
	mdPath := flag.String("md", "docs/benchmarks.md", "Markdown report to write")
	svgPath := flag.String("svg", "docs/benchmarks.svg", "chart to write")
	notes := flag.String("notes", "", "hand-written notes to include (what the profiles showed)")
	peersPath := flag.String("peers", "", "results file of scripts/bench-peers (docs/peers.json) to render beside the table; a missing file adds nothing")
	flag.Parse()
	if *results == "" {
		fmt.Fprintln(os.Stderr, "report: --results is required")
		os.Exit(2)
	}
	meta := readMeta(filepath.Join(*results, "meta.txt"))
	peersSection := ""
	if *peersPath != "" {
		p, err := peers.ReadFile(*peersPath)
		switch {
		case err == nil:
			peersSection = peers.Markdown(p)
		case !errors.Is(err, fs.ErrNotExist):
			fmt.Fprintln(os.Stderr, "report: --peers:", err)
			os.Exit(1)
		}
	}

	var rows []row
	var scales []scaleRow
	var kinds []kindRow
	skipped := map[string]string{}
	for _, st := range stores {
		dir := filepath.Join(*results, st)
		if why := readText(filepath.Join(dir, "skipped.txt")); why != "" {
			skipped[st] = why
			continue
		}
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		for _, mode := range []string{"spread", "hot"} {
			r := row{store: st, mode: mode, bd: load(filepath.Join(dir, mode), "budgetd"), bl: load(filepath.Join(dir, mode), "baseline")}
			r.ratio = r.bd.tput() / r.bl.tput()
			r.p99Ratio = r.bd.p99() / r.bl.p99()
			r.pgb = load(filepath.Join(dir, mode), "pgbench")
			rows = append(rows, r)
		}
		kd := filepath.Join(dir, "kinds")
		if kr := (kindRow{store: st, periodic: load(kd, "periodic"), window: load(kd, "window"), leaky: load(kd, "leaky")}); len(kr.periodic)+len(kr.window)+len(kr.leaky) > 0 {
			kr.ratio = kr.periodic.tput() / kr.leaky.tput()
			kr.p99Ratio = kr.periodic.p99() / kr.leaky.p99()
			kr.wRatio = kr.window.tput() / kr.leaky.tput()
			kr.wP99Ratio = kr.window.p99() / kr.leaky.p99()
			kr.thresholds = load(kd, "thresholds")
			kr.tRatio = kr.thresholds.tput() / kr.leaky.tput()
			kinds = append(kinds, kr)
		}
		scales = append(scales, readScale(dir, st, meta))
	}

	if err := os.WriteFile(*mdPath, []byte(markdown(meta, rows, scales, kinds, skipped, *results, *notes, peersSection)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*svgPath, []byte(chart(rows, meta)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

// readScale reads a store's memory per idle bucket (the before and after
// figures of its probe, or memory's memsize.json) and its runs over many
// existing keys against few, from its directory of the results.
func readScale(dir, st string, meta map[string]string) scaleRow {
	sr := scaleRow{store: st, perBucket: math.NaN(), manyN: meta["buckets"]}
	n, _ := strconv.ParseFloat(meta["buckets"], 64)
	switch st {
	case "memory":
		var m struct {
			PerBucket float64 `json:"bytes_per_bucket"`
		}
		if json.Unmarshal([]byte(readText(filepath.Join(dir, "memsize.json"))), &m) == nil && m.PerBucket > 0 {
			sr.perBucket, sr.method = m.PerBucket, "Go heap growth after GC, in process (`probe memsize`)"
		}
	default:
		before, err1 := strconv.ParseFloat(readText(filepath.Join(dir, "mem-before.txt")), 64)
		after, err2 := strconv.ParseFloat(readText(filepath.Join(dir, "mem-after.txt")), 64)
		if err1 == nil && err2 == nil && n > 0 {
			sr.perBucket = (after - before) / n
			sr.method = map[string]string{"redis": "INFO used_memory delta", "postgres": "pg_database_size delta after VACUUM",
				"mysql": "data_length + index_length delta after ANALYZE TABLE (`probe mysqlsize`)"}[st]
		}
	}
	var pop struct {
		Seconds float64 `json:"seconds"`
	}
	if json.Unmarshal([]byte(readText(filepath.Join(dir, "populate.json"))), &pop) == nil {
		sr.populateSecond = pop.Seconds
	}
	sr.many = load(filepath.Join(dir, "scale"), meta["buckets"])
	sr.few = load(filepath.Join(dir, "scale"), "1000")
	sr.ratio = sr.many.tput() / sr.few.tput()
	return sr
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

// idleBucketTarget is the most memory an idle bucket may take, by store,
// where an issue set one (issue 28: Redis).
var idleBucketTarget = map[string]float64{"redis": 150}

// whyMissed is where the report's hand-written sections (bench/NOTES.md)
// give the measured reason a store misses its throughput or p99 target:
// a missed target's verdict links there.
var whyMissed = map[string]string{
	"memory":   "#the-default-configuration-under-wrk-against-an-echo-handler-and-gubernator",
	"postgres": "#postgresql-against-pgbench-and-where-the-cpu-goes-2026-11-26",
	"redis":    "#redis-where-the-ceiling-is",
	"mysql":    "mysql.md#benchmark",
}

// metWhy is met, with a missed target linked to its measured reason.
func metWhy(store string, ok, measured bool) string {
	v := met(ok, measured)
	if why, found := whyMissed[store]; found && measured && !ok {
		v += " ([why](" + why + "))"
	}
	return v
}

func met(ok bool, measured bool) string {
	switch {
	case !measured:
		return "not measured"
	case ok:
		return "met"
	}
	return "**missed**"
}

func valid(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// markdown is the report; peersSection, when not empty, follows the
// targets.
func markdown(meta map[string]string, rows []row, scales []scaleRow, kinds []kindRow, skipped map[string]string, dir, notesPath, peersSection string) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# Benchmarks\n\n")
	w("Written by `scripts/bench` on %s; do not edit by hand — rerun the script (hand-written notes live in `bench/NOTES.md`).\n", meta["date"])
	if meta["quick"] == "true" {
		w("**This is a `--quick` run**: one short run per case and %s buckets instead of 1,000,000 — indicative only.\n", meta["buckets"])
	}
	w("\nOn a small shared machine absolute numbers are noisy; what counts is the ratio of budgetd to the least a service ")
	w("can do with the same store, measured side by side in the same run: the two services are driven alternately, ")
	w("%s runs of %s each (after %s of warm-up), and the table shows medians.\n\n", meta["runs"], meta["duration"], meta["warmup"])
	w("## Machine\n\n| | |\n| --- | --- |\n")
	for _, k := range []string{"nproc", "cpu", "ram", "kernel", "go", "postgres", "redis", "mariadb", "commit", "load"} {
		if v := meta[k]; v != "" {
			name := map[string]string{"nproc": "CPUs (nproc)", "cpu": "CPU model", "ram": "RAM", "kernel": "kernel", "go": "Go",
				"postgres": "PostgreSQL", "redis": "Redis", "mariadb": "MariaDB", "commit": "budgetd commit", "load": "load average at start"}[k]
			w("| %s | %s |\n", name, v)
		}
	}
	w("\nThe load generator (`budgetload`), budgetd, the baseline and the store all share these CPUs.\n")
	w("\n## The load\n\n")
	w("`budgetload --concurrency %s --mix fillup=100`: %s connections in a closed loop, each sending the next Fillup (cost 1) ", meta["concurrency"], meta["concurrency"])
	w("when the previous one is answered; **spread** = uniformly over %s keys, **hot** = one key. ", meta["spread_keys"])
	w("The limit holds 10^12 and leaks 1 per 87600h, so every call is accepted and nothing leaks measurably; history is off. ")
	w("After every budgetd run `budgetload` reads a sample of the buckets back and checks that each level equals the sum of the costs it accepted (verify column).\n\n")
	w("Baselines (`bench/baseline`) serve the same path with the same JSON body: memory ↔ a bare echo handler answering a fixed decision; ")
	w("Redis ↔ one EVALSHA of a 10-line integer leaky-bucket script per request; PostgreSQL ↔ one `INSERT … ON CONFLICT DO UPDATE SET level = … RETURNING` per request through pgxpool; ")
	w("MySQL ↔ one `INSERT … ON DUPLICATE KEY UPDATE level = IF(…)` per request through a database/sql pool (no read back: MySQL has no RETURNING for an update). ")
	w("budgetd and the baseline get the same store URL, so the same pool sizes (pgxpool's and go-redis's defaults; 64 connections on MySQL for both). PostgreSQL runs with its defaults (fsync and synchronous_commit on); ")
	w("MariaDB durable too (`innodb_flush_log_at_trx_commit=1`, InnoDB's own group commit of the redo log, no binary log).\n\n")

	w("## Results\n\n![throughput and p99, budgetd against the baselines](benchmarks.svg)\n\n")
	w("| store | load | budgetd ops/s | baseline ops/s | **ratio** | budgetd p50 / p99 ms | baseline p50 / p99 ms | p99 ratio | errors | verify |\n")
	w("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, r := range rows {
		w("| %s | %s | %s | %s | **%s** | %s / %s | %s / %s | %s | %d | %s |\n", r.store, r.mode, f0(r.bd.tput()), f0(r.bl.tput()), f2(r.ratio),
			f2(r.bd.p50()), f2(r.bd.p99()), f2(r.bl.p50()), f2(r.bl.p99()), f2(r.p99Ratio), r.bd.errors()+r.bl.errors(), r.bd.verdict())
	}
	for _, st := range stores {
		if why, ok := skipped[st]; ok {
			w("| %s | — | skipped: %s | | | | | | | |\n", st, strings.ReplaceAll(why, "|", "\\|"))
		}
	}

	w("\n## Targets\n\n| target | measured | |\n| --- | --- | --- |\n")
	for _, r := range rows {
		t := target(r.store, r.mode)
		w("| %s %s: throughput ≥ %.2f× the %s | %s× | %s |\n", r.store, r.mode, t, baselineName[r.store], f2(r.ratio), metWhy(r.store, r.ratio >= t, valid(r.ratio)))
	}
	for _, r := range wrkRows(dir) {
		t := target(r.store, r.mode)
		w("| %s %s under wrk: throughput ≥ %.2f× the %s | %s× | %s |\n", r.store, r.mode, t, baselineName[r.store], f2(r.ratio()), metWhy(r.store, r.ratio() >= t, valid(r.ratio())))
	}
	for _, r := range rows {
		pt := p99Target(r.store)
		w("| %s %s: p99 ≤ %g× the baseline's | %s× (%s ms vs %s ms) | %s |\n", r.store, r.mode, pt, f2(r.p99Ratio), f2(r.bd.p99()), f2(r.bl.p99()), metWhy(r.store, r.p99Ratio <= pt, valid(r.p99Ratio)))
	}
	for _, r := range rows {
		if r.mode == "spread" && len(r.pgb) > 0 {
			x := r.bd.tput() / r.pgb.tput()
			w("| %s %s: throughput ≥ %.1f× pgbench running the baseline's upsert | %s× | %s |\n", r.store, r.mode, pgbenchTarget, f2(x), metWhy(r.store, x >= pgbenchTarget, valid(x)))
		}
	}
	for _, s := range scales {
		w("| %s: throughput at %s keys ≥ 0.9× at 1k keys | %s× | %s |\n", s.store, s.manyN, f2(s.ratio), met(s.ratio >= 0.9, valid(s.ratio)))
	}
	for _, s := range scales {
		if most, ok := idleBucketTarget[s.store]; ok {
			w("| %s: an idle bucket ≤ %g bytes | %s | %s |\n", s.store, most, f0(s.perBucket), metWhy(s.store, s.perBucket <= most, valid(s.perBucket)))
		}
	}
	allocs := benchAllocs(readText(filepath.Join(dir, "gobench.txt")))
	for _, t := range allocTargets {
		n, ok := allocs[t.pkg+"."+t.bench]
		if !ok {
			n = math.NaN()
		}
		w("| `%s` %s (%s): ≤ %g allocs/op | %s | %s |\n", t.pkg, strings.TrimPrefix(t.bench, "Benchmark"), t.what, t.most, f0(n), met(n <= t.most, ok))
	}
	for _, st := range stores {
		if _, ok := skipped[st]; ok {
			w("| %s: every target | skipped | not measured |\n", st)
		}
	}

	for _, r := range rows {
		if r.store == "mysql" {
			w("\nMySQL's throughput targets are 1.5× its one-upsert baseline spread and 4× on one hot key (issue 44, which raised issue 27's parity): ")
			w("the store's group commit takes the calls of many buckets into one decision and one write; where a target is missed, [mysql.md](mysql.md#benchmark) says why. ")
			w("The throughput targets are judged under wrk (the rows \"under wrk\"), the client the house measures speed with, which takes less of the shared CPUs than budgetload; budgetload's rows stay beside them.\n")
			break
		}
	}

	if pg := pgbenchSection(rows, meta); pg != "" {
		w("\n%s", pg)
	}
	if c := cpuSection(rows); c != "" {
		w("\n%s", c)
	}
	w("%s", wrkSection(dir))

	if peersSection != "" {
		w("\n%s", peersSection)
	}

	if len(kinds) > 0 {
		w("\n## Calendar periods and rolling windows against leaky limits\n\n")
		w("The same spread load on budgetd alone, in rotating order, on a limit that resets every calendar month in Europe/Berlin ")
		w("(`budgetload --period month --tz Europe/Berlin`), on a rolling window of 720h in hourly slots (`budgetload --window 720h`) ")
		w("and on the leaky limit above; neither should cost much more than a leaky one (ratio ≈ 1 within noise).\n\n")
		w("| store | periodic ops/s | window ops/s | leaky ops/s | **periodic / leaky** | **window / leaky** | periodic p50 / p99 ms | window p50 / p99 ms | leaky p50 / p99 ms | verify periodic, window |\n")
		w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
		for _, k := range kinds {
			w("| %s | %s | %s | %s | **%s** | **%s** | %s / %s | %s / %s | %s / %s | %s, %s |\n", k.store, f0(k.periodic.tput()), f0(k.window.tput()), f0(k.leaky.tput()),
				f2(k.ratio), f2(k.wRatio), f2(k.periodic.p50()), f2(k.periodic.p99()), f2(k.window.p50()), f2(k.window.p99()),
				f2(k.leaky.p50()), f2(k.leaky.p99()), k.periodic.verdict(), k.window.verdict())
		}
		w("\n### Thresholds\n\nThe leaky limit again with three thresholds (`--thresholds 50%%,80%%,900000000000`) that the load never reaches: ")
		w("what watching for crossings costs each decision (issue 25: within 10%% of the limit without).\n\n")
		w("| store | with thresholds ops/s | without ops/s | **ratio** | target ≥ %.2f | p50 / p99 ms with | verify |\n| --- | ---: | ---: | ---: | --- | ---: | --- |\n", thresholdsTarget)
		for _, k := range kinds {
			w("| %s | %s | %s | **%s** | %s | %s / %s | %s |\n", k.store, f0(k.thresholds.tput()), f0(k.leaky.tput()), f2(k.tRatio),
				met(k.tRatio >= thresholdsTarget, valid(k.tRatio)), f2(k.thresholds.p50()), f2(k.thresholds.p99()), k.thresholds.verdict())
		}
	}

	w("%s", overridesSection(dir))

	w("%s", webhookSection(dir))

	if sr := scriptRows(dir); len(sr) > 0 {
		w("\n## Redis scripts alone (redis-benchmark)\n\n")
		w("The EVALSHA each service sent for a hot-key Fillup, captured with `MONITOR` and replayed by `redis-benchmark` from %s clients: ", meta["concurrency"])
		w("what Redis can do with each script when nothing else is in the way. budgetd's HTTP throughput cannot exceed its script's.\n\n")
		w("| script | calls/s | p50 ms | p99 ms |\n| --- | ---: | ---: | ---: |\n")
		for _, r := range sr {
			w("| %s | %s | %s | %s |\n", r.who, f0(r.rps), f2(r.p50), f2(r.p99))
		}
		if len(sr) == 2 && sr[1].rps > 0 {
			w("\nbudgetd's script runs at %s× the calls per second of the minimal one.\n", f2(sr[0].rps/sr[1].rps))
		}
	}

	w("\n## Memory per idle bucket, and many keys against few\n\n")
	w("Each store is filled with %s buckets of level 1 (`budgetload --populate`: multi-bucket calls of 64 keys), then driven over all of them and over 1,000 of them.\n\n", meta["buckets"])
	w("| store | bytes per idle bucket | measured as | populate s | ops/s at %s keys | ops/s at 1k keys | ratio |\n| --- | ---: | --- | ---: | ---: | ---: | ---: |\n", meta["buckets"])
	for _, s := range scales {
		w("| %s | %s | %s | %s | %s | %s | %s |\n", s.store, f0(s.perBucket), s.method, f2(s.populateSecond), f0(s.many.tput()), f0(s.few.tput()), f2(s.ratio))
	}

	if g := readText(filepath.Join(dir, "gobench.txt")); g != "" {
		w("\n## Go benchmarks\n\nThe bucket rule (`internal/bucket`) and the HTTP handlers over the memory store in process (`internal/http/bench_test.go`, no network):\n\n```\n%s\n```\n", g)
	}
	if p := readText(filepath.Join(dir, "pprof.txt")); p != "" {
		w("\n## CPU profile of BenchmarkFillupParallel (pprof -top)\n\n```\n%s\n```\n", p)
	}
	var prof strings.Builder
	for _, r := range rows {
		for _, who := range []string{"budgetd", "baseline"} {
			p := readText(filepath.Join(dir, r.store, r.mode, who+"-1.profile"))
			if p == "" {
				continue
			}
			fmt.Fprintf(&prof, "%s, %s, %s (run 1):\n\n```\n%s\n```\n\n", r.store, r.mode, who, p)
		}
	}
	for _, sc := range scales {
		for _, k := range []string{sc.manyN, "1000"} {
			p := readText(filepath.Join(dir, sc.store, "scale", k+"-1.profile"))
			if p != "" {
				fmt.Fprintf(&prof, "%s, budgetd over %s existing keys (run 1):\n\n```\n%s\n```\n\n", sc.store, k, p)
			}
		}
	}
	if prof.Len() > 0 {
		w("\n## The stores' own profiles\n\nWhat the server spent its time on during run 1 of each case: Redis's `INFO commandstats` (µs per script call), ")
		w("PostgreSQL's `pg_stat_statements` (with `track=all`, so the statements inside budgetd's functions are listed too), ")
		w("MariaDB's `performance_schema` statement digests (each statement of budgetd's multi-statement write is its own row, but MariaDB 10.11 ")
		w("shows the text of the call's first statement, `SET TRANSACTION …`, for each: tell them apart by calls and rows). Each is reset before each run.\n\n%s", prof.String())
	}
	if notesPath != "" {
		if n := readText(notesPath); n != "" {
			w("\n%s\n", n)
		}
	}
	if f := readText(filepath.Join(dir, "failures.txt")); f != "" {
		w("\n## Failures during the run\n\n```\n%s\n```\n", f)
	}
	// A record of this run, not an example to run: docs/examples_test.go skips it by the marker.
	w("\n## Commands\n\nThe whole report: `scripts/bench`%s. What it ran, in order (binaries built from this commit; ports chosen at random on 127.0.0.1):\n\n"+
		"<!-- no-run: a record of what scripts/bench ran: budgetd, baselines and budgetload on the ports of that run, PostgreSQL, Redis and MariaDB -->\n```\n%s\n```\n",
		map[bool]string{true: " --quick", false: ""}[meta["quick"] == "true"], readText(filepath.Join(dir, "commands.txt")))
	return b.String()
}

// chart draws two grouped bar charts side by side: median throughput and
// median p99, budgetd against its baseline, per store and load.
func chart(rows []row, meta map[string]string) string {
	const (
		W, H                = 1380, 440
		panelW              = 440
		top, bottom         = 70, 360
		left1, left2, left3 = 70, 530, 990
	)
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	w(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	w(`<text x="%d" y="24" font-size="16" font-weight="bold">budgetd against the least each store can do (medians, %s)</text>`+"\n", left1, html.EscapeString(meta["date"]))
	w(`<rect x="%d" y="36" width="12" height="12" fill="#2f6fb3"/><text x="%d" y="46">budgetd</text>`+"\n", left1, left1+16)
	w(`<rect x="%d" y="36" width="12" height="12" fill="#b0b0b0"/><text x="%d" y="46">baseline (bare echo / one upsert / one EVALSHA / one upsert)</text>`+"\n", left1+80, left1+96)
	panel := func(x0 int, title, unit string, val func(series) float64, ratio func(row) float64) {
		maxV := 0.0
		for _, r := range rows {
			for _, v := range []float64{val(r.bd), val(r.bl)} {
				if valid(v) {
					maxV = max(maxV, v)
				}
			}
		}
		panelAxes(&b, x0, title, unit, &maxV)
		n := max(len(rows), 1)
		gw := (panelW - 40) / n
		bw := min(28, (gw-14)/2)
		for i, r := range rows {
			gx := x0 + i*gw + (gw-2*bw)/2
			for j, s := range []series{r.bd, r.bl} {
				v := val(s)
				if !valid(v) {
					continue
				}
				h := int(float64(bottom-top) * v / maxV)
				color := []string{"#2f6fb3", "#b0b0b0"}[j]
				w(`<rect x="%d" y="%d" width="%d" height="%d" fill="%s"><title>%s %s %s: %s</title></rect>`+"\n",
					gx+j*bw, bottom-h, bw-2, h, color, r.store, r.mode, []string{"budgetd", "baseline"}[j], f2(v))
			}
			if rt := ratio(r); valid(rt) {
				hb := int(float64(bottom-top) * max(val(r.bd), val(r.bl)) / maxV)
				w(`<text x="%d" y="%d" text-anchor="middle" font-size="11">%.2f×</text>`+"\n", gx+bw, bottom-hb-4, rt)
			}
			w(`<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", gx+bw, bottom+16, r.store)
			w(`<text x="%d" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", gx+bw, bottom+30, r.mode)
		}
	}
	panel(left1, "Throughput (higher is better)", "ops/s", series.tput, func(r row) float64 { return r.ratio })
	panel(left2, "p99 latency (lower is better)", "ms", series.p99, func(r row) float64 { return r.p99Ratio })
	ratioPanel(&b, left3, rows)
	w(`<text x="%d" y="%d" fill="#555">%s CPUs · %s connections · Fillup only · spread = %s keys, hot = 1 key · labels: budgetd / baseline</text>`+"\n",
		left1, H-20, html.EscapeString(meta["nproc"]), html.EscapeString(meta["concurrency"]), html.EscapeString(meta["spread_keys"]))
	w("</svg>\n")
	return b.String()
}

const (
	chartTop, chartBottom, chartPanelW = 70, 360, 440
)

// panelAxes draws a panel's title, grid and axis labels, rounding *maxV up
// to a round number.
func panelAxes(b *strings.Builder, x0 int, title, unit string, maxV *float64) {
	w := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	top, bottom := chartTop, chartBottom
	if *maxV <= 0 {
		*maxV = 1
	}
	*maxV = niceCeil(*maxV)
	w(`<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", x0, top-8, html.EscapeString(title))
	for i := 0; i <= 4; i++ {
		v := *maxV * float64(i) / 4
		y := bottom - int(float64(bottom-top)*float64(i)/4)
		w(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#e4e4e4"/>`+"\n", x0, y, x0+chartPanelW-40, y)
		w(`<text x="%d" y="%d" text-anchor="end" fill="#555">%s</text>`+"\n", x0-4, y+4, axisLabel(v))
	}
	w(`<text x="%d" y="%d" fill="#555" transform="rotate(-90 %d %d)" text-anchor="middle">%s</text>`+"\n", x0-40, (top+bottom)/2, x0-40, (top+bottom)/2, unit)
}

// ratioPanel draws budgetd/baseline throughput per case, with the issue's
// target for each case as a red tick.
func ratioPanel(b *strings.Builder, x0 int, rows []row) {
	w := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	maxV := 1.0
	for _, r := range rows {
		if valid(r.ratio) {
			maxV = max(maxV, r.ratio)
		}
		maxV = max(maxV, target(r.store, r.mode))
	}
	panelAxes(b, x0, "budgetd ÷ baseline throughput (red: target)", "ratio", &maxV)
	top, bottom := chartTop, chartBottom
	n := max(len(rows), 1)
	gw := (chartPanelW - 40) / n
	bw := min(28, gw-14)
	for i, r := range rows {
		gx := x0 + i*gw + (gw-bw)/2
		if valid(r.ratio) {
			h := int(float64(bottom-top) * r.ratio / maxV)
			color := "#2f6fb3"
			if r.ratio < target(r.store, r.mode) {
				color = "#d08a2c"
			}
			w(`<rect x="%d" y="%d" width="%d" height="%d" fill="%s"><title>%s %s: %.2f×</title></rect>`+"\n", gx, bottom-h, bw, h, color, r.store, r.mode, r.ratio)
			w(`<text x="%d" y="%d" text-anchor="middle" font-size="11">%.2f×</text>`+"\n", gx+bw/2, bottom-h-4, r.ratio)
		}
		ty := bottom - int(float64(bottom-top)*target(r.store, r.mode)/maxV)
		w(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#c0392b" stroke-width="2"/>`+"\n", gx-4, ty, gx+bw+4, ty)
		w(`<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", gx+bw/2, bottom+16, r.store)
		w(`<text x="%d" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", gx+bw/2, bottom+30, r.mode)
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func axisLabel(v float64) string {
	switch {
	case v >= 1000:
		return strconv.FormatFloat(v/1000, 'f', -1, 64) + "k"
	case v >= 10 || v == 0:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// scriptRow is one redis-benchmark run of a service's script.
type scriptRow struct {
	who           string
	rps, p50, p99 float64
}

// scriptRows reads redis/script-{budgetd,baseline}.csv, redis-benchmark's
// --csv output: a header line, then "test","rps",…,"p50_latency_ms",…,"p99_latency_ms".
func scriptRows(dir string) []scriptRow {
	var rows []scriptRow
	for _, who := range []string{"budgetd", "baseline"} {
		lines := strings.Split(readText(filepath.Join(dir, "redis", "script-"+who+".csv")), "\n")
		if len(lines) < 2 {
			continue
		}
		col := map[string]int{}
		for i, h := range strings.Split(lines[0], ",") {
			col[strings.Trim(h, `"`)] = i
		}
		// The test name (the whole command) may contain commas; the numbers
		// are the last fields.
		f := strings.Split(lines[1], ",")
		num := func(name string) float64 {
			i, ok := col[name]
			if !ok {
				return math.NaN()
			}
			j := len(f) - (len(col) - i)
			if j < 0 {
				return math.NaN()
			}
			v, err := strconv.ParseFloat(strings.Trim(f[j], `"`), 64)
			if err != nil {
				return math.NaN()
			}
			return v
		}
		name := "budgetd's fillup script"
		if who == "baseline" {
			name = "the minimal leaky-bucket script (bench/baseline)"
		}
		rows = append(rows, scriptRow{who: name, rps: num("rps"), p50: num("p50_latency_ms"), p99: num("p99_latency_ms")})
	}
	return rows
}

// pgbenchSection compares budgetd on PostgreSQL with pgbench running the
// baseline's single upsert ("" when no pgbench run was kept).
func pgbenchSection(rows []row, meta map[string]string) string {
	var b strings.Builder
	for _, r := range rows {
		if len(r.pgb) == 0 {
			continue
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "## PostgreSQL against pgbench\n\n")
			fmt.Fprintf(&b, "In the same rounds as the table above, `pgbench -n -M prepared -c %s -j %s` ran the baseline's upsert ", meta["concurrency"], meta["nproc"])
			fmt.Fprintf(&b, "(one `INSERT … ON CONFLICT DO UPDATE … RETURNING` per transaction, keys drawn like budgetload's) against the same server: ")
			fmt.Fprintf(&b, "the database's own load tool, with no HTTP and no Go in the way. budgetd gets ahead of it by group commit, ")
			fmt.Fprintf(&b, "several decisions in one transaction. pgbench's percentiles come from its per-transaction logs (`-l`).\n\n")
			fmt.Fprintf(&b, "| load | budgetd ops/s | pgbench tps | **budgetd / pgbench** | budgetd p50 / p99 ms | pgbench p50 / p99 ms | pgbench failed |\n")
			fmt.Fprintf(&b, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | **%s** | %s / %s | %s / %s | %d |\n", r.mode, f0(r.bd.tput()), f0(r.pgb.tput()), f2(r.bd.tput()/r.pgb.tput()),
			f2(r.bd.p50()), f2(r.bd.p99()), f2(r.pgb.p50()), f2(r.pgb.p99()), r.pgb.errors())
	}
	return b.String()
}

// cpuSection says where each run's CPU went, per operation: the service,
// the store's processes and the load tool ("" when no run was sampled).
func cpuSection(rows []row) string {
	var b strings.Builder
	line := func(r row, who string, s series) {
		sv, st, ld := s.cpuPerOp()
		if !valid(st) {
			return
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "## Where the CPU goes\n\n")
			fmt.Fprintf(&b, "CPU time per operation over each run's measured window (user + system, from `/proc`: the service's process, ")
			fmt.Fprintf(&b, "the store's — PostgreSQL's postmaster with its backends, redis-server, mariadbd — and the load tool's), medians of the runs. ")
			fmt.Fprintf(&b, "Everything shares the machine's CPUs, so a service's throughput is bounded by the CPUs over the total: ")
			fmt.Fprintf(&b, "a part of the total that the service does not spend (a heavier load tool, say) still lowers its throughput.\n\n")
			fmt.Fprintf(&b, "| store | load | who | ops/s | service µs/op | store µs/op | load tool µs/op | **total µs/op** |\n")
			fmt.Fprintf(&b, "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |\n")
		}
		svc := f0(sv)
		if who == "pgbench" {
			svc = "—"
			sv = 0
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | **%s** |\n", r.store, r.mode, who, f0(s.tput()), svc, f0(st), f0(ld), f0(sv+st+ld))
	}
	for _, r := range rows {
		line(r, "budgetd", r.bd)
		line(r, baselineName[r.store], r.bl)
		if len(r.pgb) > 0 {
			line(r, "pgbench", r.pgb)
		}
	}
	return b.String()
}

// whyOverridesMissed is the hand-written section (bench/NOTES.md) that
// measures where a missed overrides ratio stands.
const whyOverridesMissed = "#the-full-run-of-2026-11-27-and-the-redis-hot-key-under-100000-overrides"

// overridesVerdict is met or missed against overridesTarget, a miss linked
// to whyOverridesMissed.
func overridesVerdict(ratio float64) string {
	v := met(ratio >= overridesTarget, valid(ratio))
	if valid(ratio) && ratio < overridesTarget {
		v += " ([why](" + whyOverridesMissed + "))"
	}
	return v
}

// overridesSection is a limit with many overrides against the same limit
// without, spread and hot key, on each store that ran it (scripts/bench's
// overrides/ directory of a store); a store that answered 501 to an
// override is shown as skipped. "" when no store ran it.
func overridesSection(dir string) string {
	var b strings.Builder
	for _, st := range stores {
		od := filepath.Join(dir, st, "overrides")
		why := readText(filepath.Join(od, "skipped.txt"))
		var setup struct {
			Overrides        int     `json:"overrides"`
			OverridesSeconds float64 `json:"overrides_seconds"`
		}
		setupRaw := readText(filepath.Join(od, "setup-with-1.json"))
		_ = json.Unmarshal([]byte(setupRaw), &setup)
		verdict := func(side string) string { return load(od, "setup-"+side).verdict() }
		if why == "" && setupRaw == "" {
			continue
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "\n## Overrides\n\n")
			fmt.Fprintf(&b, "A limit with many overrides of its capacity against the same limit without, budgetd alone, spread over the keys and on one hot key, ")
			fmt.Fprintf(&b, "in rotating order in the same rounds: what resolving a key's terms costs each decision (SPEC \"Terms per customer\": within 10%%). ")
			fmt.Fprintf(&b, "`budgetload --overrides N` puts them through the API once, before the rounds, in a short run that verifies: half exact keys ")
			fmt.Fprintf(&b, "of the load (`k1`, `k3`, …), half prefixes (`k0*`, `k2*`, …), so that every key resolves through one, the hot key `k0` through ")
			fmt.Fprintf(&b, "its prefix; the measured runs use both limits as they are (`--setup=false`). A store that answers an override with 501 is skipped, ")
			fmt.Fprintf(&b, "found at run time. The ratio is of the medians; \"by round\" is each round's with against its without, ")
			fmt.Fprintf(&b, "which on this shared 2-core machine moves by more than 10%% from round to round with nothing changed ")
			fmt.Fprintf(&b, "([the hot key's rounds](%s)).\n\n", whyOverridesMissed)
			fmt.Fprintf(&b, "| store | load | overrides | with ops/s | without ops/s | **ratio** | target ≥ %.2f | by round | p50 / p99 ms with | p50 / p99 ms without | put in | verify with, without |\n", overridesTarget)
			fmt.Fprintf(&b, "| --- | --- | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | --- |\n")
		}
		if why != "" {
			fmt.Fprintf(&b, "| %s | — | skipped: %s | | | | | | | | |\n", st, strings.ReplaceAll(why, "|", "\\|"))
			continue
		}
		for _, mode := range []string{"spread", "hot"} {
			with, without := load(od, mode+"-with"), load(od, mode+"-without")
			ratio := with.tput() / without.tput()
			fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | **%s** | %s | %s | %s / %s | %s / %s | %s s | %s, %s |\n", st, mode, setup.Overrides,
				f0(with.tput()), f0(without.tput()), f2(ratio), overridesVerdict(ratio), byRound(od, mode),
				f2(with.p50()), f2(with.p99()), f2(without.p50()), f2(without.p99()), f0(setup.OverridesSeconds), verdict("with"), verdict("without"))
		}
	}
	return b.String()
}

// byRound is each round's ratio of mode's run with overrides to its run
// without (the files <mode>-with-<i>.json and <mode>-without-<i>.json of
// round i), in round order: "—" for a round that lacks either.
func byRound(od, mode string) string {
	var out []string
	for i := 1; ; i++ {
		with, okWith := readRun(filepath.Join(od, fmt.Sprintf("%s-with-%d.json", mode, i)))
		without, okWithout := readRun(filepath.Join(od, fmt.Sprintf("%s-without-%d.json", mode, i)))
		if !okWith && !okWithout {
			break
		}
		if !okWith || !okWithout {
			out = append(out, "—")
			continue
		}
		out = append(out, f2(with.Throughput/without.Throughput))
	}
	return strings.Join(out, ", ")
}

// webhookSection is the threshold → webhook latency of each store (probe
// webhooklat; "" when no store measured it).
func webhookSection(dir string) string {
	var b strings.Builder
	for _, st := range stores {
		raw := readText(filepath.Join(dir, st, "webhooklat.json"))
		why := readText(filepath.Join(dir, st, "webhooklat-skipped.txt"))
		if raw == "" && why == "" {
			continue
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "\n## Threshold → webhook latency\n\n")
			fmt.Fprintf(&b, "A budgetd of its own with `--webhook-url` pointing at `probe webhooklat`, which charges fresh keys across an amount ")
			fmt.Fprintf(&b, "threshold one at a time (each after the previous webhook arrived, so none are read from the outbox together) and times ")
			fmt.Fprintf(&b, "each from sending the charge to the arrival of its signed webhook. The write nudges the deliverer, which reads the outbox ")
			fmt.Fprintf(&b, "at once instead of at its 500 ms poll ([alerts.md](alerts.md#push-webhooks)).\n\n")
			fmt.Fprintf(&b, "| store | crossings | arrived | p50 ms | p99 ms | max ms | bad signatures |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		}
		if raw == "" {
			fmt.Fprintf(&b, "| %s | not measured: %s | | | | | |\n", st, strings.ReplaceAll(why, "|", "\\|"))
			continue
		}
		var j struct {
			N             int     `json:"n"`
			Arrived       int     `json:"arrived"`
			BadSignatures int     `json:"bad_signatures"`
			P50           float64 `json:"p50_ms"`
			P99           float64 `json:"p99_ms"`
			Max           float64 `json:"max_ms"`
		}
		if json.Unmarshal([]byte(raw), &j) != nil {
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %s | %s | %d |\n", st, j.N, j.Arrived, f2(j.P50), f2(j.P99), f2(j.Max), j.BadSignatures)
	}
	return b.String()
}

// loadWrk is the runs of one case under wrk: the prefix-N.txt files
// scripts/bench wrote in dir (wrk's report, with --latency), each with its
// .cpu beside it.
func loadWrk(dir, prefix string) series {
	var s series
	files, _ := filepath.Glob(filepath.Join(dir, prefix+"-*.txt"))
	slices.Sort(files)
	for _, f := range files {
		p, err := peers.Parse(readText(f))
		if err != nil || p.Requests == 0 {
			continue
		}
		r := run{Throughput: p.RPS, Ops: uint64(p.Requests), Errors: uint64(p.Errors())}
		r.Latency.P50, r.Latency.P99 = p.P50, p.P99
		r.cpu = readCPU(strings.TrimSuffix(f, ".txt") + ".cpu")
		s = append(s, r)
	}
	return s
}

// wrkRow is one case under wrk: budgetd's runs and the baseline's.
type wrkRow struct {
	store, mode string
	bd, bl      series
}

func (r wrkRow) ratio() float64 { return r.bd.tput() / r.bl.tput() }

// wrkRows is the cases scripts/bench ran under wrk (issue 44), with runs of
// both services, in the order of stores.
func wrkRows(dir string) []wrkRow {
	var rows []wrkRow
	for _, st := range stores {
		for _, mode := range []string{"spread", "hot"} {
			d := filepath.Join(dir, st, "wrk-"+mode)
			r := wrkRow{store: st, mode: mode, bd: loadWrk(d, "budgetd"), bl: loadWrk(d, "baseline")}
			if len(r.bd) > 0 && len(r.bl) > 0 {
				rows = append(rows, r)
			}
		}
	}
	return rows
}

// wrkSection is budgetd against its baseline with wrk as the client
// (scripts/bench's runs under wrk, issue 44): the same cases, a client
// that takes a fraction of budgetload's CPU per call. "" when none ran.
func wrkSection(dir string) string {
	rows := wrkRows(dir)
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## The same cases under wrk\n\n")
	fmt.Fprintf(&b, "budgetload, a Go program with a goroutine and a connection per caller, takes about twice wrk's CPU per call, on the same CPUs as the services and the store ")
	fmt.Fprintf(&b, "(the load tool column above). So each case ran again with `wrk -t2 -c64 --latency` and bench/peers' scripts (limit `bench`, ")
	fmt.Fprintf(&b, "one key or 100,000, cost 1), budgetd and the baseline alternating, as the runs above; medians. No verify: the runs above audit the levels.\n\n")
	fmt.Fprintf(&b, "| store | load | budgetd req/s | baseline req/s | **ratio** | target | budgetd / baseline p99 ms | budgetd CPU µs/op (service + store + wrk) | baseline CPU µs/op | errors |\n")
	fmt.Fprintf(&b, "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |\n")
	for _, r := range rows {
		ratio, t := r.ratio(), target(r.store, r.mode)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | **%s** | ≥ %.2f×: %s | %s / %s | %s | %s | %d |\n", r.store, r.mode, f0(r.bd.tput()), f0(r.bl.tput()), f2(ratio),
			t, metWhy(r.store, ratio >= t, valid(ratio)), f2(r.bd.p99()), f2(r.bl.p99()), cpuParts(r.bd), cpuParts(r.bl), r.bd.errors()+r.bl.errors())
	}
	return b.String()
}

// cpuParts is a series' CPU per operation as "service + store + load =
// total", "—" when no run was sampled.
func cpuParts(s series) string {
	sv, st, ld := s.cpuPerOp()
	if !valid(sv) {
		return "—"
	}
	return fmt.Sprintf("%s + %s + %s = %s", f0(sv), f0(st), f0(ld), f0(sv+st+ld))
}

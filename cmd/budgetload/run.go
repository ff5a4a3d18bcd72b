package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// run is budgetload without the process around it, so tests can call it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, stderr)
	if err != nil {
		return err
	}
	l := newLoader(cfg)
	defer l.client.CloseIdleConnections()
	defer l.raws.closeAll()
	setupAt := time.Now()
	var overridesTook time.Duration
	if cfg.setup {
		if err := l.setup(ctx); err != nil {
			return err
		}
		if cfg.overrides > 0 {
			if overridesTook, err = l.putOverrides(ctx, stderr); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "put %d overrides in %.1fs (%.0f/s)\n", cfg.overrides, overridesTook.Seconds(), float64(cfg.overrides)/overridesTook.Seconds())
		}
	}
	if cfg.populate {
		took, err := l.populate(ctx, stderr)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "populated %d keys in %.1fs (%.0f keys/s)\n", cfg.keys, took.Seconds(), float64(cfg.keys)/took.Seconds())
		if cfg.json {
			return json.NewEncoder(stdout).Encode(map[string]any{"populated": cfg.keys, "seconds": took.Seconds()})
		}
		return nil
	}

	now := time.Now()
	win := window{start: now, measure: now.Add(cfg.warmup), end: now.Add(cfg.warmup + cfg.duration)}
	done := make(chan struct{})
	if !cfg.quiet {
		fmt.Fprintf(stderr, "budgetload: %s → %s for %s (+%s warm-up)\n", describe(cfg), cfg.url, cfg.duration, cfg.warmup)
		go l.progress(win, stderr, done)
	}
	if cfg.rate > 0 {
		l.runOpen(ctx, win)
	} else {
		l.runClosed(ctx, win)
	}
	close(done)
	measured := cfg.duration
	if ctx.Err() != nil {
		measured = max(time.Since(win.measure), time.Millisecond)
	}
	sum := summarize(cfg, l.snapshot(), measured)
	sum.Unsent = l.unsent.Load()
	sum.Overrides, sum.OverridesSeconds = cfg.overrides, overridesTook.Seconds()

	if cfg.verify {
		switch {
		case !cfg.setup:
			sum.Verify = &verifyReport{Skipped: "--setup=false: the buckets did not start empty"}
		case ctx.Err() != nil:
			sum.Verify = &verifyReport{Skipped: "interrupted"}
		default:
			// A fresh context: the run's may be close to its end.
			v := l.verify(context.Background(), setupAt)
			sum.Verify = &v
		}
	}
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(sum); err != nil {
			return err
		}
	} else {
		printSummary(stdout, sum)
	}
	if sum.Verify != nil {
		printVerify(stderr, *sum.Verify)
		if sum.Verify.Skipped == "" && !sum.Verify.OK {
			return verifyError{len(sum.Verify.Mismatches)}
		}
	}
	return nil
}

func describe(cfg config) string {
	model := fmt.Sprintf("closed model, %d connections", cfg.concurrency)
	if cfg.rate > 0 {
		model = fmt.Sprintf("open model, %.0f ops/s, at most %d in flight", cfg.rate, cfg.concurrency)
	}
	return fmt.Sprintf("%s, %d keys, mix %s", model, cfg.keys, mixString(cfg.mix))
}

func mixString(m [numOps]int) string {
	var parts []string
	for o := range numOps {
		if m[o] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", opNames[o], m[o]))
		}
	}
	return strings.Join(parts, ",")
}

// latency is a distribution in milliseconds.
type latency struct {
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p999_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func latencyOf(h *histogram) latency {
	if h.total == 0 {
		return latency{}
	}
	return latency{P50: ms(h.quantile(.5)), P90: ms(h.quantile(.9)), P99: ms(h.quantile(.99)), P999: ms(h.quantile(.999)),
		Max: ms(time.Duration(h.max)), Mean: ms(h.mean())}
}

type opSummary struct {
	Op       string  `json:"op"`
	Count    uint64  `json:"count"`
	Accepted uint64  `json:"accepted"`
	Denied   uint64  `json:"denied"`
	Errors   uint64  `json:"errors"`
	Latency  latency `json:"latency"`
}

// summary is the end-of-run report (--json prints it as is).
type summary struct {
	URL         string            `json:"url"`
	Model       string            `json:"model"`
	Concurrency int               `json:"concurrency"`
	Rate        float64           `json:"rate,omitempty"`
	Keys        int               `json:"keys"`
	Mix         string            `json:"mix"`
	Seconds     float64           `json:"seconds"`
	Ops         uint64            `json:"ops"`
	Requests    uint64            `json:"requests"`
	Throughput  float64           `json:"ops_per_second"`
	RequestRate float64           `json:"requests_per_second"`
	Errors      uint64            `json:"errors"`
	Unsent      int64             `json:"unsent,omitempty"` // open model: due but never sent before the end
	Latency     latency           `json:"latency"`
	PerOp       []opSummary       `json:"per_op"`
	ErrorKinds  map[string]uint64 `json:"error_kinds"`
	Verify      *verifyReport     `json:"verify,omitempty"`
	// Overrides is how many overrides --setup put on the limit, in
	// OverridesSeconds.
	Overrides        int     `json:"overrides,omitempty"`
	OverridesSeconds float64 `json:"overrides_seconds,omitempty"`
}

func summarize(cfg config, s *stats, measured time.Duration) summary {
	sum := summary{
		URL: cfg.url, Model: "closed", Concurrency: cfg.concurrency, Keys: cfg.keys, Mix: mixString(cfg.mix),
		Seconds: measured.Seconds(), Ops: s.all.total, Requests: s.requests, Errors: s.errors(),
		Latency: latencyOf(&s.all), ErrorKinds: s.errKinds,
	}
	if cfg.rate > 0 {
		sum.Model, sum.Rate = "open", cfg.rate
	}
	sum.Throughput = float64(sum.Ops) / measured.Seconds()
	sum.RequestRate = float64(sum.Requests) / measured.Seconds()
	for o := range numOps {
		if cfg.mix[o] == 0 {
			continue
		}
		sum.PerOp = append(sum.PerOp, opSummary{Op: opNames[o], Count: s.hist[o].total, Accepted: s.accepted[o],
			Denied: s.denied[o], Errors: s.errs[o], Latency: latencyOf(&s.hist[o])})
	}
	return sum
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000)
	}
	return fmt.Sprintf("%dµs", d.Microseconds())
}

func fmtMs(v float64) string { return fmtDur(time.Duration(v * float64(time.Millisecond))) }

func printSummary(w io.Writer, s summary) {
	fmt.Fprintf(w, "throughput: %.1f ops/s (%d ops, %d HTTP requests, %.1f req/s) over %.1fs, %s model, %d connections, %d keys\n",
		s.Throughput, s.Ops, s.Requests, s.RequestRate, s.Seconds, s.Model, s.Concurrency, s.Keys)
	if s.Unsent > 0 {
		fmt.Fprintf(w, "behind schedule: %d operations due at --rate %.0f were never sent; the service did not keep up, and the latencies count only the operations that were sent\n", s.Unsent, s.Rate)
	}
	fmt.Fprintf(w, "latency:    p50 %s  p90 %s  p99 %s  p999 %s  max %s  mean %s\n",
		fmtMs(s.Latency.P50), fmtMs(s.Latency.P90), fmtMs(s.Latency.P99), fmtMs(s.Latency.P999), fmtMs(s.Latency.Max), fmtMs(s.Latency.Mean))
	fmt.Fprintf(w, "%-8s %10s %10s %8s %8s %9s %9s %9s\n", "op", "count", "accepted", "denied", "errors", "p50", "p99", "p999")
	for _, o := range s.PerOp {
		fmt.Fprintf(w, "%-8s %10d %10d %8d %8d %9s %9s %9s\n", o.Op, o.Count, o.Accepted, o.Denied, o.Errors,
			fmtMs(o.Latency.P50), fmtMs(o.Latency.P99), fmtMs(o.Latency.P999))
	}
	if len(s.ErrorKinds) == 0 {
		fmt.Fprintln(w, "errors: none")
		return
	}
	kinds := make([]string, 0, len(s.ErrorKinds))
	for k := range s.ErrorKinds {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	fmt.Fprintln(w, "errors:")
	for _, k := range kinds {
		fmt.Fprintf(w, "  %8d  %s\n", s.ErrorKinds[k], k)
	}
}

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
)

// pgbenchRun is one pgbench run in the shape of budgetload's --json summary,
// so the report reads both alike.
type pgbenchRun struct {
	Throughput float64 `json:"ops_per_second"`
	Ops        uint64  `json:"ops"`
	Errors     uint64  `json:"errors"`
	Latency    struct {
		P50  float64 `json:"p50_ms"`
		P99  float64 `json:"p99_ms"`
		P999 float64 `json:"p999_ms"`
	} `json:"latency"`
	Sampled int `json:"latency_samples"`
}

var (
	pgbenchTPS    = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)
	pgbenchOps    = regexp.MustCompile(`(?m)^number of transactions actually processed: ([0-9]+)`)
	pgbenchFailed = regexp.MustCompile(`(?m)^number of failed transactions: ([0-9]+)`)
)

// pgbench reads pgbench's summary (its stdout) and its per-transaction logs
// (-l: "client_id transaction_no time_us script_no epoch epoch_us …"), and
// prints the run as budgetload would: throughput from the summary, latency
// percentiles from the logged transactions.
func pgbench(summaryPath string, logPaths []string) error {
	summary, err := os.ReadFile(summaryPath)
	if err != nil {
		return err
	}
	var r pgbenchRun
	m := pgbenchTPS.FindSubmatch(summary)
	if m == nil {
		return fmt.Errorf("%s: no \"tps = … (without initial connection time)\" line", summaryPath)
	}
	if r.Throughput, err = strconv.ParseFloat(string(m[1]), 64); err != nil {
		return err
	}
	if m := pgbenchOps.FindSubmatch(summary); m != nil {
		r.Ops, _ = strconv.ParseUint(string(m[1]), 10, 64)
	}
	if m := pgbenchFailed.FindSubmatch(summary); m != nil {
		r.Errors, _ = strconv.ParseUint(string(m[1]), 10, 64)
	}
	var lat []float64 // µs
	for _, p := range logPaths {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		lat, err = pgbenchLatencies(f, lat)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	if len(lat) == 0 {
		return errors.New("no transactions in the pgbench logs")
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] / 1000 }
	r.Latency.P50, r.Latency.P99, r.Latency.P999 = q(0.50), q(0.99), q(0.999)
	r.Sampled = len(lat)
	return json.NewEncoder(os.Stdout).Encode(r)
}

// pgbenchLatencies appends the latency (µs) of every transaction logged in
// r to lat. A failed transaction ("failed" or "skipped" in the third field)
// has no latency and is left out.
func pgbenchLatencies(r io.Reader, lat []float64) ([]float64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var client, tx int
		var field string
		if _, err := fmt.Sscan(sc.Text(), &client, &tx, &field); err != nil {
			return lat, fmt.Errorf("line %q: %w", sc.Text(), err)
		}
		us, err := strconv.ParseFloat(field, 64)
		if err != nil {
			continue
		}
		lat = append(lat, us)
	}
	return lat, sc.Err()
}

package peers

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The systems and loads a run measures, in the order the report lists them.
var (
	Systems = []string{"budgetd", "echo", "gubernator"}
	Loads   = []string{"hot", "spread"}
)

// Results is one run of scripts/bench-peers: what docs/peers.json holds.
type Results struct {
	// Machine is the meta.txt the script wrote: date, CPUs, versions,
	// commit, load average, rounds and duration.
	Machine map[string]string `json:"machine"`
	// Commands are the commands the run used, in order, with ports and
	// temporary paths replaced by names.
	Commands []string `json:"commands"`
	// Skipped says why a system was not measured (gubernator when the
	// module proxy is out of reach), by system.
	Skipped map[string]string `json:"skipped,omitempty"`
	// Failures are wrk outputs that could not be read, by file name.
	Failures []string `json:"failures,omitempty"`
	Cases    []Case   `json:"cases"`
}

// Case is every round of one system under one load.
type Case struct {
	System string       `json:"system"`
	Load   string       `json:"load"`
	Rounds []RoundRun   `json:"rounds"`
	Median MedianValues `json:"median"`
}

// RoundRun is one wrk run and the round it belongs to.
type RoundRun struct {
	Round int `json:"round"`
	Run
}

// MedianValues are the medians over a case's rounds, and the sum of its
// errors.
type MedianValues struct {
	RPS    float64 `json:"requests_per_second"`
	P50    float64 `json:"p50_ms"`
	P99    float64 `json:"p99_ms"`
	Errors int64   `json:"errors"`
}

// Collect reads a results directory: meta.txt, commands.txt, a
// skipped-SYSTEM.txt per system not measured, and wrk/SYSTEM-LOAD-ROUND.txt,
// wrk's output of each run.
func Collect(dir string) (*Results, error) {
	r := &Results{Machine: map[string]string{}, Skipped: map[string]string{}}
	meta, err := readLines(filepath.Join(dir, "meta.txt"))
	if err != nil {
		return nil, err
	}
	for _, l := range meta {
		if k, v, ok := strings.Cut(l, "="); ok {
			r.Machine[k] = v
		}
	}
	if r.Commands, err = readLines(filepath.Join(dir, "commands.txt")); err != nil {
		return nil, err
	}
	for _, sys := range Systems {
		b, err := os.ReadFile(filepath.Join(dir, "skipped-"+sys+".txt"))
		if err == nil {
			r.Skipped[sys] = strings.TrimSpace(string(b))
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "wrk", "*.txt"))
	if err != nil {
		return nil, fmt.Errorf("list wrk outputs: %w", err)
	}
	cases := map[[2]string]*Case{}
	for _, f := range files {
		name := filepath.Base(f)
		parts := strings.Split(strings.TrimSuffix(name, ".txt"), "-")
		if len(parts) != 3 {
			continue
		}
		round, err := strconv.Atoi(parts[2])
		if err != nil {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read wrk output: %w", err)
		}
		run, err := Parse(string(b))
		if err != nil {
			r.Failures = append(r.Failures, name+": "+err.Error())
			continue
		}
		k := [2]string{parts[0], parts[1]}
		if cases[k] == nil {
			cases[k] = &Case{System: parts[0], Load: parts[1]}
		}
		cases[k].Rounds = append(cases[k].Rounds, RoundRun{Round: round, Run: run})
	}
	for _, sys := range Systems {
		for _, load := range Loads {
			if c := cases[[2]string{sys, load}]; c != nil {
				slices.SortFunc(c.Rounds, func(a, b RoundRun) int { return a.Round - b.Round })
				c.Median = medians(c.Rounds)
				r.Cases = append(r.Cases, *c)
			}
		}
	}
	return r, nil
}

// ReadFile reads a results file bench/peers wrote.
func ReadFile(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// WriteFile writes r as indented JSON.
func (r *Results) WriteFile(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Case returns the case of system under load, or nil.
func (r *Results) Case(system, load string) *Case {
	for i := range r.Cases {
		if r.Cases[i].System == system && r.Cases[i].Load == load {
			return &r.Cases[i]
		}
	}
	return nil
}

// round returns the run of round n, if the case has one.
func (c *Case) round(n int) (Run, bool) {
	for _, rr := range c.Rounds {
		if rr.Round == n {
			return rr.Run, true
		}
	}
	return Run{}, false
}

func medians(rounds []RoundRun) MedianValues {
	var m MedianValues
	pick := func(f func(Run) float64) float64 {
		v := make([]float64, len(rounds))
		for i, r := range rounds {
			v[i] = f(r.Run)
		}
		return median(v)
	}
	m.RPS = pick(func(r Run) float64 { return r.RPS })
	m.P50 = pick(func(r Run) float64 { return r.P50 })
	m.P99 = pick(func(r Run) float64 { return r.P99 })
	for _, r := range rounds {
		m.Errors += r.Errors()
	}
	return m
}

// median is the middle value, or the mean of the two middle ones; NaN for
// no values.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func readLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return lines, nil
}

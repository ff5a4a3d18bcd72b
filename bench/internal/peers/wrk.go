// Package peers reads the wrk runs scripts/bench-peers makes — budgetd in its
// default configuration, a bare echo handler and a one-node gubernator, each
// on one hot key and spread over 100,000 keys, several rounds alternating —
// and turns them into medians, ratios and a Markdown section of
// docs/benchmarks.md. bench/peers writes the results file (docs/peers.json)
// and splices the section into the report; bench/report renders the same
// section from that file whenever it rewrites the report, so neither script
// loses the other's figures.
package peers

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// Run is what one wrk run printed (wrk 4, with --latency).
type Run struct {
	Requests   int64   `json:"requests"`
	Seconds    float64 `json:"seconds"`
	RPS        float64 `json:"requests_per_second"`
	P50        float64 `json:"p50_ms"`
	P75        float64 `json:"p75_ms"`
	P90        float64 `json:"p90_ms"`
	P99        float64 `json:"p99_ms"`
	MaxLatency float64 `json:"max_ms"`
	Non2xx     int64   `json:"non_2xx"`
	// SocketErrors is the sum of wrk's connect, read, write and timeout
	// errors.
	SocketErrors int64 `json:"socket_errors"`
}

// Errors is every request that did not get a 2xx or 3xx answer.
func (r Run) Errors() int64 { return r.Non2xx + r.SocketErrors }

// Parse reads wrk's report. It needs the request count, Requests/sec and
// the latency distribution (wrk --latency); it fails on output without
// them, such as wrk's usage text or a run that could not connect.
func Parse(out string) (Run, error) {
	var r Run
	var haveRPS, haveCount bool
	pct := map[string]*float64{"50%": &r.P50, "75%": &r.P75, "90%": &r.P90, "99%": &r.P99}
	havePct := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case f[0] == "Latency" && len(f) >= 4:
			// Thread Stats: Latency avg stdev max +/-stdev.
			v, err := parseTime(f[3])
			if err != nil {
				return Run{}, fmt.Errorf("wrk: latency max: %w", err)
			}
			r.MaxLatency = v
		case pct[f[0]] != nil && len(f) == 2:
			v, err := parseTime(f[1])
			if err != nil {
				return Run{}, fmt.Errorf("wrk: latency %s: %w", f[0], err)
			}
			*pct[f[0]] = v
			havePct++
		case len(f) >= 5 && f[1] == "requests" && f[2] == "in":
			// "110537 requests in 5.04s, 50.33MB read"
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return Run{}, fmt.Errorf("wrk: request count %q: %w", f[0], err)
			}
			d, err := parseTime(strings.TrimSuffix(f[3], ","))
			if err != nil {
				return Run{}, fmt.Errorf("wrk: run length: %w", err)
			}
			r.Requests, r.Seconds, haveCount = n, d/1000, true
		case f[0] == "Requests/sec:" && len(f) == 2:
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return Run{}, fmt.Errorf("wrk: Requests/sec %q: %w", f[1], err)
			}
			r.RPS, haveRPS = v, true
		case strings.HasPrefix(line, "Non-2xx or 3xx responses:"):
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(line, "Non-2xx or 3xx responses:")), 10, 64)
			if err != nil {
				return Run{}, fmt.Errorf("wrk: non-2xx count: %w", err)
			}
			r.Non2xx = n
		case strings.HasPrefix(line, "Socket errors:"):
			// "Socket errors: connect 0, read 3531, write 0, timeout 0"
			for _, part := range strings.Split(strings.TrimPrefix(line, "Socket errors:"), ",") {
				kv := strings.Fields(part)
				if len(kv) != 2 {
					return Run{}, fmt.Errorf("wrk: socket errors %q", line)
				}
				n, err := strconv.ParseInt(kv[1], 10, 64)
				if err != nil {
					return Run{}, fmt.Errorf("wrk: socket errors %q: %w", line, err)
				}
				r.SocketErrors += n
			}
		}
	}
	switch {
	case !haveCount || !haveRPS:
		return Run{}, fmt.Errorf("wrk: no request count or Requests/sec in the output")
	case havePct != len(pct):
		return Run{}, fmt.Errorf("wrk: no latency distribution in the output (run wrk with --latency)")
	}
	return r, nil
}

// parseTime reads a duration as wrk prints it (format_time in wrk's
// units.c: us, ms, s, then m and h) and returns milliseconds.
func parseTime(s string) (float64, error) {
	units := []struct {
		suffix string
		ms     float64
	}{{"us", 0.001}, {"ms", 1}, {"m", 60_000}, {"h", 3_600_000}, {"s", 1000}}
	for _, u := range units {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return 0, fmt.Errorf("time %q: %w", s, err)
		}
		return v * u.ms, nil
	}
	return 0, fmt.Errorf("time %q: no unit", s)
}

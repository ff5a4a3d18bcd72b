package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// op is one kind of call the load is made of.
type op int

const (
	opFillup  op = iota // POST …/fillup
	opCan               // GET …/buckets/{key}?cost=
	opReserve           // POST …/reservations, then POST /v1/reservations/{id}/commit
	opMulti             // POST /v1/fillup with a user and a team bucket
	numOps
)

var opNames = [numOps]string{"fillup", "can", "reserve", "multi"}

func (o op) String() string { return opNames[o] }

// config is what budgetload was asked to do.
type config struct {
	url         string
	duration    time.Duration
	warmup      time.Duration
	concurrency int
	rate        float64 // requests per second; 0 = closed model
	keys        int
	mix         [numOps]int // weights
	limit       string
	capacity    string
	leakAmount  string
	leakPer     time.Duration
	period      string        // "" for a leaky limit, else the period's "every"
	window      time.Duration // 0, or the length of a rolling-window limit
	thresholds  []string      // the limit's thresholds ("80%", "4500"), none by default
	overrides   int           // overrides --setup puts on the limit (overridePattern), none by default
	tz          string
	history     bool
	cost        int64
	setup       bool // DELETE and PUT the limit first
	verify      bool
	verifyKeys  int // at most this many keys are read back (a random sample beyond)
	historyKeys int // at most this many keys have their history counted
	historyCap  int64
	populate    bool
	timeout     time.Duration
	client      string // "raw" (rawhttp.go) or "net/http"
	json        bool
	quiet       bool
}

// errHelp is returned after -h printed the usage.
var errHelp = errors.New("help requested")

// usageError is bad command-line input: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// A store that does not serve --overrides exits 4 (errNotServed).

// verifyError is a run whose store disagreed with what was accepted: exit 3.
type verifyError struct{ n int }

func (e verifyError) Error() string { return fmt.Sprintf("verify: %d mismatches", e.n) }

func exitCode(err error) int {
	var ue usageError
	var ve verifyError
	switch {
	case errors.As(err, &ue):
		return 2
	case errors.As(err, &ve):
		return 3
	case errors.Is(err, errNotServed):
		return 4
	}
	return 1
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

func parseConfig(args []string, stderr io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("budgetload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.url, "url", "http://127.0.0.1:8080", "budgetd base URL")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "how long to measure (after the warm-up)")
	fs.DurationVar(&cfg.warmup, "warmup", 1*time.Second, "how long to run before measuring")
	fs.IntVar(&cfg.concurrency, "concurrency", 64, "connections; the number of callers in the closed model, the most requests in flight with --rate")
	fs.Float64Var(&cfg.rate, "rate", 0, "open model: start this many operations per second on a fixed schedule, latency counted from the scheduled time (0 = closed model)")
	fs.IntVar(&cfg.keys, "keys", 1000, "number of keys the load is spread over (1 = one hot key)")
	mix := fs.String("mix", "fillup=70,can=20,reserve=5,multi=5", "weights of the operations: fillup, can (CanAccept), reserve (Reserve+Commit), multi (multi-bucket Fillup)")
	fs.StringVar(&cfg.limit, "limit", "budgetload", "limit name; --setup deletes and re-creates it")
	fs.StringVar(&cfg.capacity, "capacity", "1000000000000", "limit capacity")
	fs.StringVar(&cfg.leakAmount, "leak-amount", "1", "limit leak amount per --leak-per")
	fs.DurationVar(&cfg.leakPer, "leak-per", 87600*time.Hour, "limit leak period")
	fs.StringVar(&cfg.period, "period", "", "create a calendar-period limit that resets every day, week, month, quarter or year instead of a leaky one")
	fs.StringVar(&cfg.tz, "tz", "UTC", "the period's time zone (with --period)")
	fs.DurationVar(&cfg.window, "window", 0, "create a rolling-window limit of this length (at the default precision) instead of a leaky one")
	thresholds := fs.String("thresholds", "", `comma-separated thresholds of the limit ("50%,80%,4500"; events on crossing)`)
	fs.IntVar(&cfg.overrides, "overrides", 0, "with --setup, put this many overrides of the limit's capacity on it: half exact keys (k1, k3, …), half prefixes (k0*, k2*, …), so that each of the first that many keys resolves through one")
	fs.BoolVar(&cfg.history, "history", false, "create the limit with history on (verify then counts history entries)")
	fs.Int64Var(&cfg.cost, "cost", 1, "cost of each fillup (a reservation holds 2×cost and commits cost)")
	fs.BoolVar(&cfg.setup, "setup", true, "delete and re-create the limit before the run (so its buckets start empty)")
	fs.BoolVar(&cfg.verify, "verify", true, "read the buckets back after the run and compare with the accepted costs")
	fs.IntVar(&cfg.verifyKeys, "verify-keys", 200000, "read back at most this many keys (a random sample beyond)")
	fs.IntVar(&cfg.historyKeys, "history-keys", 200, "count the history of at most this many keys")
	fs.Int64Var(&cfg.historyCap, "history-cap", 10000, "the store keeps at least this many newest history entries per bucket (verify expects no more)")
	fs.BoolVar(&cfg.populate, "populate", false, "instead of a timed run, charge every one of --keys keys once (multi-bucket calls of 64 items) and exit")
	fs.DurationVar(&cfg.timeout, "timeout", 10*time.Second, "per-request timeout")
	fs.StringVar(&cfg.client, "client", "raw", "HTTP client for http:// URLs: raw (each caller's own connection, a third of net/http's CPU a call) or net/http; https:// always uses net/http")
	fs.BoolVar(&cfg.json, "json", false, "print the summary as JSON on stdout")
	fs.BoolVar(&cfg.quiet, "quiet", false, "no progress lines")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, errHelp
		}
		return cfg, usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return cfg, usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if *thresholds != "" {
		cfg.thresholds = strings.Split(*thresholds, ",")
	}
	u, err := url.Parse(cfg.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return cfg, usageError{fmt.Sprintf("--url %q: want http://host:port", cfg.url)}
	}
	cfg.url = strings.TrimRight(cfg.url, "/")
	if err := cfg.check(); err != nil {
		return cfg, err
	}
	if cfg.mix, err = parseMix(*mix); err != nil {
		return cfg, usageError{err.Error()}
	}
	return cfg, nil
}

// check refuses flag values budgetload cannot run with (a usageError).
func (cfg config) check() error {
	switch {
	case cfg.duration <= 0 && !cfg.populate:
		return usageError{"--duration must be positive"}
	case cfg.warmup < 0:
		return usageError{"--warmup must not be negative"}
	case cfg.concurrency < 1:
		return usageError{"--concurrency must be at least 1"}
	case cfg.rate < 0:
		return usageError{"--rate must not be negative"}
	case cfg.keys < 1:
		return usageError{"--keys must be at least 1"}
	case cfg.cost < 1 || cfg.cost > 1e11:
		return usageError{"--cost must be between 1 and 10^11"}
	case !nameRE.MatchString(cfg.limit):
		return usageError{fmt.Sprintf("--limit %q is not a limit name", cfg.limit)}
	case cfg.leakPer < time.Microsecond:
		return usageError{"--leak-per must be at least 1µs"}
	case cfg.period != "" && !slices.Contains([]string{"day", "week", "month", "quarter", "year"}, cfg.period):
		return usageError{fmt.Sprintf("--period %q is not day, week, month, quarter or year", cfg.period)}
	case cfg.window != 0 && cfg.period != "":
		return usageError{"--window and --period are two kinds of limit: give one"}
	case cfg.overrides < 0 || cfg.overrides > 10_000_000:
		return usageError{"--overrides must be from 0 to 10000000"}
	case cfg.overrides > 0 && !cfg.setup:
		return usageError{"--overrides is put by --setup: drop --setup=false"}
	case cfg.client != "raw" && cfg.client != "net/http":
		return usageError{fmt.Sprintf("--client %q: want raw or net/http", cfg.client)}
	case cfg.window != 0 && (cfg.window < time.Second || cfg.window > 8760*time.Hour):
		return usageError{"--window must be from 1s to 8760h"}
	}
	return nil
}

// parseMix reads "fillup=70,can=20,reserve=5,multi=5".
func parseMix(s string) ([numOps]int, error) {
	var m [numOps]int
	total := 0
	for part := range strings.SplitSeq(s, ",") {
		name, w, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.Atoi(w)
		if !ok || err != nil || n < 0 {
			return m, fmt.Errorf("--mix %q: want op=weight,… with whole weights", s)
		}
		found := false
		for o := range numOps {
			if opNames[o] == name {
				m[o], found = n, true
			}
		}
		if !found {
			return m, fmt.Errorf("--mix: unknown operation %q (want %s)", name, strings.Join(opNames[:], ", "))
		}
		total += n
	}
	if total == 0 {
		return m, fmt.Errorf("--mix %q: the weights add up to zero", s)
	}
	return m, nil
}

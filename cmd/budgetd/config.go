package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/budgetd/budgetd/internal/postgres"
)

// config is everything budgetd can be told, by flag or environment.
type config struct {
	addr            string
	store           string
	maxTTL          time.Duration
	pgIsolation     string
	redisEviction   string
	shutdownTimeout time.Duration
	logLevel        string
}

// errHelp is returned after --help printed the usage: not a failure.
var errHelp = errors.New("help requested")

// usageError is bad configuration: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func exitCode(err error) int {
	var coded interface{ ExitCode() int } // the operator CLI's exits (cli.go)
	if errors.As(err, &coded) {
		return coded.ExitCode()
	}
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// option is one flag with its environment variable and default.
type option struct {
	flag, env, def, help string
}

var options = []option{
	{"addr", "BUDGETD_ADDR", ":8080", "listen address"},
	{"store", "BUDGETD_STORE", "memory", "store URL: memory, postgres://…, redis://… or redis+cluster://host:port,host:port"},
	{"max-ttl", "BUDGETD_MAX_TTL", "24h", "longest hold a caller may ask for (at least 1s)"},
	{"pg-isolation", "BUDGETD_PG_ISOLATION", "read-committed", "PostgreSQL isolation level: read-committed or serializable"},
	{"redis-eviction-check", "BUDGETD_REDIS_EVICTION_CHECK", "refuse", "when Redis may evict keys (maxmemory-policy): refuse to start, or warn"},
	{"shutdown-timeout", "BUDGETD_SHUTDOWN_TIMEOUT", "10s", "how long in-flight requests may finish after SIGTERM"},
	{"log-level", "BUDGETD_LOG_LEVEL", "info", "debug, info, warn or error"},
}

// parseConfig reads flags, then the environment for every flag not given,
// then the defaults. It returns the remaining arguments (a subcommand).
func parseConfig(args []string, getenv func(string) string, stdout io.Writer) (config, []string, error) {
	fs := flag.NewFlagSet("budgetd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	values := make(map[string]*string, len(options))
	for _, o := range options {
		values[o.flag] = fs.String(o.flag, "", o.help)
	}
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return config{}, nil, errHelp
		}
		return config{}, nil, usageError{err.Error() + " (see budgetd --help)"}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	get := func(name string) string {
		for _, o := range options {
			if o.flag != name {
				continue
			}
			if set[name] {
				return *values[name]
			}
			if v := getenv(o.env); v != "" {
				return v
			}
			return o.def
		}
		panic("unknown option " + name)
	}
	cfg := config{
		addr:          get("addr"),
		store:         get("store"),
		pgIsolation:   get("pg-isolation"),
		redisEviction: get("redis-eviction-check"),
		logLevel:      get("log-level"),
	}
	var err error
	if cfg.maxTTL, err = durationOption("max-ttl", get("max-ttl")); err != nil {
		return config{}, nil, err
	}
	if cfg.maxTTL < time.Second {
		return config{}, nil, usageError{"--max-ttl must be at least 1s"}
	}
	if cfg.shutdownTimeout, err = durationOption("shutdown-timeout", get("shutdown-timeout")); err != nil {
		return config{}, nil, err
	}
	if _, err := postgres.ParseIsolation(cfg.pgIsolation); err != nil {
		return config{}, nil, usageError{fmt.Sprintf("--pg-isolation must be read-committed or serializable, not %q", cfg.pgIsolation)}
	}
	switch cfg.redisEviction {
	case "refuse", "warn":
	default:
		return config{}, nil, usageError{fmt.Sprintf("--redis-eviction-check must be refuse or warn, not %q", cfg.redisEviction)}
	}
	switch cfg.logLevel {
	case "debug", "info", "warn", "error":
	default:
		return config{}, nil, usageError{fmt.Sprintf("--log-level must be debug, info, warn or error, not %q", cfg.logLevel)}
	}
	return cfg, fs.Args(), nil
}

func durationOption(name, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, usageError{fmt.Sprintf("--%s: %q is not a duration like 30s or 24h", name, v)}
	}
	return d, nil
}

func usage(w io.Writer) {
	var b strings.Builder
	b.WriteString(`budgetd — exact decimal leaky buckets over HTTP

Usage:
  budgetd [flags]            serve the API
  budgetd [flags] migrate    apply the PostgreSQL migrations of --store and exit
  budgetd limits|check|fillup|history|holds …   operator commands on a running budgetd (budgetd check --help)

Flags (each has an environment variable; a flag wins over its variable):
`)
	for _, o := range options {
		fmt.Fprintf(&b, "  --%-22s %-30s %s (default %q)\n", o.flag, o.env, o.help, o.def)
	}
	b.WriteString("\nThe memory store keeps state in the process only: it is lost when budgetd stops.\n")
	io.WriteString(w, b.String())
}

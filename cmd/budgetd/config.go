package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/internal/mysql"
	"github.com/budgetd/budgetd/internal/postgres"
	"github.com/budgetd/budgetd/internal/tracing"
)

// config is everything budgetd can be told, by flag or environment.
type config struct {
	addr            string
	store           string
	maxTTL          time.Duration
	pgIsolation     string
	redisEviction   string
	mysqlIsolation  string
	mysqlCache      int
	mysqlGroup      bool
	gcFloorMiB      int
	shutdownTimeout time.Duration
	shutdownDelay   time.Duration
	logLevel        string
	logFormat       string
	logKeys         bool
	authFile        string
	insecureNoAuth  bool
	tlsCert         string
	tlsKey          string
	tlsClientCA     string
	maxConns        int
	maxConnsPerIP   int
	idleTimeout     time.Duration
	// Redis's WAIT after each write (redis.WithWaitReplicas).
	redisWaitReplicas int
	redisWaitTimeout  time.Duration
	webhookURL        string
	webhookSecret     string // the file
	// grpcAddr serves Envoy's rate-limit service (grpc.go); "" is off.
	grpcAddr string
	// limitsFile is applied at start (docs/limits-as-code.md).
	limitsFile string
	// tracing is what the OTEL_* variables ask (docs/tracing.md).
	tracing tracing.Config
	version bool
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

// option is one flag with its environment variable and default. A boolean
// option is given as a bare --flag (or --flag=false).
type option struct {
	flag, env, def, help string
	boolean              bool
}

var options = []option{
	{flag: "addr", env: "BUDGETD_ADDR", def: "127.0.0.1:8080", help: "listen address; without --auth-file (or --tls-client-ca) only a loopback address is allowed"},
	{flag: "store", env: "BUDGETD_STORE", def: "memory", help: "store URL: memory, postgres://…, mysql://USER:PASSWORD@HOST:PORT/DATABASE, redis://… or redis+cluster://host:port,host:port"},
	{flag: "grpc-addr", env: "BUDGETD_GRPC_ADDR", help: "also serve Envoy's rate-limit service (gRPC) on this address, with the same keys and TLS; descriptors map to limits by the envoy member of --limits-file (docs/envoy.md); off when empty"},
	{flag: "auth-file", env: "BUDGETD_AUTH_FILE", help: "API key file (NAME sha256:HEX SCOPES [LIMITS] per line); turns authentication on; reloaded on SIGHUP"},
	{flag: "insecure-no-auth", env: "BUDGETD_INSECURE_NO_AUTH", def: "false", help: "serve without authentication on a non-loopback address", boolean: true},
	{flag: "tls-cert", env: "BUDGETD_TLS_CERT", help: "TLS certificate file (PEM); with --tls-key serves HTTPS; reloaded on SIGHUP"},
	{flag: "tls-key", env: "BUDGETD_TLS_KEY", help: "TLS private key file (PEM)"},
	{flag: "tls-client-ca", env: "BUDGETD_TLS_CLIENT_CA", help: "CA bundle (PEM): require client certificates signed by it"},
	{flag: "max-ttl", env: "BUDGETD_MAX_TTL", def: "24h", help: "longest hold a caller may ask for (at least 1s)"},
	{flag: "pg-isolation", env: "BUDGETD_PG_ISOLATION", def: "read-committed", help: "PostgreSQL isolation level: read-committed or serializable"},
	{flag: "mysql-isolation", env: "BUDGETD_MYSQL_ISOLATION", def: "repeatable-read", help: "MySQL/MariaDB isolation level: repeatable-read or read-committed"},
	{flag: "mysql-cache", env: "BUDGETD_MYSQL_CACHE", def: strconv.Itoa(mysql.DefaultCacheEntries), help: "MySQL/MariaDB decision cache: at most this many buckets and limits, filled at start from the rows already there, then the ones this instance wrote last (about 180 bytes each), decided on in one round trip (0: off, every write two round trips; docs/mysql.md)"},
	{flag: "mysql-group-commit", env: "BUDGETD_MYSQL_GROUP_COMMIT", def: "true", help: "MySQL/MariaDB group commit: the single-bucket Fillups that arrive together, whatever their buckets, are decided together (each bucket's in arrival order) and sent as one write (needs the decision cache; docs/mysql.md)", boolean: true},
	{flag: "gc-floor", env: "BUDGETD_GC_FLOOR", def: "64", help: "MiB of heap the garbage collector lets grow before its first cycles, however small the live heap (address space set aside, never touched, so no memory is used; 0: off, Go's default of 4 MiB; docs/operations.md)"},
	{flag: "redis-eviction-check", env: "BUDGETD_REDIS_EVICTION_CHECK", def: "refuse", help: "when Redis may evict keys (maxmemory-policy): refuse to start, or warn"},
	{flag: "redis-wait-replicas", env: "BUDGETD_REDIS_WAIT_REPLICAS", def: "0", help: "Redis (standalone or Sentinel): answer a write only once this many replicas have it (WAIT after it), else 503; 0: the primary's word alone (docs/redis.md \"Waiting for replicas\")"},
	{flag: "redis-wait-timeout", env: "BUDGETD_REDIS_WAIT_TIMEOUT", def: "1s", help: "Redis: how long a write waits for --redis-wait-replicas (shorter than a call's 2s deadline)"},
	{flag: "max-conns", env: "BUDGETD_MAX_CONNS", def: "4096", help: "most client connections open at once, HTTP and gRPC together; when all are taken, the one idle longest is closed, else the one longest without a request header once it has had 1s, and new ones wait to be accepted"},
	{flag: "max-conns-per-ip", env: "BUDGETD_MAX_CONNS_PER_IP", def: "1024", help: "most connections one client address may hold; more are closed at once (0: no such cap)"},
	{flag: "idle-timeout", env: "BUDGETD_IDLE_TIMEOUT", def: "30s", help: "how long an idle keep-alive connection (HTTP, or gRPC without a call) is kept open"},
	{flag: "shutdown-delay", env: "BUDGETD_SHUTDOWN_DELAY", def: "0s", help: "after SIGTERM, how long /readyz answers 503 before the listener closes"},
	{flag: "shutdown-timeout", env: "BUDGETD_SHUTDOWN_TIMEOUT", def: "10s", help: "how long in-flight requests may finish after SIGTERM"},
	{flag: "webhook-url", env: "BUDGETD_WEBHOOK_URL", help: "POST every threshold event to this http(s) URL, signed as Standard Webhooks (docs/alerts.md); needs --webhook-secret-file"},
	{flag: "webhook-secret-file", env: "BUDGETD_WEBHOOK_SECRET_FILE", help: "file holding the webhook signing secret: whsec_ and base64 (Standard Webhooks), or the key itself"},
	{flag: "limits-file", env: "BUDGETD_LIMITS_FILE", help: "a limits file (YAML or JSON: limits, overrides, the Envoy mapping) applied at start, before serving; a bad file stops the start (docs/limits-as-code.md)"},
	{flag: "log-level", env: "BUDGETD_LOG_LEVEL", def: "info", help: "debug, info, warn or error"},
	{flag: "log-format", env: "BUDGETD_LOG_FORMAT", def: "text", help: "text or json"},
	{flag: "log-keys", env: "BUDGETD_LOG_KEYS", def: "false", help: "put request paths, bucket keys included, in the access log and error lines (keys are often user ids or addresses)", boolean: true},
	{flag: "version", def: "false", help: "print the version and exit", boolean: true},
}

// optionValue is a flag.Value that remembers its text; boolean options
// take no argument.
type optionValue struct {
	v       string
	boolean bool
}

func (o *optionValue) String() string { return o.v }
func (o *optionValue) Set(s string) error {
	if o.boolean {
		if _, err := strconv.ParseBool(s); err != nil {
			return fmt.Errorf("want true or false, not %q", s)
		}
	}
	o.v = s
	return nil
}
func (o *optionValue) IsBoolFlag() bool { return o.boolean }

// parseConfig reads flags, then the environment for every flag not given,
// then the defaults. Flags may come before or after a command word
// (`budgetd migrate --store …`); the command words are returned.
func parseConfig(args []string, getenv func(string) string, stdout io.Writer) (config, []string, error) {
	get, words, err := parseFlags(args, getenv, stdout)
	if err != nil {
		return config{}, nil, err
	}
	cfg := config{
		addr:           get("addr"),
		store:          get("store"),
		pgIsolation:    get("pg-isolation"),
		redisEviction:  get("redis-eviction-check"),
		mysqlIsolation: get("mysql-isolation"),
		logLevel:       get("log-level"),
		logFormat:      get("log-format"),
		authFile:       get("auth-file"),
		tlsCert:        get("tls-cert"),
		tlsKey:         get("tls-key"),
		tlsClientCA:    get("tls-client-ca"),
		webhookURL:     get("webhook-url"),
		webhookSecret:  get("webhook-secret-file"),
		grpcAddr:       get("grpc-addr"),
		limitsFile:     get("limits-file"),
	}
	for _, parse := range []func(func(string) string) error{cfg.parseSwitches, cfg.parseDurations, cfg.parseCounts} {
		if err := parse(get); err != nil {
			return config{}, nil, err
		}
	}
	if err := cfg.check(); err != nil {
		return config{}, nil, err
	}
	if cfg.tracing, err = tracing.FromEnv(getenv); err != nil {
		return config{}, nil, usageError{err.Error()}
	}
	return cfg, words, nil
}

// parseFlags parses args, flags and command words in any order, and
// returns the words and get, which gives an option's value: the flag's if
// it was given, else its environment variable's if set, else its default.
// --help prints the usage to stdout and returns errHelp.
func parseFlags(args []string, getenv func(string) string, stdout io.Writer) (get func(string) string, words []string, err error) {
	fs := flag.NewFlagSet("budgetd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	values := make(map[string]*optionValue, len(options))
	for _, o := range options {
		values[o.flag] = &optionValue{boolean: o.boolean}
		fs.Var(values[o.flag], o.flag, o.help)
	}
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				usage(stdout)
				return nil, nil, errHelp
			}
			return nil, nil, usageError{err.Error() + " (see budgetd --help)"}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			words = append(words, rest...)
			break
		}
		words, args = append(words, rest[0]), rest[1:]
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	get = func(name string) string {
		for _, o := range options {
			if o.flag != name {
				continue
			}
			if set[name] {
				return values[name].v
			}
			if o.env != "" {
				if v := getenv(o.env); v != "" {
					return v
				}
			}
			return o.def
		}
		panic("unknown option " + name)
	}
	return get, words, nil
}

// parseSwitches reads the boolean options.
func (cfg *config) parseSwitches(get func(string) string) error {
	var err error
	if cfg.insecureNoAuth, err = boolOption("insecure-no-auth", get("insecure-no-auth")); err != nil {
		return err
	}
	if cfg.logKeys, err = boolOption("log-keys", get("log-keys")); err != nil {
		return err
	}
	if cfg.mysqlGroup, err = boolOption("mysql-group-commit", get("mysql-group-commit")); err != nil {
		return err
	}
	cfg.version, err = boolOption("version", get("version"))
	return err
}

// parseDurations reads the durations and checks their lower bounds.
func (cfg *config) parseDurations(get func(string) string) error {
	var err error
	if cfg.maxTTL, err = durationOption("max-ttl", get("max-ttl")); err != nil {
		return err
	}
	if cfg.maxTTL < time.Second {
		return usageError{"--max-ttl must be at least 1s"}
	}
	if cfg.shutdownTimeout, err = durationOption("shutdown-timeout", get("shutdown-timeout")); err != nil {
		return err
	}
	if cfg.shutdownDelay, err = durationOption("shutdown-delay", get("shutdown-delay")); err != nil {
		return err
	}
	if cfg.idleTimeout, err = durationOption("idle-timeout", get("idle-timeout")); err != nil {
		return err
	}
	if cfg.idleTimeout < time.Second {
		return usageError{"--idle-timeout must be at least 1s"}
	}
	if cfg.redisWaitTimeout, err = durationOption("redis-wait-timeout", get("redis-wait-timeout")); err != nil {
		return err
	}
	if cfg.redisWaitTimeout < time.Millisecond || cfg.redisWaitTimeout >= 2*time.Second {
		return usageError{"--redis-wait-timeout must be at least 1ms and shorter than a Redis call's 2s deadline"}
	}
	return nil
}

// parseCounts reads the whole numbers and checks their ranges.
func (cfg *config) parseCounts(get func(string) string) error {
	var err error
	if cfg.maxConns, err = strconv.Atoi(get("max-conns")); err != nil || cfg.maxConns < 1 {
		return usageError{fmt.Sprintf("--max-conns must be a whole number of at least 1, not %q", get("max-conns"))}
	}
	if cfg.maxConnsPerIP, err = strconv.Atoi(get("max-conns-per-ip")); err != nil || cfg.maxConnsPerIP < 0 {
		return usageError{fmt.Sprintf("--max-conns-per-ip must be a whole number of at least 0, not %q", get("max-conns-per-ip"))}
	}
	if cfg.mysqlCache, err = strconv.Atoi(get("mysql-cache")); err != nil || cfg.mysqlCache < 0 {
		return usageError{fmt.Sprintf("--mysql-cache must be a whole number of at least 0, not %q", get("mysql-cache"))}
	}
	if cfg.redisWaitReplicas, err = strconv.Atoi(get("redis-wait-replicas")); err != nil || cfg.redisWaitReplicas < 0 {
		return usageError{fmt.Sprintf("--redis-wait-replicas must be a whole number of at least 0, not %q", get("redis-wait-replicas"))}
	}
	if cfg.gcFloorMiB, err = strconv.Atoi(get("gc-floor")); err != nil || cfg.gcFloorMiB < 0 || cfg.gcFloorMiB > 1<<20 {
		return usageError{fmt.Sprintf("--gc-floor must be a whole number of MiB from 0 to 1048576, not %q", get("gc-floor"))}
	}
	return nil
}

// check checks the options that take one of a few words, and the options
// that go together.
func (cfg *config) check() error {
	if _, err := postgres.ParseIsolation(cfg.pgIsolation); err != nil {
		return usageError{fmt.Sprintf("--pg-isolation must be read-committed or serializable, not %q", cfg.pgIsolation)}
	}
	switch cfg.mysqlIsolation {
	case mysql.RepeatableRead, mysql.ReadCommitted:
	default:
		return usageError{fmt.Sprintf("--mysql-isolation must be repeatable-read or read-committed, not %q", cfg.mysqlIsolation)}
	}
	switch cfg.redisEviction {
	case "refuse", "warn":
	default:
		return usageError{fmt.Sprintf("--redis-eviction-check must be refuse or warn, not %q", cfg.redisEviction)}
	}
	switch cfg.logLevel {
	case "debug", "info", "warn", "error":
	default:
		return usageError{fmt.Sprintf("--log-level must be debug, info, warn or error, not %q", cfg.logLevel)}
	}
	switch cfg.logFormat {
	case "text", "json":
	default:
		return usageError{fmt.Sprintf("--log-format must be text or json, not %q", cfg.logFormat)}
	}
	if (cfg.tlsCert == "") != (cfg.tlsKey == "") {
		return usageError{"--tls-cert and --tls-key go together: give both or neither"}
	}
	if cfg.tlsClientCA != "" && cfg.tlsCert == "" {
		return usageError{"--tls-client-ca needs --tls-cert and --tls-key"}
	}
	return checkWebhook(*cfg)
}

// checkWebhook checks the webhook options: a URL and a secret file go
// together, and the URL is http(s) with a host. The file is read at start-up
// (readWebhookKey).
func checkWebhook(cfg config) error {
	switch {
	case cfg.webhookURL == "" && cfg.webhookSecret == "":
		return nil
	case cfg.webhookSecret == "":
		return usageError{"--webhook-url needs --webhook-secret-file: a file holding the secret budgetd signs the webhooks with (whsec_ and base64, as Standard Webhooks writes secrets)"}
	case cfg.webhookURL == "":
		return usageError{"--webhook-secret-file is given without --webhook-url: give the URL to send the events to, or neither"}
	}
	u, err := url.Parse(cfg.webhookURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageError{fmt.Sprintf("--webhook-url %q: want an http:// or https:// URL with a host, such as https://alerts.example.com/budgetd", redact(cfg.webhookURL))}
	}
	return nil
}

// readWebhookKey reads the signing key from --webhook-secret-file, as
// api.WebhookSecretKey reads a secret.
func readWebhookKey(file string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, usageError{fmt.Sprintf("--webhook-secret-file: %v", err)}
	}
	if strings.TrimSpace(string(b)) == "" {
		return nil, usageError{fmt.Sprintf("--webhook-secret-file %s is empty: put the secret in it (whsec_ and the base64 of 24 to 64 random bytes)", file)}
	}
	key, err := api.WebhookSecretKey(string(b))
	if err != nil {
		return nil, usageError{fmt.Sprintf("--webhook-secret-file %s: %v", file, err)}
	}
	return key, nil
}

// checkExposure refuses to serve without authentication (API keys or
// client certificates) anywhere but on a loopback address, unless the
// operator said --insecure-no-auth.
// The same holds for --grpc-addr.
func checkExposure(cfg config) error {
	if cfg.authFile != "" || cfg.tlsClientCA != "" || cfg.insecureNoAuth {
		return nil
	}
	for _, a := range []struct{ flag, addr string }{{"--addr", cfg.addr}, {"--grpc-addr", cfg.grpcAddr}} {
		if a.addr == "" || isLoopback(a.addr) {
			continue
		}
		return usageError{fmt.Sprintf("refusing to serve without authentication on %s, which other machines may reach: "+
			"give --auth-file PATH (mint a key with `budgetd token NAME --scopes admin`), "+
			"or listen on a loopback address (%s 127.0.0.1:PORT), "+
			"or pass --insecure-no-auth to let anyone who reaches %s change every limit", a.addr, a.flag, a.addr)}
	}
	return nil
}

// isLoopback reports whether addr (host:port) names only loopback
// addresses. An empty host means every interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func durationOption(name, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, usageError{fmt.Sprintf("--%s: %q is not a duration like 30s or 24h", name, v)}
	}
	return d, nil
}

func boolOption(name, v string) (bool, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, usageError{fmt.Sprintf("--%s: want true or false, not %q", name, v)}
	}
	return b, nil
}

func usage(w io.Writer) {
	var b strings.Builder
	b.WriteString(`budgetd — exact decimal leaky buckets over HTTP

Usage:
  budgetd [flags]                                serve the API
  budgetd migrate [flags]                        apply the PostgreSQL or MySQL/MariaDB migrations of --store and exit
  budgetd token NAME --scopes S [--limits L]     mint an API key: prints the token and its --auth-file line
  budgetd version                                print the version (also budgetd --version)
  budgetd limits|check|fillup|history|holds …    operator commands on a running budgetd (budgetd check --help)

Flags (each has an environment variable; a flag wins over its variable):
`)
	for _, o := range options {
		env := o.env
		if env == "" {
			env = "-"
		}
		def := fmt.Sprintf("(default %q)", o.def)
		if o.def == "" {
			def = "(default none)"
		}
		fmt.Fprintf(&b, "  --%-22s %-30s %s %s\n", o.flag, env, o.help, def)
	}
	b.WriteString("\nThe memory store keeps state in the process only: it is lost when budgetd stops.\n")
	b.WriteString("SIGHUP reloads the key file and the TLS certificates; a file that fails to load keeps the old ones.\n")
	io.WriteString(w, b.String())
}

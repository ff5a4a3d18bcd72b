package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/budgetd/budgetd/client"
	"github.com/shopspring/decimal"
)

// The operator CLI's exit codes: 0 accepted (or done), exitDenied for a
// denial, exitProblem when budgetd refused the call (its problem detail and
// field are printed), exitUnreachable when budgetd could not be reached or
// failed (network, timeout, 5xx), exitNotUnderstood when budgetd answered
// something the CLI cannot read (a version mismatch, a proxy in the way: not
// JSON, a document missing members, a 4xx without budgetd's problem), 2
// for a usage error (also input refused before sending).
const (
	exitProblem       = 1
	exitDenied        = 3
	exitUnreachable   = 4
	exitNotUnderstood = 5
)

// cliCommands are the first arguments that make budgetd an operator CLI.
var cliCommands = map[string]bool{
	"limits": true, "overrides": true, "grants": true, "check": true, "fillup": true, "history": true, "holds": true,
	"reserve": true, "commit": true, "release": true, "drain": true, "events": true, "help": true, "health": true, "apply": true,
}

// isCLI says whether args start with an operator command.
func isCLI(args []string) bool { return len(args) > 0 && cliCommands[args[0]] }

// cliError ends the CLI with an exit code; its message is printed by main.
type cliError struct {
	code int
	msg  string
}

func (e cliError) Error() string { return e.msg }

// ExitCode is the process's exit status for this error.
func (e cliError) ExitCode() int { return e.code }

const cliUsage = `Usage: budgetd COMMAND [flags] ARGS

Operator commands (on a running budgetd):
  budgetd limits list                                  list limits (with when a period resets)
  budgetd limits get NAME                              show a limit: its rule, mode (and grace), thresholds,
                                                       rollover, record denials and history
  budgetd limits set NAME [flags of put]               change only the flags named and keep the rest of the
                                                       limit (it is read, changed and written back), e.g.
                                                       budgetd limits set team-spend --capacity 6000;
                                                       --threshold none and --rollover-max none remove them
  budgetd limits put NAME --capacity C --period EVERY [--tz ZONE] [--start-day N] [--rollover-max M] [--history=false]
                                                       create or replace a calendar budget: C per day, week,
                                                       month, quarter or year in ZONE (default UTC), e.g.
                                                       --capacity 5000 --period month --tz Europe/Berlin;
                                                       --rollover-max M carries up to M left unused into the
                                                       next period
  budgetd limits put NAME --capacity C --leak A/PER [--history=false]
                                                       create or replace a leaky bucket (e.g. --leak 10/1s)
  budgetd limits put NAME --capacity C --window LENGTH [--precision P] [--history=false]
                                                       create or replace a rolling window: at most C in any
                                                       span of LENGTH, e.g. --capacity 5 --window 1m
                                                       any put takes --record-denials: a denied charge or hold
                                                       writes a denied history entry, and --mode enforce|shadow|soft
                                                       [--grace 10%]: shadow charges what enforce would deny
                                                       (marked), soft accepts up to capacity + grace (marked);
                                                       --threshold 80% (repeatable, or an amount) emits events.
                                                       put states the whole limit: on an existing limit it
                                                       refuses (exit 2) to drop what the limit has and the
                                                       command line does not name (thresholds, rollover, mode,
                                                       grace, record denials, history off, time zone, start
                                                       day, precision) and names it; use limits set to change
                                                       a part, or --replace to replace the whole limit
  budgetd limits delete NAME                           delete a limit with its buckets and history
  budgetd limits export                                every limit and override as a limits file (YAML), which
                                                       budgetd apply -f reads back as no change
  budgetd apply -f FILE [--dry-run] [--prune]          bring budgetd to the limits file FILE (YAML or JSON): print
                                                       the plan (create, change with old → new per field, delete,
                                                       unchanged) and apply it; --dry-run only prints it; --prune
                                                       also deletes the limits and overrides FILE does not name
                                                       (never without it); a bad file is refused (exit 2), naming
                                                       the line and the field, before anything is written
                                                       (docs/limits-as-code.md)
  budgetd overrides list LIMIT                         a limit's overrides (terms for a key or a key prefix)
  budgetd overrides get LIMIT PATTERN                  show one override
  budgetd overrides put LIMIT PATTERN [--capacity C] [--leak A/PER] [--tz ZONE] [--start-day N]
                        [--window LENGTH] [--expires-at TIME]
                                                       set the terms of the key PATTERN, or of every key that
                                                       starts with PREFIX for a PATTERN PREFIX* (quote it); the
                                                       most specific wins; terms of the limit's own kind; until
                                                       TIME (RFC 3339, or +DURATION from now), e.g. a
                                                       raise for three days: --capacity 8000 --expires-at +72h
  budgetd overrides delete LIMIT PATTERN               delete an override (the limit's terms apply again)
  budgetd grants add LIMIT KEY AMOUNT [--expires-at TIME|+DURATION] [-q]
                                                       add AMOUNT to the bucket's capacity until TIME (default
                                                       for a periodic limit: the end of the current period);
                                                       -q prints only the grant id:
                                                         grant=$(budgetd grants add team-spend team-a 500 -q)
  budgetd grants list LIMIT KEY                        the bucket's active grants
  budgetd grants revoke LIMIT KEY ID                   revoke a grant (its amount counts no more)
  budgetd check LIMIT KEY [COST]                       a bucket's state, or CanAccept of COST (changes nothing)
  budgetd fillup LIMIT KEY COST                        charge COST
  budgetd reserve LIMIT KEY AMOUNT [--ttl D] [-q]      hold AMOUNT; -q prints only the hold id:
                                                         hold=$(budgetd reserve team-spend team-a 40 -q)
  budgetd commit ID [AMOUNT] [--overrun]               end the hold ID, charging AMOUNT (default: the held amount)
  budgetd release ID                                   end the hold ID without charging
  budgetd drain LIMIT KEY AMOUNT                       lower the level by AMOUNT (refunds, corrections)
  budgetd history LIMIT KEY [--limit N] [--cursor C]   a bucket's history, newest first
  budgetd events [--after C] [--limit N]               events (thresholds crossed and recovered), oldest first;
                                                       the next cursor is printed to poll with
  budgetd holds LIMIT KEY                              a bucket's active holds
  budgetd health [-q]                                  exit 0 when budgetd serves calls (/readyz), 4 when
                                                       not: the container image's health check
  budgetd help                                         this text and the server's flags

Flags of the commands that write (fillup, reserve, commit, release, drain):
  --meta KEY=VALUE   store KEY=VALUE on the history entry (repeatable)
  --idempotency-key K  send K as the Idempotency-Key (default: a fresh one per call)

Flags of every command:
  --server URL     budgetd's address (env BUDGETD_SERVER, default http://127.0.0.1:8080)
  --token TOKEN    bearer token (env BUDGETD_TOKEN)
  --ca FILE        PEM CA certificate(s) to trust for https (env BUDGETD_CA)
  --cert FILE      PEM client certificate for a budgetd that requires one (env BUDGETD_CERT)
  --key FILE       its PEM private key (env BUDGETD_KEY)
  --timeout D      give up after D (default 10s)
  --json           print budgetd's JSON documents for scripts instead of a table

Exit status:
  0  accepted or done
  1  budgetd refused the call (bad input, not found, a closed hold): its code, detail and field are printed
  2  usage error, or input refused before sending
  3  denied (over budget): "retry after 8m38.4s (at 2026-11-28T15:08:39Z)" is printed
  4  budgetd unreachable or failing (network, timeout, 5xx); on https without --cert, a hint
     that budgetd may require a client certificate
  5  budgetd's answer was not understood (a version mismatch or a proxy in the way): a
     document of the wrong shape, or a 4xx that is not budgetd's problem (another server)
`

// metaFlag collects --meta KEY=VALUE flags.
type metaFlag map[string]string

func (m metaFlag) String() string { return "" }

func (m metaFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("--meta %q is not KEY=VALUE", v)
	}
	m[k] = val
	return nil
}

// listFlag collects a repeated flag's values.
type listFlag []string

func (l *listFlag) String() string { return "" }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// cli is the parsed command line of an operator command.
type cli struct {
	server, token, ca string
	cert, key         string
	timeout           time.Duration
	json, quiet       bool
	replace           bool
	// sent is when the command started calling budgetd.
	sent time.Time
	// named are the flags given on the command line.
	named             map[string]bool
	capacity, leak    string
	period, tz        string
	startDay          int
	window, precision time.Duration
	history           bool
	recordDenials     bool
	mode, grace       string
	thresholds        listFlag
	rolloverMax       string
	after             string
	expiresAt         string
	ttl               time.Duration
	overrun           bool
	meta              metaFlag
	idemKey, cursor   string
	limit             int
	// file, dryRun and prune are budgetd apply's -f, --dry-run, --prune.
	file          string
	dryRun, prune bool
	args          []string
	stdout        io.Writer
}

// runCLI runs an operator command: args[0] is the command.
func runCLI(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if args[0] == "help" {
		fmt.Fprint(stdout, cliUsage)
		fmt.Fprintln(stdout)
		usage(stdout)
		return nil
	}
	c := cli{stdout: stdout, meta: metaFlag{}}
	fs := flag.NewFlagSet("budgetd "+args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.server, "server", or(getenv("BUDGETD_SERVER"), "http://127.0.0.1:8080"), "")
	fs.StringVar(&c.token, "token", getenv("BUDGETD_TOKEN"), "")
	fs.StringVar(&c.ca, "ca", getenv("BUDGETD_CA"), "")
	fs.StringVar(&c.cert, "cert", getenv("BUDGETD_CERT"), "")
	fs.StringVar(&c.key, "key", getenv("BUDGETD_KEY"), "")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "")
	fs.BoolVar(&c.json, "json", false, "")
	fs.BoolVar(&c.quiet, "q", false, "")
	fs.BoolVar(&c.replace, "replace", false, "")
	fs.StringVar(&c.capacity, "capacity", "", "")
	fs.StringVar(&c.leak, "leak", "", "")
	fs.StringVar(&c.period, "period", "", "")
	fs.StringVar(&c.tz, "tz", "", "")
	fs.IntVar(&c.startDay, "start-day", 0, "")
	fs.DurationVar(&c.window, "window", 0, "")
	fs.DurationVar(&c.precision, "precision", 0, "")
	fs.BoolVar(&c.history, "history", true, "")
	fs.BoolVar(&c.recordDenials, "record-denials", false, "")
	fs.StringVar(&c.mode, "mode", "", "")
	fs.StringVar(&c.grace, "grace", "", "")
	fs.Var(&c.thresholds, "threshold", "")
	fs.StringVar(&c.rolloverMax, "rollover-max", "", "")
	fs.StringVar(&c.after, "after", "", "")
	fs.StringVar(&c.expiresAt, "expires-at", "", "")
	fs.DurationVar(&c.ttl, "ttl", 0, "")
	fs.BoolVar(&c.overrun, "overrun", false, "")
	fs.Var(c.meta, "meta", "")
	fs.StringVar(&c.idemKey, "idempotency-key", "", "")
	fs.StringVar(&c.cursor, "cursor", "", "")
	fs.IntVar(&c.limit, "limit", 0, "")
	fs.StringVar(&c.file, "f", "", "")
	fs.BoolVar(&c.dryRun, "dry-run", false, "")
	fs.BoolVar(&c.prune, "prune", false, "")
	// Flags may come before, between or after the arguments.
	rest := args[1:]
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(stdout, cliUsage)
				return nil
			}
			return usageError{err.Error() + " (see budgetd help)"}
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		c.args = append(c.args, rest[0])
		rest = rest[1:]
	}
	c.named = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { c.named[f.Name] = true })
	cl, err := c.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	c.sent = time.Now()
	err = c.dispatch(ctx, cl, args[0])
	var ce cliError
	var ue usageError
	if err == nil || errors.As(err, &ce) || errors.As(err, &ue) {
		return err
	}
	return c.callError(err)
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// client makes the client of the flags: the token, and for https a CA to
// trust and a client certificate for mTLS.
func (c *cli) client() (*client.Client, error) {
	opts := []client.Option{client.WithToken(c.token)}
	if c.ca != "" || c.cert != "" || c.key != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.ca != "" {
			pem, err := os.ReadFile(c.ca)
			if err != nil {
				return nil, usageError{fmt.Sprintf("--ca: %v", err)}
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, usageError{fmt.Sprintf("--ca: no PEM certificate in %s", c.ca)}
			}
			cfg.RootCAs = pool
		}
		if (c.cert == "") != (c.key == "") {
			return nil, usageError{"--cert and --key go together: a client certificate and its private key"}
		}
		if c.cert != "" {
			pair, err := tls.LoadX509KeyPair(c.cert, c.key)
			if err != nil {
				return nil, usageError{fmt.Sprintf("--cert/--key: %v", err)}
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		opts = append(opts, client.WithTLSConfig(cfg))
	}
	cl, err := client.New(c.server, opts...)
	if err != nil {
		return nil, usageError{fmt.Sprintf("--server: %v", err)}
	}
	return cl, nil
}

// callError turns a failed call into the CLI's exit: budgetd's problem
// (code, detail and field), an answer not understood (also a 4xx that is
// not budgetd's problem: a proxy or another server answered), or an
// unreachable budgetd.
func (c *cli) callError(err error) error {
	var p *client.Error
	if errors.As(err, &p) {
		msg := string(p.Code)
		if p.Detail != "" {
			msg += ": " + p.Detail
		}
		if p.Field != "" {
			msg += " (field " + p.Field + ")"
		}
		switch {
		case p.Status == 0:
			return usageError{msg}
		case p.Status >= 500:
			return cliError{exitUnreachable, fmt.Sprintf("%s [HTTP %d]", msg, p.Status)}
		case p.NotBudgetd:
			return cliError{exitNotUnderstood, fmt.Sprintf("something that is not budgetd answered HTTP %d (no budgetd problem document; is --server %s budgetd's address, or is a proxy in the way?): %s",
				p.Status, c.server, clip(p.Detail, 200))}
		}
		return cliError{exitProblem, fmt.Sprintf("%s [HTTP %d]", msg, p.Status)}
	}
	if errors.Is(err, client.ErrBadAnswer) {
		return cliError{exitNotUnderstood, "budgetd answered, but the answer was not understood (is --server a budgetd of this version?): " + err.Error()}
	}
	msg := "budgetd could not be reached: " + err.Error()
	if c.maybeNeedsCert(err) {
		msg += " (budgetd may require a client certificate: give one with --cert FILE --key FILE, or BUDGETD_CERT and BUDGETD_KEY)"
	}
	return cliError{exitUnreachable, msg}
}

// maybeNeedsCert says whether err, on https without a client certificate,
// looks like a server that requires one: it ends the handshake (TLS 1.3:
// the first write after it fails with a broken pipe or a reset, or, over
// HTTP/2, the client connection cannot be set up) or says "certificate
// required".
func (c *cli) maybeNeedsCert(err error) bool {
	if c.cert != "" || !strings.HasPrefix(strings.ToLower(c.server), "https:") {
		return false
	}
	s := err.Error()
	for _, sign := range []string{"broken pipe", "connection reset", "certificate required", "bad certificate", "handshake failure", "EOF",
		"client conn could not be established"} {
		if strings.Contains(s, sign) {
			return true
		}
	}
	return false
}

// clip shortens s to at most n bytes, for a message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// want checks the number of arguments.
func (c *cli) want(cmd string, min, max int) error {
	if len(c.args) < min || len(c.args) > max {
		return usageError{fmt.Sprintf("budgetd %s: wrong arguments %q (see budgetd %s --help)", cmd, c.args, strings.Fields(cmd)[0])}
	}
	return nil
}

func (c *cli) dispatch(ctx context.Context, cl *client.Client, cmd string) error {
	switch cmd {
	case "limits":
		return c.limits(ctx, cl)
	case "apply":
		return c.applyCmd(ctx, cl)
	case "overrides":
		return c.overrides(ctx, cl)
	case "grants":
		return c.grants(ctx, cl)
	case "check":
		return c.checkCmd(ctx, cl)
	case "fillup":
		return c.fillupCmd(ctx, cl)
	case "reserve":
		return c.reserveCmd(ctx, cl)
	case "commit":
		return c.commitCmd(ctx, cl)
	case "release":
		return c.releaseCmd(ctx, cl)
	case "drain":
		return c.drainCmd(ctx, cl)
	case "events":
		return c.eventsCmd(ctx, cl)
	case "history":
		return c.historyCmd(ctx, cl)
	case "holds":
		return c.holdsCmd(ctx, cl)
	case "health":
		return c.healthCmd(ctx, cl)
	}
	return usageError{"unknown command " + cmd}
}

// checkCmd runs budgetd check.
func (c *cli) checkCmd(ctx context.Context, cl *client.Client) error {
	if err := c.want("check", 2, 3); err != nil {
		return err
	}
	if len(c.args) == 2 {
		b, err := cl.Bucket(ctx, c.args[0], c.args[1])
		if err != nil {
			return err
		}
		return c.printBucket(b)
	}
	cost, err := parseAmount("COST", c.args[2])
	if err != nil {
		return err
	}
	d, err := cl.CanAccept(ctx, c.args[0], c.args[1], cost)
	if err != nil {
		return err
	}
	return c.printDecision(d)
}

// fillupCmd runs budgetd fillup.
func (c *cli) fillupCmd(ctx context.Context, cl *client.Client) error {
	if err := c.want("fillup", 3, 3); err != nil {
		return err
	}
	cost, err := parseAmount("COST", c.args[2])
	if err != nil {
		return err
	}
	d, err := cl.Fillup(ctx, c.args[0], c.args[1], cost, c.callOptions()...)
	if err != nil {
		return err
	}
	return c.printDecision(d)
}

// reserveCmd runs budgetd reserve.
func (c *cli) reserveCmd(ctx context.Context, cl *client.Client) error {
	if err := c.want("reserve", 3, 3); err != nil {
		return err
	}
	amt, err := parseAmount("AMOUNT", c.args[2])
	if err != nil {
		return err
	}
	h, d, err := cl.Reserve(ctx, c.args[0], c.args[1], amt, c.ttl, c.callOptions()...)
	if err != nil {
		return err
	}
	return c.printReserved(h, d)
}

// commitCmd runs budgetd commit.
func (c *cli) commitCmd(ctx context.Context, cl *client.Client) error {
	if err := c.want("commit", 1, 2); err != nil {
		return err
	}
	var amt *decimal.Decimal
	if len(c.args) == 2 {
		a, err := parseAmount("AMOUNT", c.args[1])
		if err != nil {
			return err
		}
		amt = &a
	}
	r, err := cl.Commit(ctx, c.args[0], amt, c.overrun, c.callOptions()...)
	if err != nil {
		return err
	}
	return c.printResolved(r)
}

// releaseCmd runs budgetd release.
func (c *cli) releaseCmd(ctx context.Context, cl *client.Client) error {
	if err := c.want("release", 1, 1); err != nil {
		return err
	}
	r, err := cl.Release(ctx, c.args[0], c.callOptions()...)
	if err != nil {
		return err
	}
	return c.printResolved(r)
}

// drainCmd runs budgetd drain.
func (c *cli) drainCmd(ctx context.Context, cl *client.Client) error {
	if err := c.want("drain", 3, 3); err != nil {
		return err
	}
	amt, err := parseAmount("AMOUNT", c.args[2])
	if err != nil {
		return err
	}
	d, err := cl.Drain(ctx, c.args[0], c.args[1], amt, c.callOptions()...)
	if err != nil {
		return err
	}
	return c.printDrained(d)
}

// eventsCmd runs budgetd events.
func (c *cli) eventsCmd(ctx context.Context, cl *client.Client) error {
	if err := c.want("events", 0, 0); err != nil {
		return err
	}
	es, next, err := cl.Events(ctx, c.after, c.limit)
	if err != nil {
		return err
	}
	return c.printEvents(es, next)
}

// historyCmd runs budgetd history.
func (c *cli) historyCmd(ctx context.Context, cl *client.Client) error {
	if err := c.want("history", 2, 2); err != nil {
		return err
	}
	es, next, err := cl.History(ctx, c.args[0], c.args[1], c.cursor, c.limit)
	if err != nil {
		return err
	}
	return c.printHistory(es, next)
}

// holdsCmd runs budgetd holds.
func (c *cli) holdsCmd(ctx context.Context, cl *client.Client) error {
	if err := c.want("holds", 2, 2); err != nil {
		return err
	}
	hs, err := cl.Holds(ctx, c.args[0], c.args[1])
	if err != nil {
		return err
	}
	return c.printHolds(hs)
}

// callOptions are the Idempotency-Key and meta of a writing command.
func (c *cli) callOptions() []client.CallOption {
	var opts []client.CallOption
	if c.idemKey != "" {
		opts = append(opts, client.IdempotencyKey(c.idemKey))
	}
	if len(c.meta) > 0 {
		opts = append(opts, client.Meta(c.meta))
	}
	return opts
}

func parseAmount(what, s string) (decimal.Decimal, error) {
	d, err := decimal.NewFromString(s)
	if err != nil || strings.ContainsAny(s, "eE+ ") {
		return decimal.Decimal{}, usageError{fmt.Sprintf("%s %q is not a plain decimal (like 12 or 12.37)", what, s)}
	}
	return d, nil
}

// itoa is strconv.Itoa, for the tables.
func itoa(n int) string { return strconv.Itoa(n) }

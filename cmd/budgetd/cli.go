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
	"strings"
	"time"

	"github.com/budgetd/budgetd/client"
	"github.com/shopspring/decimal"
)

// The operator CLI's exit codes: 0 accepted (or done), exitDenied for a
// denial, exitProblem when budgetd refused the call (its problem detail and
// field are printed), exitUnreachable when budgetd could not be reached or
// failed (network, timeout, 5xx), 2 for a usage error.
const (
	exitProblem     = 1
	exitDenied      = 3
	exitUnreachable = 4
)

// cliCommands are the first arguments that make budgetd an operator CLI.
var cliCommands = map[string]bool{"limits": true, "check": true, "fillup": true, "history": true, "holds": true}

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
  budgetd limits list                                  list limits
  budgetd limits get NAME                              show a limit
  budgetd limits put NAME --capacity C --leak A/PER [--history=false]
                                                       create or update a limit (e.g. --leak 5000/720h)
  budgetd limits delete NAME                           delete a limit with its buckets and history
  budgetd check LIMIT KEY [COST]                       a bucket's state, or CanAccept of COST (changes nothing)
  budgetd fillup LIMIT KEY COST [--idempotency-key K]  charge COST
  budgetd history LIMIT KEY [--limit N] [--cursor C]   a bucket's history, newest first
  budgetd holds LIMIT KEY                              a bucket's active holds

Flags of every command:
  --server URL     budgetd's address (env BUDGETD_SERVER, default http://127.0.0.1:8080)
  --token TOKEN    bearer token (env BUDGETD_TOKEN)
  --ca FILE        PEM CA certificate(s) to trust for https (env BUDGETD_CA)
  --timeout D      give up after D (default 10s)
  --json           print JSON for scripts instead of a table

Exit status: 0 accepted or done, 3 denied, 1 budgetd refused the call (bad input, not found),
4 budgetd unreachable or failing, 2 usage error.
`

// cli is the parsed command line of an operator command.
type cli struct {
	server, token, ca string
	timeout           time.Duration
	json              bool
	capacity, leak    string
	history           bool
	idemKey, cursor   string
	limit             int
	args              []string
	stdout            io.Writer
}

// runCLI runs an operator command: args[0] is the command.
func runCLI(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := cli{stdout: stdout}
	fs := flag.NewFlagSet("budgetd "+args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.server, "server", or(getenv("BUDGETD_SERVER"), "http://127.0.0.1:8080"), "")
	fs.StringVar(&c.token, "token", getenv("BUDGETD_TOKEN"), "")
	fs.StringVar(&c.ca, "ca", getenv("BUDGETD_CA"), "")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "")
	fs.BoolVar(&c.json, "json", false, "")
	fs.StringVar(&c.capacity, "capacity", "", "")
	fs.StringVar(&c.leak, "leak", "", "")
	fs.BoolVar(&c.history, "history", true, "")
	fs.StringVar(&c.idemKey, "idempotency-key", "", "")
	fs.StringVar(&c.cursor, "cursor", "", "")
	fs.IntVar(&c.limit, "limit", 0, "")
	// Flags may come before, between or after the arguments.
	rest := args[1:]
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(stdout, cliUsage)
				return nil
			}
			return usageError{err.Error() + " (see budgetd " + args[0] + " --help)"}
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		c.args = append(c.args, rest[0])
		rest = rest[1:]
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	err = c.dispatch(ctx, cl, args[0])
	var ce cliError
	var ue usageError
	if err == nil || errors.As(err, &ce) || errors.As(err, &ue) {
		return err
	}
	return callError(err)
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (c *cli) client() (*client.Client, error) {
	opts := []client.Option{client.WithToken(c.token)}
	if c.ca != "" {
		pem, err := os.ReadFile(c.ca)
		if err != nil {
			return nil, usageError{fmt.Sprintf("--ca: %v", err)}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usageError{fmt.Sprintf("--ca: no PEM certificate in %s", c.ca)}
		}
		opts = append(opts, client.WithTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	}
	cl, err := client.New(c.server, opts...)
	if err != nil {
		return nil, usageError{fmt.Sprintf("--server: %v", err)}
	}
	return cl, nil
}

// callError turns a failed call into the CLI's exit: budgetd's problem
// (detail and field) or an unreachable budgetd.
func callError(err error) error {
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
		}
		return cliError{exitProblem, fmt.Sprintf("%s [HTTP %d]", msg, p.Status)}
	}
	return cliError{exitUnreachable, "budgetd could not be reached: " + err.Error()}
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
		if len(c.args) == 0 {
			return usageError{"budgetd limits: list, get, put or delete (see budgetd limits --help)"}
		}
		sub := c.args[0]
		c.args = c.args[1:]
		switch sub {
		case "list":
			return c.limitsList(ctx, cl)
		case "get":
			if err := c.want("limits get", 1, 1); err != nil {
				return err
			}
			l, err := cl.GetLimit(ctx, c.args[0])
			if err != nil {
				return err
			}
			return c.printLimits([]client.Limit{l}, true)
		case "put":
			return c.limitsPut(ctx, cl)
		case "delete":
			if err := c.want("limits delete", 1, 1); err != nil {
				return err
			}
			if err := cl.DeleteLimit(ctx, c.args[0]); err != nil {
				return err
			}
			if c.json {
				return c.printJSON(map[string]any{"deleted": c.args[0]})
			}
			fmt.Fprintf(c.stdout, "deleted limit %s\n", c.args[0])
			return nil
		}
		return usageError{fmt.Sprintf("budgetd limits: unknown subcommand %q", sub)}
	case "check":
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
	case "fillup":
		if err := c.want("fillup", 3, 3); err != nil {
			return err
		}
		cost, err := parseAmount("COST", c.args[2])
		if err != nil {
			return err
		}
		var opts []client.CallOption
		if c.idemKey != "" {
			opts = append(opts, client.IdempotencyKey(c.idemKey))
		}
		d, err := cl.Fillup(ctx, c.args[0], c.args[1], cost, opts...)
		if err != nil {
			return err
		}
		return c.printDecision(d)
	case "history":
		if err := c.want("history", 2, 2); err != nil {
			return err
		}
		es, next, err := cl.History(ctx, c.args[0], c.args[1], c.cursor, c.limit)
		if err != nil {
			return err
		}
		return c.printHistory(es, next)
	case "holds":
		if err := c.want("holds", 2, 2); err != nil {
			return err
		}
		hs, err := cl.Holds(ctx, c.args[0], c.args[1])
		if err != nil {
			return err
		}
		return c.printHolds(hs)
	}
	return usageError{"unknown command " + cmd}
}

func parseAmount(what, s string) (decimal.Decimal, error) {
	d, err := decimal.NewFromString(s)
	if err != nil || strings.ContainsAny(s, "eE+ ") {
		return decimal.Decimal{}, usageError{fmt.Sprintf("%s %q is not a plain decimal (like 12 or 12.37)", what, s)}
	}
	return d, nil
}

func (c *cli) limitsList(ctx context.Context, cl *client.Client) error {
	if err := c.want("limits list", 0, 0); err != nil {
		return err
	}
	var all []client.Limit
	cursor := c.cursor
	for {
		ls, next, err := cl.ListLimits(ctx, cursor, 1000)
		if err != nil {
			return err
		}
		all = append(all, ls...)
		if next == "" {
			break
		}
		cursor = next
	}
	return c.printLimits(all, false)
}

func (c *cli) limitsPut(ctx context.Context, cl *client.Client) error {
	if err := c.want("limits put", 1, 1); err != nil {
		return err
	}
	if c.capacity == "" || c.leak == "" {
		return usageError{"budgetd limits put NAME needs --capacity C and --leak AMOUNT/PER (e.g. --leak 5000/720h)"}
	}
	capacity, err := parseAmount("--capacity", c.capacity)
	if err != nil {
		return err
	}
	amt, per, ok := strings.Cut(c.leak, "/")
	if !ok {
		return usageError{fmt.Sprintf("--leak %q is not AMOUNT/PER (e.g. 5000/720h)", c.leak)}
	}
	leakAmount, err := parseAmount("--leak amount", amt)
	if err != nil {
		return err
	}
	d, err := time.ParseDuration(per)
	if err != nil {
		return usageError{fmt.Sprintf("--leak: %q is not a duration like 1s or 720h", per)}
	}
	history := c.history
	l, err := cl.PutLimit(ctx, c.args[0], client.LimitSpec{Capacity: capacity, Leak: &client.Leak{Amount: leakAmount, Per: d}, History: &history})
	if err != nil {
		return err
	}
	return c.printLimits([]client.Limit{l}, true)
}

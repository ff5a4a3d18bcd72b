package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/budgetd/budgetd/internal/auth"
)

// tokenCommand is `budgetd token NAME --scopes S [--limits L]`: it mints a
// random token, prints it once with the line to add to the key file, and
// stores nothing.
//
// stdout gets two lines, the token and the file line, so that scripts can
// read them; the explanation goes to stderr.
func tokenCommand(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("budgetd token", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	scopes := fs.String("scopes", "", "read, charge or admin, separated by commas")
	limits := fs.String("limits", "", "limit names the key may act on, each exact or a prefix ending in * (default: every limit)")
	var name string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprintln(stdout, "usage: budgetd token NAME --scopes read|charge|admin[,…] [--limits 'team-*,shared']")
				return nil
			}
			return usageError{"token: " + err.Error()}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if name != "" {
			return usageError{fmt.Sprintf("token: one NAME only, found %q and %q", name, rest[0])}
		}
		name, args = rest[0], rest[1:]
	}
	if name == "" {
		return usageError{"token: give the key a NAME: budgetd token NAME --scopes charge"}
	}
	if err := auth.ValidateName(name); err != nil {
		return usageError{"token: " + err.Error()}
	}
	sc, err := auth.ParseScopes(*scopes)
	if err != nil {
		return usageError{"token: --scopes: " + err.Error()}
	}
	var ls []string
	if *limits != "" {
		if ls, err = auth.ParseLimits(*limits); err != nil {
			return usageError{"token: --limits: " + err.Error()}
		}
	}
	tok, err := auth.NewToken()
	if err != nil {
		return fmt.Errorf("token: %w", err)
	}
	fmt.Fprintln(stderr, "budgetd token: line 1 is the token, shown only now: give it to the caller, who sends `Authorization: Bearer TOKEN`.\n"+
		"Line 2 goes into the --auth-file; then send budgetd SIGHUP (kill -HUP PID) to load it.")
	_, err = fmt.Fprintf(stdout, "%s\n%s\n", tok, auth.Line(name, tok, sc, ls))
	return err
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// run is budgetd: it parses args and the environment, opens the store and
// serves until ctx ends, then drains in-flight requests and closes the
// store. The commands migrate, token and version do their one thing and
// return.
//
// It goes in the steps of benbjohnson/wtf's cmd/wtfd Main: parseConfig
// (config.go) reads the configuration, daemon.open (wire.go) opens and
// wires the store, the service, the handler and the listener,
// daemon.serve (serve.go) serves until ctx ends, and daemon.shutdown and
// daemon.close (shutdown.go) drain and release what open took.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if isCLI(args) { // operator commands: cli.go
		return runCLI(ctx, args, getenv, stdout, stderr)
	}
	if len(args) > 0 {
		switch args[0] {
		case "token":
			return tokenCommand(args[1:], stdout, stderr)
		case "version":
			if len(args) > 1 {
				return usageError{"version takes no arguments"}
			}
			return printVersion(stdout)
		}
	}
	cfg, words, err := parseConfig(args, getenv, stdout)
	if errors.Is(err, errHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if cfg.version {
		return printVersion(stdout)
	}
	switch {
	case len(words) == 1 && words[0] == "migrate":
		return migrate(ctx, cfg, stdout)
	case len(words) > 0:
		return usageError{fmt.Sprintf("unknown command %q (see budgetd --help)", strings.Join(words, " "))}
	}
	if err := checkExposure(cfg); err != nil {
		return err
	}
	d := newDaemon(cfg, stdout, stderr)
	defer d.close()
	err = d.open(ctx)
	if err == nil {
		err = d.serve(ctx)
	}
	if err != nil {
		// The log is configured from here on: the reason budgetd stops
		// is a record of it too (JSON with --log-format json), not a
		// bare line of main's.
		d.log.Error("budgetd: " + err.Error())
		return loggedError{err}
	}
	return nil
}

// loggedError is an error run has logged already: main does not print it
// again.
type loggedError struct{ error }

func (e loggedError) Unwrap() error { return e.error }

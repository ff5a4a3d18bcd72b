// Command budgetd serves exact decimal leaky buckets over HTTP. Run
// `budgetd --help` for its flags and environment variables.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		os.Exit(fail(err, os.Stderr))
	}
}

// fail writes err to stderr, unless run logged it already, and returns
// the exit status it calls for.
func fail(err error, stderr io.Writer) int {
	if !errors.As(err, new(loggedError)) {
		fmt.Fprintln(stderr, "budgetd:", err)
	}
	return exitCode(err)
}

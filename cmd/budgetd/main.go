// Command budgetd serves exact decimal leaky buckets over HTTP. Run
// `budgetd --help` for its flags and environment variables.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "budgetd:", err)
		os.Exit(exitCode(err))
	}
}

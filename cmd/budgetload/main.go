// Command budgetload drives budgetd's HTTP API with a mix of Fillup,
// CanAccept, Reserve+Commit and multi-bucket Fillup, spread over N keys or on
// one hot key, at a fixed concurrency (closed model) or a fixed rate (open
// model), prints a progress line every second and a summary at the end, and
// then verifies that the store's levels (and history) add up to what it was
// told it accepted.
//
//	budgetload --url http://127.0.0.1:8080 --duration 10s --concurrency 64 --keys 100000
//	budgetload --url … --rate 5000 --mix fillup=70,can=20,reserve=5,multi=5 --json
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil:
	case errors.Is(err, errHelp):
	default:
		fmt.Fprintln(os.Stderr, "budgetload:", err)
		os.Exit(exitCode(err))
	}
}

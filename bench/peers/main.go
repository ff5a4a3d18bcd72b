// Command peers reads the results directory scripts/bench-peers fills —
// wrk's output of every run, the machine and the commands — and writes
// docs/peers.json (medians, ratios' inputs, every round) and the section
// "Peers under wrk" of docs/benchmarks.md, in place of the one there.
//
//	peers --results DIR --json docs/peers.json --md docs/benchmarks.md
//
// bench/report renders the same section from docs/peers.json when
// scripts/bench rewrites the report.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/budgetd/budgetd/bench/internal/peers"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

func run(args []string, stderr io.Writer) error {
	fset := flag.NewFlagSet("peers", flag.ContinueOnError)
	fset.SetOutput(stderr)
	results := fset.String("results", "", "directory scripts/bench-peers wrote (meta.txt, commands.txt, wrk/SYSTEM-LOAD-ROUND.txt)")
	jsonPath := fset.String("json", "docs/peers.json", "results file to write")
	mdPath := fset.String("md", "docs/benchmarks.md", "report to put the section into (created if missing)")
	if err := fset.Parse(args); err != nil {
		return err
	}
	if *results == "" {
		return errors.New("--results is required")
	}
	r, err := peers.Collect(*results)
	if err != nil {
		return fmt.Errorf("read results: %w", err)
	}
	if err := r.WriteFile(*jsonPath); err != nil {
		return fmt.Errorf("write %s: %w", *jsonPath, err)
	}
	doc, err := os.ReadFile(*mdPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %s: %w", *mdPath, err)
	}
	if err := os.WriteFile(*mdPath, []byte(peers.Splice(string(doc), peers.Markdown(r))), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", *mdPath, err)
	}
	return nil
}

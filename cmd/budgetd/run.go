package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
)

// run is budgetd: it parses args and the environment, opens the store and
// serves until ctx ends, then drains in-flight requests and closes the
// store. With the argument "migrate" it applies the PostgreSQL migrations and
// returns.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if isCLI(args) { // operator commands: cli.go
		return runCLI(ctx, args, getenv, stdout, stderr)
	}
	cfg, rest, err := parseConfig(args, getenv, stdout)
	if errors.Is(err, errHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.logLevel))
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	switch {
	case len(rest) == 1 && rest[0] == "migrate":
		return migrate(ctx, cfg, stdout)
	case len(rest) > 0:
		return usageError{fmt.Sprintf("unknown command %q (see budgetd --help)", strings.Join(rest, " "))}
	}

	st, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer st.close()

	svc := ledger.NewService(st.store, ledger.WithMaxTTL(cfg.maxTTL))
	handler := budgethttp.New(svc, budgethttp.WithLogger(log), budgethttp.WithMaxTTL(cfg.maxTTL), budgethttp.WithCollectors(st.collectors...))

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.addr, err)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	fmt.Fprintf(stdout, "budgetd: serving on http://%s with the %s\n", ln.Addr(), st.describe)
	if st.volatile {
		log.Warn("the memory store keeps state in this process only: every bucket, hold and history is lost when budgetd stops")
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", cfg.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	fmt.Fprintln(stdout, "budgetd: stopped")
	return nil
}

// openedStore is a store with what run needs to say about it.
type openedStore struct {
	store      ledger.Store
	describe   string
	volatile   bool
	collectors []prometheusCollector
	close      func()
}

// openStore opens the store named by cfg.store.
func openStore(ctx context.Context, cfg config, log *slog.Logger) (openedStore, error) {
	switch {
	case cfg.store == "memory":
		m := memory.New()
		return openedStore{
			store:    m,
			describe: "memory store (state does not survive a restart)",
			volatile: true,
			close:    func() { m.Close() },
		}, nil
	}
	return openStoreURL(ctx, cfg, log)
}

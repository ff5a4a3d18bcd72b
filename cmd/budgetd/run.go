package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/budgetd/budgetd/internal/auth"
	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/budgetd/budgetd/internal/storemetrics"
	"github.com/budgetd/budgetd/internal/webhook"
)

// run is budgetd: it parses args and the environment, opens the store and
// serves until ctx ends, then drains in-flight requests and closes the
// store. The commands migrate, token and version do their one thing and
// return.
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
	log := newLogger(cfg, stderr)

	switch {
	case len(words) == 1 && words[0] == "migrate":
		return migrate(ctx, cfg, stdout)
	case len(words) > 0:
		return usageError{fmt.Sprintf("unknown command %q (see budgetd --help)", strings.Join(words, " "))}
	}
	if err := checkExposure(cfg); err != nil {
		return err
	}

	// SIGHUP is caught from here on, so it reloads rather than kills.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	var keys atomic.Pointer[auth.Keys]
	if cfg.authFile != "" {
		ks, err := auth.ParseFile(cfg.authFile)
		if err != nil {
			return usageError{fmt.Sprintf("--auth-file: %v", err)}
		}
		keys.Store(ks)
	}
	var certs *certReloader
	if cfg.tlsCert != "" {
		if certs, err = newCertReloader(cfg); err != nil {
			return usageError{err.Error()}
		}
	}

	var webhookKey []byte
	if cfg.webhookURL != "" {
		if webhookKey, err = readWebhookKey(cfg.webhookSecret); err != nil {
			return err
		}
	}

	defer gcFloor(cfg.gcFloorMiB)()

	st, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer st.close()
	store := storemetrics.Wrap(st.store)
	var deliverer *webhook.Deliverer
	if cfg.webhookURL != "" {
		leases, ok := ledger.LeasesOf(st.store)
		if !ok {
			return usageError{fmt.Sprintf("--webhook-url: the %s keeps no lease for the webhook sender (see docs/alerts.md)", st.describe)}
		}
		deliverer = webhook.New(cfg.webhookURL, webhookKey, st.store, leases, webhook.WithLogger(log))
		st.collectors = append(st.collectors, deliverer.Collectors()...)
	}

	draining := make(chan struct{})
	opts := []budgethttp.Option{
		budgethttp.WithLogger(log), budgethttp.WithMaxTTL(cfg.maxTTL), budgethttp.WithDraining(draining),
		budgethttp.WithLogKeys(cfg.logKeys),
		budgethttp.WithCollectors(append(st.collectors, store.Collector(), buildInfoCollector())...),
	}
	if log.Enabled(ctx, slog.LevelInfo) {
		access := newAccessLog(cfg, stderr)
		defer closeAccessLog(access, log)
		opts = append(opts, budgethttp.WithAccessLog(access))
	}
	if cfg.authFile != "" {
		opts = append(opts, budgethttp.WithAuth(keys.Load))
	}
	svcOpts := []ledger.Option{ledger.WithMaxTTL(cfg.maxTTL)}
	if deliverer != nil {
		// A write of this instance that may have emitted events wakes the
		// deliverer (a non-blocking send, off the decision's path).
		svcOpts = append(svcOpts, ledger.WithWriteHook(deliverer.Nudge))
	}
	svc := ledger.NewService(store, svcOpts...)
	handler := budgethttp.New(svc, opts...)

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.addr, err)
	}
	conns := newConnCap(cfg.maxConns, cfg.maxConnsPerIP)
	checkFDLimit(cfg.maxConns, log)
	ln = conns.listener(ln)
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       cfg.idleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ConnState:         conns.track,
	}
	scheme, serve := "http", func() error { return srv.Serve(ln) }
	if certs != nil {
		srv.TLSConfig = certs.config()
		scheme, serve = "https", func() error { return srv.ServeTLS(ln, "", "") }
	}
	fmt.Fprintf(stdout, "budgetd: serving on %s://%s with the %s\n", scheme, ln.Addr(), st.describe)
	switch {
	case cfg.authFile != "":
		log.Info("authentication is on", "auth_file", cfg.authFile, "keys", keys.Load().Len())
		if keys.Load().Len() == 0 {
			log.Warn("the key file holds no keys: every request that needs a token is refused")
		}
		if cfg.tlsClientCA != "" {
			log.Info("callers also need a client certificate signed by --tls-client-ca", "tls_client_ca", cfg.tlsClientCA)
		}
	case cfg.tlsClientCA != "":
		log.Info("callers are authenticated by client certificate: only clients with a certificate signed by --tls-client-ca are served, "+
			"and there are no API keys, so each of them may change every limit (give --auth-file for scopes and limit patterns)", "tls_client_ca", cfg.tlsClientCA)
	default:
		log.Warn("authentication is off: anyone who reaches " + ln.Addr().String() + " may change every limit (give --auth-file to turn it on)")
	}
	if st.volatile {
		log.Warn("the memory store keeps state in this process only: every bucket, hold and history is lost when budgetd stops")
	}

	if deliverer != nil {
		// Delivery runs beside the server, off the decision path, until
		// the server has drained; then it stores its cursor and releases
		// the lease (before the store closes: defers run last first).
		wctx, stopDelivery := context.WithCancel(context.WithoutCancel(ctx))
		delivered := make(chan struct{})
		go func() {
			defer close(delivered)
			_ = deliverer.Run(wctx)
		}()
		defer func() {
			stopDelivery()
			<-delivered
		}()
		log.Info("webhook: events are sent to "+redact(cfg.webhookURL), "holder", deliverer.Holder())
	}

	served := make(chan error, 1)
	go func() { served <- serve() }()
	for {
		select {
		case err := <-served:
			return fmt.Errorf("serve: %w", err)
		case <-hup:
			reload(cfg, &keys, certs, log)
			continue
		case <-ctx.Done():
		}
		break
	}
	close(draining)
	log.Info("shutting down", "delay", cfg.shutdownDelay, "timeout", cfg.shutdownTimeout)
	if cfg.shutdownDelay > 0 {
		select {
		case <-time.After(cfg.shutdownDelay):
		case err := <-served:
			return fmt.Errorf("serve: %w", err)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	fmt.Fprintln(stdout, "budgetd: stopped")
	return nil
}

// newLogger is the process's logger in the format and level asked for.
func newLogger(cfg config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.logLevel))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// accessLogFlushTimeout bounds how long budgetd waits on exit for the
// access-log lines still buffered to be written.
const accessLogFlushTimeout = 5 * time.Second

// newAccessLog is the access log, in the format of the process's logger.
func newAccessLog(cfg config, w io.Writer) *budgethttp.AccessLog {
	if cfg.logFormat == "json" {
		return budgethttp.NewAccessLog(w, budgethttp.AccessJSON)
	}
	return budgethttp.NewAccessLog(w, budgethttp.AccessText)
}

// closeAccessLog writes the access-log lines still buffered, waiting at
// most accessLogFlushTimeout for a stuck stderr.
func closeAccessLog(a *budgethttp.AccessLog, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), accessLogFlushTimeout)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		log.Warn("access log not flushed", "err", err)
	}
}

// reload re-reads the key file and the TLS files on SIGHUP. Whatever fails
// to load keeps what is in force, and the log says why.
func reload(cfg config, keys *atomic.Pointer[auth.Keys], certs *certReloader, log *slog.Logger) {
	if cfg.authFile == "" && certs == nil {
		log.Info("SIGHUP: nothing to reload (no --auth-file, no --tls-cert)")
	}
	if cfg.authFile != "" {
		ks, err := auth.ParseFile(cfg.authFile)
		if err != nil {
			log.Error("key file not reloaded: the keys in force are kept", "err", err)
		} else {
			keys.Store(ks)
			log.Info("key file reloaded", "auth_file", cfg.authFile, "keys", ks.Len())
		}
	}
	if certs != nil {
		if err := certs.load(); err != nil {
			log.Error("TLS files not reloaded: the certificates in force are kept", "err", err)
		} else {
			log.Info("TLS files reloaded", "cert", cfg.tlsCert)
		}
	}
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
		m := memory.New(memory.WithLogger(log))
		return openedStore{
			store:      m,
			describe:   "memory store (state does not survive a restart)",
			volatile:   true,
			collectors: []prometheusCollector{m.Collector()},
			close:      func() { m.Close() },
		}, nil
	}
	return openStoreURL(ctx, cfg, log)
}

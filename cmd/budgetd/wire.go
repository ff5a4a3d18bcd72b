package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/budgetd/budgetd/internal/auth"
	"github.com/budgetd/budgetd/internal/envoy"
	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/limitsfile"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/budgetd/budgetd/internal/storemetrics"
	"github.com/budgetd/budgetd/internal/tracing"
	"github.com/budgetd/budgetd/internal/webhook"
)

// daemon is budgetd serving the API: open wires it together (this file),
// serve serves until its context ends (serve.go), shutdown drains it and
// close releases, last first, whatever open and serve took (shutdown.go).
type daemon struct {
	cfg    config
	log    *slog.Logger // the process's log, on stderr
	out    *slog.Logger // the start-up and stop lines, on stdout
	stderr io.Writer

	hup        chan os.Signal // SIGHUP: reload the key file and the TLS files
	keys       atomic.Pointer[auth.Keys]
	certs      *certReloader // nil without --tls-cert
	webhookKey []byte
	store      openedStore
	deliverer  *webhook.Deliverer // nil without --webhook-url
	draining   chan struct{}      // closed when shutdown begins: /readyz answers 503
	ln         net.Listener
	conns      *connCap // --max-conns, over ln and grpcLn
	srv        *http.Server
	scheme     string // http or https
	svc        *ledger.Service

	// The Envoy rate-limit service (grpc.go), nil without --grpc-addr.
	rls     *envoy.Server
	grpcLn  net.Listener
	grpcSrv *grpc.Server

	// limits is the --limits-file, parsed by readFiles and applied by open
	// before serving; nil without one. Its Envoy member is the mapping of
	// the gRPC listener.
	limits *limitsfile.File
	// metered is the store, measured, under the service (svc) that the
	// HTTP API, the Envoy service and the limits file use.
	metered *storemetrics.Store
	// tracing sends traces (tracing.go); nil when the OTEL_* variables
	// leave it off.
	tracing *tracing.Tracing

	closers []func() // what close undoes, in the order it was taken
}

func newDaemon(cfg config, stdout, stderr io.Writer) *daemon {
	return &daemon{
		cfg:      cfg,
		log:      newLogger(cfg, stderr),
		out:      newLoggerAt(cfg.logFormat, slog.LevelInfo, stdout),
		stderr:   stderr,
		draining: make(chan struct{}),
	}
}

// onClose has close call undo, before whatever was registered earlier.
func (d *daemon) onClose(undo func()) { d.closers = append(d.closers, undo) }

// open reads the key, TLS and webhook secret files, opens the store and
// wires the service, the handler and the listener. What it took is
// released by close, also when open fails half way.
func (d *daemon) open(ctx context.Context) error {
	// SIGHUP is caught from here on, so it reloads rather than kills.
	d.hup = make(chan os.Signal, 1)
	signal.Notify(d.hup, syscall.SIGHUP)
	d.onClose(func() { signal.Stop(d.hup) })
	if err := d.readFiles(); err != nil {
		return err
	}
	if err := d.startTracing(ctx); err != nil {
		return err
	}
	d.onClose(gcFloor(d.cfg.gcFloorMiB))
	if err := d.openStore(ctx); err != nil {
		return err
	}
	store := d.store.store
	if d.tracing != nil {
		store = d.tracing.Store(store)
	}
	d.metered = storemetrics.Wrap(store)
	d.svc = d.service()
	if err := d.applyLimits(ctx); err != nil {
		return err
	}
	var rpc *budgethttp.RPC
	if err := d.listen(d.handler(ctx, &rpc)); err != nil {
		return err
	}
	return d.listenGRPC(rpc)
}

// readFiles reads the key file, the TLS files and the webhook secret: a
// file that cannot be used is a usage error, before the store is opened.
func (d *daemon) readFiles() error {
	cfg := d.cfg
	if cfg.authFile != "" {
		ks, err := auth.ParseFile(cfg.authFile)
		if err != nil {
			return usageError{fmt.Sprintf("--auth-file: %v", err)}
		}
		d.keys.Store(ks)
	}
	var err error
	if cfg.tlsCert != "" {
		if d.certs, err = newCertReloader(cfg); err != nil {
			return usageError{err.Error()}
		}
	}
	if cfg.webhookURL != "" {
		if d.webhookKey, err = readWebhookKey(cfg.webhookSecret); err != nil {
			return err
		}
	}
	if cfg.limitsFile != "" {
		if d.limits, err = readLimitsFile(cfg.limitsFile); err != nil {
			return err
		}
	}
	return nil
}

// openStore opens the store and, with --webhook-url, the deliverer of its
// events (started by serve).
func (d *daemon) openStore(ctx context.Context) error {
	st, err := openStore(ctx, d.cfg, d.log)
	if err != nil {
		return err
	}
	d.store = st
	d.onClose(st.close)
	if d.cfg.webhookURL == "" {
		return nil
	}
	leases, ok := ledger.LeasesOf(st.store)
	if !ok {
		return usageError{fmt.Sprintf("--webhook-url: the %s keeps no lease for the webhook sender (see docs/alerts.md)", st.describe)}
	}
	d.deliverer = webhook.New(d.cfg.webhookURL, d.webhookKey, st.store, leases, webhook.WithLogger(d.log))
	d.store.collectors = append(d.store.collectors, d.deliverer.Collectors()...)
	return nil
}

// service is the ledger service over the measured store.
func (d *daemon) service() *ledger.Service {
	svcOpts := []ledger.Option{ledger.WithMaxTTL(d.cfg.maxTTL)}
	if d.deliverer != nil {
		// A write of this instance that may have emitted events wakes the
		// deliverer (a non-blocking send, off the decision's path).
		svcOpts = append(svcOpts, ledger.WithWriteHook(d.deliverer.Nudge))
	}
	if d.tracing != nil {
		svcOpts = append(svcOpts, ledger.WithTracer(d.tracing))
	}
	return ledger.NewService(d.metered, svcOpts...)
}

// handler is the HTTP API over the service over the store, with its
// metrics, access log and authentication; *rpc is set to its observer of
// gRPC calls.
func (d *daemon) handler(ctx context.Context, rpc **budgethttp.RPC) http.Handler {
	cfg := d.cfg
	store := d.metered
	opts := []budgethttp.Option{
		budgethttp.WithLogger(d.log), budgethttp.WithMaxTTL(cfg.maxTTL), budgethttp.WithDraining(d.draining),
		budgethttp.WithLogKeys(cfg.logKeys), budgethttp.WithRPC(rpc),
		budgethttp.WithCollectors(append(d.store.collectors, store.Collector(), buildInfoCollector())...),
	}
	if d.log.Enabled(ctx, slog.LevelInfo) {
		access := newAccessLog(cfg, d.stderr)
		d.onClose(func() { closeAccessLog(access, d.log) })
		opts = append(opts, budgethttp.WithAccessLog(access))
	}
	if cfg.authFile != "" {
		opts = append(opts, budgethttp.WithAuth(d.keys.Load))
	}
	if d.tracing != nil {
		opts = append(opts, budgethttp.WithTracing(d.tracing.TracerProvider(), d.tracing.Propagator()))
	}
	return budgethttp.New(d.svc, opts...)
}

// listen binds the address, behind the connection cap, and makes the
// server (TLS with --tls-cert).
func (d *daemon) listen(handler http.Handler) error {
	cfg := d.cfg
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.addr, err)
	}
	conns := newConnCap(cfg.maxConns, cfg.maxConnsPerIP)
	checkFDLimit(cfg.maxConns, d.log)
	d.conns, d.ln = conns, conns.listener(ln)
	d.srv = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: headerTimeout,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       cfg.idleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelWarn),
		ConnState:         conns.track,
	}
	d.scheme = "http"
	if d.certs != nil {
		d.srv.TLSConfig = d.certs.config()
		d.scheme = "https"
	}
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

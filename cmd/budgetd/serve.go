package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/budgetd/budgetd/internal/auth"
)

// serve says where it serves, starts the webhook deliverer and serves
// until ctx ends (then it shuts down) or the server fails. SIGHUP reloads
// the key file and the TLS files meanwhile.
func (d *daemon) serve(ctx context.Context) error {
	d.announce()
	d.startDelivery(ctx)
	served := make(chan error, 2)
	d.serveGRPC(served)
	go func() {
		if d.certs != nil {
			served <- d.srv.ServeTLS(d.ln, "", "")
		} else {
			served <- d.srv.Serve(d.ln)
		}
	}()
	for {
		select {
		case err := <-served:
			return fmt.Errorf("serve: %w", err)
		case <-d.hup:
			reload(d.cfg, &d.keys, d.certs, d.log)
		case <-ctx.Done():
			return d.shutdown(served)
		}
	}
}

// announce writes the start-up line (on stdout, in the log's format,
// whatever --log-level: scripts wait for it) and logs who may call.
func (d *daemon) announce() {
	cfg, url := d.cfg, d.scheme+"://"+d.ln.Addr().String()
	d.out.Info(fmt.Sprintf("budgetd: serving on %s with the %s", url, d.store.describe), "url", url)
	switch {
	case cfg.authFile != "":
		d.log.Info("authentication is on", "auth_file", cfg.authFile, "keys", d.keys.Load().Len())
		if d.keys.Load().Len() == 0 {
			d.log.Warn("the key file holds no keys: every request that needs a token is refused")
		}
		if cfg.tlsClientCA != "" {
			d.log.Info("callers also need a client certificate signed by --tls-client-ca", "tls_client_ca", cfg.tlsClientCA)
		}
	case cfg.tlsClientCA != "":
		d.log.Info("callers are authenticated by client certificate: only clients with a certificate signed by --tls-client-ca are served, "+
			"and there are no API keys, so each of them may change every limit (give --auth-file for scopes and limit patterns)", "tls_client_ca", cfg.tlsClientCA)
	default:
		d.log.Warn("authentication is off: anyone who reaches " + d.ln.Addr().String() + " may change every limit (give --auth-file to turn it on)")
	}
	if d.store.volatile {
		d.log.Warn("the memory store keeps state in this process only: every bucket, hold and history is lost when budgetd stops")
	}
}

// startDelivery runs the webhook deliverer, if any, beside the server and
// off the decision path, until close; then it stores its cursor and
// releases the lease (before the store closes: close undoes last first).
func (d *daemon) startDelivery(ctx context.Context) {
	if d.deliverer == nil {
		return
	}
	wctx, stopDelivery := context.WithCancel(context.WithoutCancel(ctx))
	delivered := make(chan struct{})
	go func() {
		defer close(delivered)
		_ = d.deliverer.Run(wctx)
	}()
	d.onClose(func() {
		stopDelivery()
		<-delivered
	})
	d.log.Info("webhook: events are sent to "+redact(d.cfg.webhookURL), "holder", d.deliverer.Holder())
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

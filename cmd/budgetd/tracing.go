package main

import (
	"context"
	"strings"
	"time"

	"github.com/budgetd/budgetd/internal/tracing"
)

// tracingFlushTimeout bounds how long budgetd waits on exit to send the
// spans still buffered to the OTLP endpoint.
const tracingFlushTimeout = 5 * time.Second

// startTracing starts sending traces when the OTEL_* variables ask for it
// (tracing.FromEnv, read by parseConfig); close sends what is buffered,
// last of all, after the servers have answered their last requests. Off,
// d.tracing stays nil and nothing of OpenTelemetry is built.
func (d *daemon) startTracing(ctx context.Context) error {
	if !d.cfg.tracing.On() {
		return nil
	}
	t, err := tracing.Start(ctx, d.cfg.tracing, readBuildInfo().version, d.cfg.logKeys)
	if err != nil {
		return usageError{err.Error()}
	}
	d.tracing = t
	d.onClose(func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracingFlushTimeout)
		defer cancel()
		if err := t.Shutdown(ctx); err != nil {
			d.log.Warn("traces not all sent", "err", err)
		}
	})
	d.log.Info("tracing: spans are sent over OTLP/HTTP", "endpoint", redact(d.cfg.tracing.Endpoint),
		"propagators", strings.Join(d.cfg.tracing.Propagators, ","))
	return nil
}

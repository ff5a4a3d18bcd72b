package main

import (
	"context"
	"fmt"
	"time"
)

// shutdown drains the servers: /readyz answers 503 and gRPC health
// NOT_SERVING at once; after --shutdown-delay the listeners close and
// in-flight requests and calls have --shutdown-timeout to finish. served is
// the servers' result, should one fail meanwhile.
func (d *daemon) shutdown(served <-chan error) error {
	close(d.draining)
	d.drainGRPC()
	d.log.Info("shutting down", "delay", d.cfg.shutdownDelay, "timeout", d.cfg.shutdownTimeout)
	if d.cfg.shutdownDelay > 0 {
		select {
		case <-time.After(d.cfg.shutdownDelay):
		case err := <-served:
			return fmt.Errorf("serve: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.shutdownTimeout)
	defer cancel()
	grpcStopped := make(chan struct{})
	go func() {
		defer close(grpcStopped)
		d.stopGRPC(ctx)
	}()
	err := d.srv.Shutdown(ctx)
	<-grpcStopped
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	d.out.Info("budgetd: stopped")
	return nil
}

// close releases what open and serve took, last first: the webhook
// deliverer stops (storing its cursor), the access log is flushed, the
// store closes, the heap floor goes and SIGHUP is no longer caught.
func (d *daemon) close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
	d.closers = nil
}

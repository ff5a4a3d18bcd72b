package main

import (
	"context"
	"fmt"
	"time"
)

// shutdown drains the server: /readyz answers 503 at once; after
// --shutdown-delay the listener closes and in-flight requests have
// --shutdown-timeout to finish. served is the server's result, should it
// fail meanwhile.
func (d *daemon) shutdown(served <-chan error) error {
	close(d.draining)
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
	if err := d.srv.Shutdown(ctx); err != nil {
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

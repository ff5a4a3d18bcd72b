package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

type prometheusCollector = prometheus.Collector

// openStoreURL opens a PostgreSQL or Redis store.
func openStoreURL(ctx context.Context, cfg config, log *slog.Logger) (openedStore, error) {
	return openedStore{}, usageError{fmt.Sprintf("--store %q: only memory is available in this build", redact(cfg.store))}
}

func migrate(ctx context.Context, cfg config, stdout io.Writer) error {
	return usageError{"migrate needs a postgres:// store"}
}

// redact hides a password in a store URL.
func redact(u string) string { return u }

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/budgetd/budgetd/internal/mysql"
	"github.com/budgetd/budgetd/internal/postgres"
	"github.com/budgetd/budgetd/internal/redis"
	"github.com/budgetd/budgetd/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
)

type prometheusCollector = prometheus.Collector

// openStoreURL opens the PostgreSQL, MySQL or Redis store that cfg.store
// names.
func openStoreURL(ctx context.Context, cfg config, log *slog.Logger) (openedStore, error) {
	switch {
	case isPostgresURL(cfg.store):
		st, err := postgres.Open(ctx, cfg.store, postgres.WithIsolation(cfg.pgIsolation))
		if err != nil {
			return openedStore{}, fmt.Errorf("open postgres store %s: %w", redact(cfg.store), err)
		}
		return openedStore{
			store:      st,
			describe:   fmt.Sprintf("postgres store at %s (%s, migrations applied)", redact(cfg.store), cfg.pgIsolation),
			collectors: []prometheusCollector{st.Collector()},
			close:      func() { st.Close() },
		}, nil
	case isMySQLURL(cfg.store):
		st, err := mysql.Open(ctx, cfg.store, mysql.WithIsolation(cfg.mysqlIsolation), mysql.WithCache(cfg.mysqlCache, mysql.DefaultCacheBytes), mysql.WithGroupCommit(cfg.mysqlGroup))
		cache := ", decision cache off"
		if cfg.mysqlCache > 0 {
			cache = fmt.Sprintf(", decision cache of %d", cfg.mysqlCache)
			if cfg.mysqlGroup {
				cache += ", group commit"
			}
		}
		if err != nil {
			return openedStore{}, fmt.Errorf("open mysql store %s: %w", redact(cfg.store), err)
		}
		return openedStore{
			store:    st,
			describe: fmt.Sprintf("mysql store at %s (%s%s, migrations applied)", redact(cfg.store), cfg.mysqlIsolation, cache),
			close:    func() { st.Close() },
		}, nil
	case redis.IsURL(cfg.store):
		st, err := redis.Open(ctx, cfg.store, redis.WithEvictionCheck(cfg.redisEviction), redis.WithLogger(log),
			redis.WithWaitReplicas(cfg.redisWaitReplicas, cfg.redisWaitTimeout))
		if err != nil {
			return openedStore{}, fmt.Errorf("open redis store %s: %w", redact(cfg.store), err)
		}
		return openedStore{
			store:      st,
			describe:   "redis store at " + redact(cfg.store),
			collectors: []prometheusCollector{st.Collector()},
			close:      func() { st.Close() },
		}, nil
	}
	return openedStore{}, usageError{fmt.Sprintf("--store %q: want memory, postgres://…, mysql://…, redis://… or redis+cluster://…", redact(cfg.store))}
}

func isPostgresURL(u string) bool {
	return strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://")
}

func isMySQLURL(u string) bool { return strings.HasPrefix(u, "mysql://") }

// migrate applies the PostgreSQL or MySQL migrations of cfg.store and
// returns.
func migrate(ctx context.Context, cfg config, stdout io.Writer) error {
	do := func(ctx context.Context, url string) error { return postgres.Migrate(ctx, url) }
	switch {
	case isPostgresURL(cfg.store):
	case isMySQLURL(cfg.store):
		do = mysql.Migrate
	default:
		return usageError{fmt.Sprintf("migrate needs --store postgres://… or mysql://…, not %q", redact(cfg.store))}
	}
	if err := do(ctx, cfg.store); err != nil {
		return fmt.Errorf("migrate %s: %w", redact(cfg.store), err)
	}
	fmt.Fprintf(stdout, "budgetd: migrations of %s are applied\n", redact(cfg.store))
	return nil
}

// redact is a store's or the webhook receiver's URL as budgetd prints and
// logs it: the password, the query and the fragment masked
// (webhook.RedactURL, docs/operations.md "Logs").
func redact(raw string) string { return webhook.RedactURL(raw) }

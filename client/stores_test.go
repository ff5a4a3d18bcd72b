package client_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/budgetd/budgetd/client"
	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/budgetd/budgetd/internal/mysql"
	"github.com/budgetd/budgetd/internal/postgres"
	"github.com/budgetd/budgetd/internal/redis"
	"github.com/budgetd/budgetd/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// eachStore runs fn with a client of a budgetd over every store: memory
// always, and the PostgreSQL, Redis and Redis Cluster that scripts/test
// starts (skipped when their addresses are unset, failed when CI=true).
// Each store is empty and keeps its own clock.
func eachStore(t *testing.T, fn func(t *testing.T, c *client.Client)) {
	serve := func(t *testing.T, store ledger.Store) {
		srv := httptest.NewServer(budgethttp.New(ledger.NewService(store)))
		t.Cleanup(srv.Close)
		c, err := client.New(srv.URL, client.WithRetries(1, time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		fn(t, c)
	}
	suffix := func() string {
		var b [6]byte
		rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}
	t.Run("memory", func(t *testing.T) { serve(t, memory.New()) })
	t.Run("postgres", func(t *testing.T) {
		url := testenv.Server(t, testenv.Postgres)
		schema := "budgetd_client_" + suffix()
		st, err := postgres.Open(context.Background(), url, postgres.WithSchema(schema), postgres.WithPruneInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			st.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if conn, err := pgx.Connect(ctx, url); err == nil {
				conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
				conn.Close(ctx)
			}
		})
		serve(t, st)
	})
	t.Run("mysql", func(t *testing.T) {
		st, err := mysql.Open(context.Background(), testenv.MySQLDatabase(t), mysql.WithPruneInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		serve(t, st)
	})
	for name, env := range map[string]string{"redis": testenv.Redis, "redis-cluster": testenv.RedisCluster} {
		t.Run(name, func(t *testing.T) {
			url := testenv.Server(t, env)
			if env == testenv.RedisCluster {
				url = "redis+cluster://" + url
			}
			st, err := redis.Open(context.Background(), url, redis.WithPrefix("client-"+suffix()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			serve(t, st)
		})
	}
}

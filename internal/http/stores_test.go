package http_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/budgetd/budgetd/internal/mysql"
	"github.com/budgetd/budgetd/internal/postgres"
	"github.com/budgetd/budgetd/internal/redis"
	"github.com/budgetd/budgetd/internal/testenv"
)

// eachStore runs fn against the API over every store: memory always, and
// the real PostgreSQL, MySQL (MariaDB), Redis and Redis Cluster that
// scripts/test starts
// (skipped when their addresses are unset, failed when CI=true). Each run
// has its own pinned clock and an empty store.
func eachStore(t *testing.T, fn func(t *testing.T, a *api)) {
	eachStoreRaw(t, func(t *testing.T, clock *ledgertest.Clock, store ledger.Store) { fn(t, serve(t, clock, store)) })
}

// eachStoreRaw runs fn with every store and its pinned clock, for tests
// that build the API themselves.
func eachStoreRaw(t *testing.T, fn func(t *testing.T, clock *ledgertest.Clock, store ledger.Store)) {
	t.Run("memory", func(t *testing.T) {
		clock := ledgertest.NewClock()
		fn(t, clock, memory.New(memory.WithClock(clock.Now)))
	})
	t.Run("postgres", func(t *testing.T) {
		url := testServer(t, "BUDGETD_TEST_POSTGRES")
		clock := ledgertest.NewClock()
		schema := "budgetd_http_" + randomHex()
		t.Cleanup(func() { dropSchema(t, url, schema) })
		st, err := postgres.Open(context.Background(), url, postgres.WithSchema(schema), postgres.WithClock(clock.Now), postgres.WithPruneInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		fn(t, clock, st)
	})
	t.Run("mysql", func(t *testing.T) {
		clock := ledgertest.NewClock()
		st, err := mysql.Open(context.Background(), testenv.MySQLDatabase(t), mysql.WithClock(clock.Now), mysql.WithPruneInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		fn(t, clock, st)
	})
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		name := map[string]string{"BUDGETD_TEST_REDIS": "redis", "BUDGETD_TEST_REDIS_CLUSTER": "redis-cluster"}[env]
		t.Run(name, func(t *testing.T) {
			url := testServer(t, env)
			if env == "BUDGETD_TEST_REDIS_CLUSTER" {
				url = "redis+cluster://" + url
			}
			clock := ledgertest.NewClock()
			st, err := redis.Open(context.Background(), url, redis.WithPrefix("http-"+randomHex()), redis.WithClock(clock.Now))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			fn(t, clock, st)
		})
	}
}

var (
	_ ledger.Store = (*postgres.Store)(nil)
	_ ledger.Store = (*mysql.Store)(nil)
)

func testServer(t *testing.T, env string) string {
	t.Helper()
	return testenv.Server(t, env)
}

func randomHex() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func dropSchema(t *testing.T, url, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Errorf("drop schema: %v", err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Errorf("drop schema: %v", err)
	}
}

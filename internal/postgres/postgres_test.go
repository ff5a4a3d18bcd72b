package postgres_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/postgres"
	"github.com/budgetd/budgetd/internal/storetest"
	"github.com/budgetd/budgetd/internal/testenv"
)

// dsn returns the test server's URL from BUDGETD_TEST_POSTGRES (scripts/test
// sets it). Without it the test is skipped, or fails when CI=true.
func dsn(t testing.TB) string {
	t.Helper()
	return testenv.Server(t, testenv.Postgres)
}

var schemaSeq atomic.Int64

// newSchema returns a schema name of its own for t and drops the schema when
// t ends.
func newSchema(t testing.TB) string {
	t.Helper()
	url := dsn(t)
	name := fmt.Sprintf("budgetd_test_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6, schemaSeq.Add(1))
	t.Cleanup(func() { storetest.DropSchema(t, url, name) })
	return name
}

// open opens a store on a fresh schema, closed when t ends.
func open(t testing.TB, opts ...postgres.Option) *postgres.Store {
	t.Helper()
	url := dsn(t)
	schema := newSchema(t)
	opts = append([]postgres.Option{postgres.WithSchema(schema), postgres.WithPruneInterval(0)}, opts...)
	s, err := postgres.Open(context.Background(), url, opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// schemaConn opens a connection of its own to url with search_path schema
// (to look at or change a store's tables), closed when t ends.
func schemaConn(t testing.TB, url, schema string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = schema
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// openCounting opens a store on a fresh schema with its clock pinned to
// clock and no background pruner, closed when t ends, and returns with it
// count, which runs a query of one integer in the store's schema on a
// connection of its own (to look at the tables).
func openCounting(t *testing.T, clock *ledgertest.Clock) (*postgres.Store, func(sql string) int) {
	t.Helper()
	ctx := context.Background()
	url := dsn(t)
	schema := newSchema(t)
	s, err := postgres.Open(ctx, url, postgres.WithSchema(schema), postgres.WithPruneInterval(0), postgres.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	conn := schemaConn(t, url, schema)
	return s, func(sql string) int {
		t.Helper()
		var n int
		if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
}

func factory(isolation string) ledgertest.Factory {
	return func(t *testing.T, clock *ledgertest.Clock) ledger.Store {
		return open(t, postgres.WithIsolation(isolation), postgres.WithClock(clock.Now))
	}
}

func TestConformanceReadCommitted(t *testing.T) {
	ledgertest.Run(t, factory("read-committed"))
}

func TestConformanceSerializable(t *testing.T) {
	ledgertest.Run(t, factory("serializable"))
}

// The end of a temporary rule change settled at its expires_at
// (Go settles the bucket: terms.go, settleBucket), at both isolation levels.
func TestOverrideExpiryReadCommitted(t *testing.T) {
	ledgertest.RunOverrideExpiry(t, factory("read-committed"))
}

func TestOverrideExpirySerializable(t *testing.T) {
	ledgertest.RunOverrideExpiry(t, factory("serializable"))
}

// The changes of overrides around an expiry (ledgertest.RunOverrideExpiryChanges),
// at both isolation levels: every terms suite runs on every store.
func TestOverrideExpiryChangesReadCommitted(t *testing.T) {
	ledgertest.RunOverrideExpiryChanges(t, factory("read-committed"))
}

func TestOverrideExpiryChangesSerializable(t *testing.T) {
	ledgertest.RunOverrideExpiryChanges(t, factory("serializable"))
}

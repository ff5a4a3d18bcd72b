package http_test

import (
	"testing"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/mysql"
	"github.com/budgetd/budgetd/internal/postgres"
	"github.com/budgetd/budgetd/internal/storetest"
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
	storetest.Each(t, "http", fn)
}

var (
	_ ledger.Store = (*postgres.Store)(nil)
	_ ledger.Store = (*mysql.Store)(nil)
)

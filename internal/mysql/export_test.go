package mysql

import (
	"context"
	"net"
)

// WithDial makes the store's connections with dial (a test counts the
// round trips on them).
func WithDial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) Option {
	return func(s *Store) { s.dial = dial }
}

// AtSchemaVersion makes Open apply the embedded migrations up to version v
// only, until restore is called: the upgrade test builds a database as an
// older budgetd left it. Not for parallel tests.
func AtSchemaVersion(v int) (restore func()) {
	all := schema
	schema = func() ([]migration, error) {
		ms, err := all()
		var out []migration
		for _, m := range ms {
			if m.version <= v {
				out = append(out, m)
			}
		}
		return out, err
	}
	return func() { schema = all }
}

// PruneStatements are the pruner's scans, by name, for EXPLAIN.
var PruneStatements = map[string]string{
	"expired holds": pruneExpiredHolds,
	"closed holds":  pruneClosedHolds,
	"history":       pruneHistory,
	"idempotency":   pruneIdempotency,
	"events":        pruneEvents,
}

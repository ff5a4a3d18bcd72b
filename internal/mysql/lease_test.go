package mysql_test

import (
	"testing"

	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/mysql"
)

// TestLease: the lease set (one holder, renewal, the cursor only its holder
// moves, takeover after the TTL on the database's clock, release, one winner
// of a race for a free lease) at both isolation levels.
func TestLease(t *testing.T) {
	for _, iso := range []string{mysql.RepeatableRead, mysql.ReadCommitted} {
		t.Run(iso, func(t *testing.T) {
			ledgertest.Lease(t, open(t, newDatabase(t), mysql.WithIsolation(iso), mysql.WithPruneInterval(0)))
		})
	}
}

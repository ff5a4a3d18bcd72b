package postgres_test

import (
	"testing"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/postgres"
)

// TestRankBuckets holds RankBuckets to its contract (ledgertest.RankedLister);
// a skip leaves buckets out by used and by share.
func TestRankBuckets(t *testing.T) {
	clock := ledgertest.NewClock()
	s := open(t, postgres.WithClock(clock.Now))
	ledgertest.RankedLister(t, ledger.NewService(s), s, clock, ledger.OrderUsed, ledger.OrderShare)
}

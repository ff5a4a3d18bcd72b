package mysql_test

import (
	"testing"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/mysql"
)

// TestRankBuckets holds RankBuckets to its contract (ledgertest.RankedLister);
// a skip leaves buckets out by used only (by share no bound is exact:
// rank.go).
func TestRankBuckets(t *testing.T) {
	clock := ledgertest.NewClock()
	s := open(t, newDatabase(t), mysql.WithClock(clock.Now))
	ledgertest.RankedLister(t, ledger.NewService(s), s, clock, ledger.OrderUsed)
}

package postgres_test

import (
	"testing"

	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
)

func TestLease(t *testing.T) { ledgertest.Lease(t, open(t)) }

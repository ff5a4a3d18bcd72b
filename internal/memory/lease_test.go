package memory_test

import (
	"testing"

	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
)

func TestLease(t *testing.T) { ledgertest.Lease(t, memory.New()) }

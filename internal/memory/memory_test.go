package memory_test

import (
	"testing"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
)

func TestConformance(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T, clock *ledgertest.Clock) ledger.Store {
		return memory.New(memory.WithClock(clock.Now))
	})
}

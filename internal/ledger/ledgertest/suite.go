package ledgertest

import (
	"testing"

	"github.com/budgetd/budgetd/internal/ledger"
)

// Factory builds a fresh, empty store whose clock is clock.Now. It registers
// its own cleanup with t.
type Factory func(t *testing.T, clock *Clock) ledger.Store

// Run runs the whole conformance suite against the stores that factory builds.
func Run(t *testing.T, factory Factory) {
	t.Helper()
}

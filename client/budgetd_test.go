package client_test

import (
	"net/http/httptest"

	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/shopspring/decimal"
)

// startBudgetd serves a budgetd over an empty memory store whose clock
// stands still (so the examples' figures are exact), and returns it with
// its clock. In a real program the server is a running budgetd.
func startBudgetd() (*httptest.Server, *ledgertest.Clock) {
	clock := ledgertest.NewClock()
	store := memory.New(memory.WithClock(clock.Now))
	return httptest.NewServer(budgethttp.New(ledger.NewService(store))), clock
}

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

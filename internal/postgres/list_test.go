package postgres_test

import (
	"testing"

	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
)

func BenchmarkListBuckets(b *testing.B) { ledgertest.BenchListBuckets(b, open(b), 10_000) }

package memory_test

import (
	"testing"

	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
)

func BenchmarkListBuckets(b *testing.B) { ledgertest.BenchListBuckets(b, memory.New(), 10_000) }

package memory_test

import (
	"testing"

	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
)

func BenchmarkListBuckets(b *testing.B) { ledgertest.BenchListBuckets(b, memory.New(), 10_000) }

// BenchmarkNearCap lists who is near the cap of a limit of 1,000,000
// buckets (docs/api.md, "Who is near the cap").
func BenchmarkNearCap(b *testing.B) {
	s := memory.New()
	ledgertest.SeedNearCap(b, s, "near", 1_000_000)
	ledgertest.BenchNearCap(b, s, "near", 1_000_000)
}

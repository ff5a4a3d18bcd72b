package memory

import (
	"fmt"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// BenchmarkTermsHotKey is the override work of one decision on the hot
// key k0 (terms: the override that resolves, applied to the limit), on a
// limit with 100,000 overrides as budgetload --overrides puts them (k0*,
// k1, k2*, …: k0 under its prefix) and on one without: issue 26 wants the
// two within 10% end to end; the lookup should allocate nothing.
func BenchmarkTermsHotKey(b *testing.B) {
	for _, n := range []int{0, 100_000} {
		s := New()
		svc := ledger.NewService(s)
		if _, err := svc.PutLimit(b.Context(), "l", ledger.LimitSpec{Capacity: decimal.NewFromInt(1000), LeakAmount: decimal.NewFromInt(1), LeakPer: time.Second}); err != nil {
			b.Fatal(err)
		}
		for i := range n {
			p := fmt.Sprintf("k%d", i)
			if i%2 == 0 {
				p += "*"
			}
			if _, err := s.PutOverride(b.Context(), "l", ledger.Override{Pattern: p, Capacity: decimal.NewNullDecimal(decimal.NewFromInt(1000))}); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("overrides=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			now := time.Now()
			s.limitsMu.RLock()
			defer s.limitsMu.RUnlock()
			l := s.limits["l"]
			for b.Loop() {
				if t := s.terms(l, "k0", nil, now); t.Capacity.Sign() <= 0 {
					b.Fatal("no capacity")
				}
			}
		})
	}
}

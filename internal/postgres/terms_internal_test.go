package postgres

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ovset"
	"github.com/shopspring/decimal"
)

// termsFields is the number of fields of budgetd_terms_arg (migrations 0021
// and 0022).
const termsFields = 16

// fields counts the fields of a record literal, skipping quoted ones.
func fields(rec string) int {
	n, quoted := 1, false
	for i := 1; i < len(rec)-1; i++ {
		switch c := rec[i]; {
		case c == '\\' && quoted:
			i++
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			n++
		}
	}
	return n
}

func testLimitTerms(overrides int) *limitTerms {
	lt := &limitTerms{id: 7, rev: 1, over: 2, lim: ledger.Limit{Name: "l", Capacity: decimal.NewFromInt(10),
		LeakAmount: decimal.NewFromInt(1), LeakPer: time.Hour}}
	if overrides > 0 {
		lt.set = &ovset.Set{}
		for i := range overrides {
			lt.set.Put(ledger.Override{Pattern: fmt.Sprintf("k%d", i), Capacity: decimal.NewNullDecimal(decimal.NewFromInt(int64(100 + i)))})
		}
		lt.set.Put(ledger.Override{Pattern: `q"\*`, LeakAmount: decimal.NewFromInt(5), LeakPer: time.Minute})
	}
	return lt
}

// TestTermsArgShape: every terms argument is a record of the composite
// type's field count, a pattern with quotes and backslashes quoted, and
// the override's terms only where it applies.
func TestTermsArgShape(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	lt := testLimitTerms(10)
	for key, want := range map[string]string{
		"none": "(7,1,2,,,,,,,,,,,,,1)",
		"k3":   "(7,1,2,,,,\"k3\",103,,,,,,,,1)",
		`q"\x`: "(7,1,2,,,,\"q\\\"\\\\*\",10,5,60000000,,,,,,1)",
	} {
		got := lt.arg(key, now)
		if got != want || fields(got) != termsFields {
			t.Errorf("%s: %s (%d fields), want %s (%d)", key, got, fields(got), want, termsFields)
		}
	}
	if got := testLimitTerms(0).arg("k", now); fields(got) != termsFields || !strings.HasPrefix(got, "(7,1,2,") {
		t.Errorf("no overrides: %s", got)
	}
}

// BenchmarkTermsArg is what resolving a decision's terms in Go costs:
// a limit without overrides, and one with 100,000 (a key with one).
func BenchmarkTermsArg(b *testing.B) {
	now := time.Unix(1_800_000_000, 0)
	for _, n := range []int{0, 100_000} {
		lt := testLimitTerms(n)
		b.Run(fmt.Sprintf("overrides=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				_ = lt.arg("k12345", now)
			}
		})
	}
}

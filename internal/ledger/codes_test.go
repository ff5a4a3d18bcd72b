package ledger_test

import (
	"slices"
	"testing"

	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/internal/ledger"
)

// TestCodesAreAPICodes: internal/http answers a ledger code as the
// api.Code of the same text (ledger may not import api), so every code the
// ledger produces must be a problem code of api.Codes, and the refusal codes
// must be ledger codes.
func TestCodesAreAPICodes(t *testing.T) {
	for _, c := range ledger.Codes {
		if !slices.Contains(api.Codes, api.Code(c)) {
			t.Errorf("ledger code %q is not in api.Codes", c)
		}
	}
	for _, r := range []string{ledger.RefusalExceedsHold, ledger.RefusalExpired, ledger.RefusalClosed} {
		if !slices.Contains(ledger.Codes, ledger.Code(r)) {
			t.Errorf("refusal code %q is not in ledger.Codes", r)
		}
	}
}

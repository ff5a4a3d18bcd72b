package limitsfile

import (
	"errors"
	"testing"

	"github.com/budgetd/budgetd/internal/ledger"
)

// FuzzParse: any input either parses into a file whose every limit the
// API would store as it is, or is refused with an *Error, never a panic.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{goodYAML, goodJSON, base, "{}", "", "limits: [", "a: &a [*a]", "limits:\n  - name: a\n    capacity: 1e2\n",
		"overrides:\n  - {limit: a, pattern: x*, capacity: 1}\n", "envoy: [{domain: d, descriptors: [{entries: [{key: k}], limit: l, bucket: '{k}'}]}]\n"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) || file != nil {
				t.Fatalf("Parse = %v, %v: want nil and an *Error", file, err)
			}
			return
		}
		for _, l := range file.Limits {
			if _, err := ledger.CheckLimit(l.Name, l.Spec); err != nil {
				t.Fatalf("limit %s parsed, and the API refuses it: %v", l.Name, err)
			}
		}
	})
}

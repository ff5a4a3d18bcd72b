package http

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/budgetd/budgetd/internal/ledger"
)

// FuzzDuplicateMember: any input is answered without a panic; a refusal is
// invalid_request naming a field; and a body that is valid JSON with a member
// repeated in another case is always refused.
func FuzzDuplicateMember(f *testing.F) {
	for _, s := range []string{
		`{"cost":"1"}`, `{"cost":"1","Cost":"4"}`, `{"items":[{"cost":"1"},{"cost":"2","COST":"3"}]}`,
		`{"leak":{"amount":"1","per":"1h"},"capacity":"2"}`, `[{"a":1,"A":2}]`, `{"a":{"b":[1,{"c":2}]},"d":3}`,
		`{"a":`, `{"a":1e999,"A":2}`, `{"\u017f":1,"s":2}`, `{}`, `{"a":[[[]]],"b":{}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		err := duplicateMember([]byte(body))
		if err != nil {
			var inv *ledger.InvalidError
			if !errors.As(err, &inv) || inv.Code != "invalid_request" || inv.Field == "" {
				t.Fatalf("%q: %v", body, err)
			}
			return
		}
		// The same object with its first member given again in upper case
		// must be refused.
		var obj map[string]json.RawMessage
		if json.Unmarshal([]byte(body), &obj) != nil || len(obj) == 0 {
			return
		}
		trimmed := strings.TrimSpace(body)
		for name, v := range obj {
			upper := strings.ToUpper(name)
			if !strings.EqualFold(upper, name) || !utf8.ValidString(name) {
				continue // not the same name to encoding/json (dotless ı and I)
			}
			again, _ := json.Marshal(upper)
			doubled := "{" + string(again) + ":" + string(v) + "," + trimmed[1:]
			if duplicateMember([]byte(doubled)) == nil {
				t.Fatalf("%q: not refused", doubled)
			}
			break
		}
	})
}

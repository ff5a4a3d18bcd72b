package http_test

import (
	"encoding/json"
	"net/url"
	"slices"
	"testing"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
)

// TestNearCap lists who is near the cap over the API on every store:
// ?above=T keeps the buckets past threshold T, ?order=used and
// ?order=share rank them highest first across pages, each needs the read
// scope, and a threshold the limit does not list, an unknown order, an
// empty parameter or another listing's cursor is a 400 naming its field.
func TestNearCap(t *testing.T) {
	eachStoreRaw(t, func(t *testing.T, clock *ledgertest.Clock, store ledger.Store) {
		a, _, _ := authAPI(t, clock, store)
		admin, read := bearer(adminToken), bearer(readToken)
		a.expect("PUT", "/v1/limits/spend", `{"capacity":"100","period":{"every":"month"},"thresholds":["50%","80%","4500"]}`, 200, admin...)
		for k, cost := range map[string]string{"x/a": "95", "b": "85", "c": "60", "d": "10"} {
			a.expect("POST", "/v1/limits/spend/buckets/"+url.PathEscape(k)+"/fillup", `{"cost":"`+cost+`"}`, 200, admin...)
		}
		keys := func(q string) []string {
			t.Helper()
			var all []string
			cursor := ""
			for range 10 {
				path := "/v1/limits/spend/buckets?limit=2&" + q
				if cursor != "" {
					path += "&cursor=" + url.QueryEscape(cursor)
				}
				var p bucketPage
				if err := json.Unmarshal([]byte(a.expect("GET", path, "", 200, read...).raw), &p); err != nil {
					t.Fatal(err)
				}
				for _, it := range p.Items {
					all = append(all, it.Key)
				}
				if p.NextCursor == nil {
					return all
				}
				cursor = *p.NextCursor
			}
			t.Fatalf("%s: no end", q)
			return nil
		}
		for q, want := range map[string][]string{
			"above=80%25":             {"b", "x/a"},
			"above=50%25":             {"b", "c", "x/a"},
			"above=4500.00":           nil,
			"order=used":              {"x/a", "b", "c", "d"},
			"order=share&above=50%25": {"x/a", "b", "c"},
			"order=key":               {"b", "c", "d", "x/a"},
		} {
			if got := keys(q); !slices.Equal(got, want) {
				t.Errorf("%s: %q, want %q", q, got, want)
			}
		}
		a.expect("GET", "/v1/limits/spend/buckets?order=used", "", 401)
		a.expect("GET", "/v1/limits/none/buckets?above=80%25", "", 404, read...)
		r := a.expect("GET", "/v1/limits/spend/buckets?order=used&limit=1", "", 200, read...)
		used := r.body["next_cursor"].(string)
		for q, field := range map[string]string{
			"above=70%25": "above",
			"above=":      "above",
			"above=lots":  "above",
			"above=80":    "above",
			"order=level": "order",
			"order=":      "order",
			"order=share&cursor=" + url.QueryEscape(used): "cursor",
			"order=used&cursor=AA":                        "cursor",
		} {
			p := a.expect("GET", "/v1/limits/spend/buckets?"+q, "", 400, read...)
			if p.str("field") != field || p.str("code") != "invalid_request" || p.header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("%s: %s", q, p.raw)
			}
		}
	})
}

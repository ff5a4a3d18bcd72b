package http_test

import (
	"testing"
)

// TestMetaControlCharacters: a meta value with `\u0000` (which PostgreSQL's
// jsonb cannot hold: it answered 500) or another control character but tab
// and line breaks is a 400 naming the value on every store, on a Fillup and
// on an item of a multi-bucket one, and charges nothing; a value with tabs
// and line breaks is stored and comes back byte for byte.
func TestMetaControlCharacters(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.limit("spend", "100", "1", "1h")
		b := "/v1/limits/spend/buckets/k"
		for _, v := range []string{`a\u0000b`, `\u0000`, `\u001b[31m`, `a\u007f`} {
			for _, call := range []struct{ path, body, field string }{
				{b + "/fillup", `{"cost":"1","meta":{"order":"` + v + `"}}`, "meta.order"},
				{"/v1/fillup", `{"items":[{"limit":"spend","key":"o","cost":"1"},{"limit":"spend","key":"k","cost":"1","meta":{"order":"` + v + `"}}]}`, "items[1].meta.order"},
			} {
				r := a.expect("POST", call.path, call.body, 400)
				if r.str("code") != "invalid_request" || r.str("field") != call.field {
					t.Errorf("%s %s: %s, want invalid_request naming %s", call.path, call.body, r.raw, call.field)
				}
			}
		}
		if level := jsonField(t, a.bucketState(b), "level"); level != "0" {
			t.Errorf("refused meta charged: level %s", level)
		}
		a.expect("PUT", "/v1/limits/spend", `{"capacity":"100","leak":{"amount":"1","per":"1h"},"history":true}`, 200)
		a.expect("POST", b+"/fillup", `{"cost":"1","meta":{"note":"a\tb\r\nc\n"}}`, 200)
		r := a.expect("GET", b+"/history", "", 200)
		items, _ := r.body["items"].([]any)
		if len(items) != 1 {
			t.Fatalf("history: %s", r.raw)
		}
		meta, _ := items[0].(map[string]any)["meta"].(map[string]any)
		if meta["note"] != "a\tb\r\nc\n" {
			t.Errorf("meta came back as %q", meta["note"])
		}
	})
}

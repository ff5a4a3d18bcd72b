package http_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	budgethttp "github.com/budgetd/budgetd/internal/http"
)

// TestCanAcceptPath checks GET …/buckets/{key}/can-accept: the same
// decision, byte for byte and with the same RateLimit fields, as SPEC's
// original form GET …/buckets/{key}?cost=, which keeps working; cost is
// required; nothing is written.
func TestCanAcceptPath(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.limit("rows", "100", "1", "1h")
		bucket := "/v1/limits/rows/buckets/a%2Fb"
		a.expect("POST", bucket+"/fillup", `{"cost":"90"}`, 200)
		before := a.bucketState(bucket)
		for _, cost := range []string{"5", "25", "100.000001"} {
			got := a.expect("GET", bucket+"/can-accept?cost="+cost, "", 200)
			legacy := a.expect("GET", bucket+"?cost="+cost, "", 200)
			if got.raw != legacy.raw {
				t.Fatalf("cost %s: can-accept answered\n%s\nthe original form\n%s", cost, got.raw, legacy.raw)
			}
			for _, h := range []string{"RateLimit", "RateLimit-Policy"} {
				if got.header.Get(h) == "" || got.header.Get(h) != legacy.header.Get(h) {
					t.Fatalf("cost %s: %s %q, the original form %q", cost, h, got.header.Get(h), legacy.header.Get(h))
				}
			}
			if _, ok := got.body["accepted"].(bool); !ok {
				t.Fatalf("cost %s: not a decision: %s", cost, got.raw)
			}
		}
		if after := a.bucketState(bucket); after != before {
			t.Fatalf("can-accept changed the bucket:\n%s\n%s", before, after)
		}
		// The state (without cost) is still the bucket, not a decision.
		if st := a.expect("GET", bucket, "", 200); st.body["accepted"] != nil || st.str("level") != "90" {
			t.Fatalf("state: %s", st.raw)
		}
		for _, c := range []struct {
			path        string
			status      int
			code, field string
		}{
			{bucket + "/can-accept", 400, "invalid_amount", "cost"},
			{bucket + "/can-accept?cost=", 400, "invalid_amount", "cost"},
			{bucket + "/can-accept?cost=1e3", 400, "invalid_amount", "cost"},
			{bucket + "/can-accept?cost=%zz", 400, "invalid_amount", "cost"},
			{"/v1/limits/Bad/buckets/k/can-accept?cost=1", 400, "invalid_name", "name"},
			{"/v1/limits/rows/buckets/%00/can-accept?cost=1", 400, "invalid_key", "key"},
			{"/v1/limits/nope/buckets/k/can-accept?cost=1", 404, "limit_not_found", ""},
		} {
			r := a.expect("GET", c.path, "", c.status)
			if r.str("code") != c.code || r.str("field") != c.field {
				t.Errorf("GET %s: %s", c.path, r.raw)
			}
		}
	})
}

// TestOpenAPIOneShape checks that every request and answer body of
// openapi.json is one named schema: no oneOf/anyOf (which generators turn
// into unchecked unions: oapi-codegen's AsBucketState succeeds on a
// decision) and no inline object (an anonymous struct in generated code).
func TestOpenAPIOneShape(t *testing.T) {
	var doc struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas   map[string]map[string]any `json:"schemas"`
			Responses map[string]struct {
				Content map[string]struct {
					Schema map[string]any `json:"schema"`
				} `json:"content"`
			} `json:"responses"`
		} `json:"components"`
	}
	if err := json.Unmarshal(budgethttp.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	var bad []string
	body := func(at string, schema map[string]any) {
		if schema == nil {
			return
		}
		if _, ok := schema["$ref"]; ok {
			return
		}
		if at == "GET /openapi.json 200" { // the document itself: any object
			return
		}
		if t, _ := schema["type"].(string); t == "string" {
			return // text answers (/metrics)
		}
		bad = append(bad, fmt.Sprintf("%s: an inline schema %v", at, schema))
	}
	for path, ops := range doc.Paths {
		for method, raw := range ops {
			if method == "parameters" {
				continue
			}
			var op struct {
				RequestBody struct {
					Content map[string]struct {
						Schema map[string]any `json:"schema"`
					} `json:"content"`
				} `json:"requestBody"`
				Responses map[string]struct {
					Content map[string]struct {
						Schema map[string]any `json:"schema"`
					} `json:"content"`
				} `json:"responses"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatal(err)
			}
			at := strings.ToUpper(method) + " " + path
			for _, c := range op.RequestBody.Content {
				body(at+" body", c.Schema)
			}
			for status, r := range op.Responses {
				for _, c := range r.Content {
					body(at+" "+status, c.Schema)
				}
			}
		}
	}
	for name, r := range doc.Components.Responses {
		for _, c := range r.Content {
			body("response "+name, c.Schema)
		}
	}
	// Inside the named schemas: no union, and every object-valued
	// property is a named schema too.
	var walk func(at string, s map[string]any)
	walk = func(at string, s map[string]any) {
		for _, k := range []string{"oneOf", "anyOf"} {
			if _, ok := s[k]; ok {
				bad = append(bad, at+": "+k)
			}
		}
		props, _ := s["properties"].(map[string]any)
		for name, p := range props {
			p, _ := p.(map[string]any)
			if _, ok := p["properties"]; ok {
				bad = append(bad, at+"."+name+": an inline object")
			}
			typed := false
			for _, k := range []string{"type", "$ref", "allOf", "enum", "const"} {
				if _, ok := p[k]; ok {
					typed = true
				}
			}
			if !typed { // interface{} in oapi-codegen, jx.Raw in ogen
				bad = append(bad, at+"."+name+": no type")
			}
			walk(at+"."+name, p)
		}
		if items, ok := s["items"].(map[string]any); ok {
			if _, ok := items["properties"]; ok {
				bad = append(bad, at+"[]: an inline object")
			}
			walk(at+"[]", items)
		}
	}
	for name, s := range doc.Components.Schemas {
		walk(name, s)
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("openapi.json has bodies that generate unions or anonymous types:\n%s", strings.Join(bad, "\n"))
	}
}

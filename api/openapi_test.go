package api_test

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/budgetd/budgetd/api"
	"github.com/shopspring/decimal"
)

// schema is one JSON Schema object of the OpenAPI document.
type schema map[string]any

type openAPI struct {
	schemas map[string]schema
}

func loadOpenAPI(t *testing.T) openAPI {
	t.Helper()
	b, err := os.ReadFile("../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]schema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return openAPI{doc.Components.Schemas}
}

// resolve follows $ref, and a wrapper that is one allOf member with only a
// description beside it.
func (o openAPI) resolve(s schema) schema {
	for {
		if ref, ok := s["$ref"].(string); ok {
			s = o.schemas[strings.TrimPrefix(ref, "#/components/schemas/")]
			continue
		}
		if all, ok := s["allOf"].([]any); ok && len(all) == 1 && s["properties"] == nil && s["type"] == nil {
			s = schema(all[0].(map[string]any))
			continue
		}
		return s
	}
}

// flatten merges s with its allOf members: every property and the required
// names.
func (o openAPI) flatten(s schema) (map[string]schema, map[string]bool) {
	s = o.resolve(s)
	props, req := map[string]schema{}, map[string]bool{}
	if all, ok := s["allOf"].([]any); ok {
		for _, m := range all {
			p, r := o.flatten(schema(m.(map[string]any)))
			for k, v := range p {
				props[k] = v
			}
			for k := range r {
				req[k] = true
			}
		}
	}
	if p, ok := s["properties"].(map[string]any); ok {
		for k, v := range p {
			props[k] = schema(v.(map[string]any))
		}
	}
	if r, ok := s["required"].([]any); ok {
		for _, k := range r {
			req[k.(string)] = true
		}
	}
	return props, req
}

// types returns the JSON types a schema allows.
func (o openAPI) types(s schema) []string {
	s = o.resolve(s)
	switch t := s["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, x := range t {
			out = append(out, x.(string))
		}
		return out
	}
	if all, ok := s["allOf"].([]any); ok && len(all) > 0 {
		return []string{"object"}
	}
	return nil
}

// jsonField is one member of a Go type's JSON form.
type jsonField struct {
	typ       reflect.Type
	omitempty bool
}

// jsonFields lists the JSON members of struct type t, embedded structs
// flattened as encoding/json does.
func jsonFields(t reflect.Type) map[string]jsonField {
	out := map[string]jsonField{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if f.Anonymous && tag == "" {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		out[name] = jsonField{f.Type, strings.Contains(opts, "omitempty")}
	}
	return out
}

var (
	decimalType  = reflect.TypeFor[decimal.Decimal]()
	timeType     = reflect.TypeFor[api.Time]()
	durationType = reflect.TypeFor[api.Duration]()
	percentType  = reflect.TypeFor[api.Percent]()
)

// jsonType is the JSON type a Go type is written as.
func jsonType(t reflect.Type) string {
	switch {
	case t == decimalType || t == timeType || t == durationType || t == percentType:
		return "string"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int64:
		return "integer"
	case reflect.Slice:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	}
	return t.Kind().String()
}

// isDocument says whether t is a struct whose members are compared one by
// one.
func isDocument(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && t != decimalType && t != timeType && t != percentType
}

// compare checks the Go type t against the schema s both ways: every member
// of one is a property of the other with the same JSON type, nullable
// exactly when the Go field is a pointer written as null, and required
// exactly when the Go field is always written (no omitempty).
func (o openAPI) compare(t *testing.T, path string, typ reflect.Type, s schema, ignore map[string]bool) {
	t.Helper()
	props, req := o.flatten(s)
	fields := jsonFields(typ)
	for name, f := range fields {
		at := path + "." + name
		p, ok := props[name]
		if !ok {
			t.Errorf("%s: the Go type has it, the OpenAPI schema does not", at)
			continue
		}
		if req[name] == f.omitempty {
			t.Errorf("%s: required in OpenAPI %v, but the Go field always written %v", at, req[name], !f.omitempty)
		}
		ft := f.typ
		nullable := false
		if ft.Kind() == reflect.Pointer {
			ft, nullable = ft.Elem(), !f.omitempty
		}
		types := o.types(p)
		if !slices.Contains(types, jsonType(ft)) {
			t.Errorf("%s: Go writes a JSON %s, OpenAPI allows %v", at, jsonType(ft), types)
		}
		if slices.Contains(types, "null") != nullable && !f.omitempty {
			t.Errorf("%s: Go nullable %v, OpenAPI types %v", at, nullable, types)
		}
		switch {
		case isDocument(ft):
			o.compare(t, at, ft, p, nil)
		case ft.Kind() == reflect.Slice && isDocument(ft.Elem()):
			items, _ := o.resolve(p)["items"].(map[string]any)
			o.compare(t, at+"[]", ft.Elem(), schema(items), nil)
		}
	}
	for name := range props {
		if _, ok := fields[name]; !ok && !ignore[name] {
			t.Errorf("%s.%s: the OpenAPI schema has it, the Go type does not", path, name)
		}
	}
}

// Every document schema of docs/openapi.json and its Go type in package api
// agree member by member, both ways.
func TestOpenAPIMatchesTheTypes(t *testing.T) {
	o := loadOpenAPI(t)
	types := map[string]reflect.Type{
		"Limit":                   reflect.TypeFor[api.Limit](),
		"Leak":                    reflect.TypeFor[api.Leak](),
		"Period":                  reflect.TypeFor[api.Period](),
		"LeakPut":                 reflect.TypeFor[api.Leak](),
		"PeriodPut":               reflect.TypeFor[api.PeriodPut](),
		"Window":                  reflect.TypeFor[api.Window](),
		"WindowPut":               reflect.TypeFor[api.WindowPut](),
		"LimitPut":                reflect.TypeFor[api.LimitPut](),
		"Decision":                reflect.TypeFor[api.Decision](),
		"BucketState":             reflect.TypeFor[api.BucketState](),
		"BucketListItem":          reflect.TypeFor[api.BucketListItem](),
		"Reservation":             reflect.TypeFor[api.Reservation](),
		"Reserved":                reflect.TypeFor[api.Reserved](),
		"Resolved":                reflect.TypeFor[api.Resolved](),
		"DrainResult":             reflect.TypeFor[api.Drained](),
		"HistoryEntry":            reflect.TypeFor[api.HistoryEntry](),
		"LimitPage":               reflect.TypeFor[api.Page[api.Limit]](),
		"HistoryPage":             reflect.TypeFor[api.Page[api.HistoryEntry]](),
		"LevelPoint":              reflect.TypeFor[api.LevelPoint](),
		"LevelSeries":             reflect.TypeFor[api.LevelSeries](),
		"BucketPage":              reflect.TypeFor[api.Page[api.BucketListItem]](),
		"ReservationList":         reflect.TypeFor[api.ReservationList](),
		"FillupRequest":           reflect.TypeFor[api.FillupRequest](),
		"DrainRequest":            reflect.TypeFor[api.DrainRequest](),
		"ReserveRequest":          reflect.TypeFor[api.ReserveRequest](),
		"CommitRequest":           reflect.TypeFor[api.CommitRequest](),
		"ReleaseRequest":          reflect.TypeFor[api.ReleaseRequest](),
		"MultiFillupItem":         reflect.TypeFor[api.MultiFillupItem](),
		"MultiFillupRequest":      reflect.TypeFor[api.MultiFillupRequest](),
		"MultiFillupItemDecision": reflect.TypeFor[api.MultiFillupItemDecision](),
		"MultiFillupResult":       reflect.TypeFor[api.MultiFillupResult](),
		"Problem":                 reflect.TypeFor[api.Problem](),
		"Health":                  reflect.TypeFor[api.Health](),
		"WebhookEvent":            reflect.TypeFor[api.WebhookEvent](),
		"EventPage":               reflect.TypeFor[api.EventPage](),
		"Override":                reflect.TypeFor[api.Override](),
		"OverridePeriod":          reflect.TypeFor[api.OverridePeriod](),
		"OverrideWindow":          reflect.TypeFor[api.OverrideWindow](),
		"OverridePut":             reflect.TypeFor[api.OverridePut](),
		"OverridePage":            reflect.TypeFor[api.Page[api.Override]](),
		"BucketEventList":         reflect.TypeFor[api.BucketEventList](),
		"LimitCounts":             reflect.TypeFor[api.LimitCounts](),
		"Grant":                   reflect.TypeFor[api.Grant](),
		"GrantRequest":            reflect.TypeFor[api.GrantRequest](),
		"Granted":                 reflect.TypeFor[api.Granted](),
		"GrantPage":               reflect.TypeFor[api.Page[api.Grant]](),
		"Rollover":                reflect.TypeFor[api.Rollover](),
		"RolloverPut":             reflect.TypeFor[api.Rollover](),
	}
	// Schemas of single values, not documents.
	values := map[string]bool{"AmountInput": true, "Decimal": true, "Percent": true, "Duration": true, "Timestamp": true, "ProblemCode": true, "Meta": true}
	// A limit document read with GET may be PUT back: the PUT body accepts
	// (and ignores) its name and times, which LimitPut does not send.
	ignore := map[string]map[string]bool{"LimitPut": {"name": true, "created_at": true, "updated_at": true},
		"OverridePut": {"pattern": true, "created_at": true, "updated_at": true}}
	for name, s := range o.schemas {
		typ, ok := types[name]
		switch {
		case values[name]:
			continue
		case !ok:
			t.Errorf("schema %s has no Go type in package api", name)
			continue
		}
		o.compare(t, name, typ, s, ignore[name])
	}
	for name := range types {
		if _, ok := o.schemas[name]; !ok {
			t.Errorf("Go type for %s has no schema", name)
		}
	}
}

// The enumerations of the OpenAPI document are the constants of package
// api.
func TestOpenAPIEnumsMatchTheConstants(t *testing.T) {
	o := loadOpenAPI(t)
	enum := func(s schema) []string {
		var out []string
		for _, v := range o.resolve(s)["enum"].([]any) {
			out = append(out, v.(string))
		}
		sort.Strings(out)
		return out
	}
	strs := func(vs ...string) []string { sort.Strings(vs); return vs }
	var codes []string
	for _, c := range api.Codes {
		codes = append(codes, string(c))
	}
	props := func(name string) map[string]schema { p, _ := o.flatten(o.schemas[name]); return p }
	for name, tc := range map[string]struct{ got, want []string }{
		"ProblemCode":        {enum(o.schemas["ProblemCode"]), strs(codes...)},
		"Period.every":       {enum(props("Period")["every"]), strs(string(api.Day), string(api.Week), string(api.Month), string(api.Quarter), string(api.Year))},
		"HistoryEntry.event": {enum(props("HistoryEntry")["event"]), strs(string(api.EventFillup), string(api.EventDrain), string(api.EventReserved), string(api.EventCommitted), string(api.EventReleased), string(api.EventExpired), string(api.EventDenied), string(api.EventGranted), string(api.EventRevoked))},
		"Reservation.state":  {enum(props("Reservation")["state"]), strs(string(api.Active), string(api.Committed), string(api.Released), string(api.Expired))},
	} {
		if !slices.Equal(tc.got, tc.want) {
			t.Errorf("%s: OpenAPI %v, package api %v", name, tc.got, tc.want)
		}
	}
}

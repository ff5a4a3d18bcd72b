// Package limitsfile reads budgetd's declarative limits file (SPEC "Limits
// as code"), plans what it takes to bring a budgetd to the state the file
// states, and applies that plan through any Target: the HTTP client (the
// CLI's budgetd apply) or the ledger service (budgetd --limits-file at
// start).
//
// The file is YAML or JSON (JSON is YAML) with three optional members:
// limits (each a limit's PUT body plus its name), overrides (each an
// override's PUT body plus its limit and pattern) and envoy (the mapping of
// Envoy's rate-limit descriptors, internal/envoy). Every body is read by
// the same code that reads it on the API (internal/http.ParseLimit,
// ParseOverride, ledger.CheckLimit, ledger.ValidateOverride), so a file is
// refused for exactly what the API refuses, and a bad file is refused whole,
// naming the line and the path of the field (limits[2].capacity).
//
// The package does no I/O of its own: Parse takes the file's bytes, and the
// plan reads and writes only through the Target it is given.
package limitsfile

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/internal/envoy"
	bhttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
)

// File is a limits file that parsed: every limit, override and Envoy
// domain in it is valid, and no name, (limit, pattern) or domain appears
// twice.
type File struct {
	// Limits are the file's limits, in the file's order.
	Limits []Limit
	// Overrides are the file's overrides, in the file's order.
	Overrides []Override
	// Envoy is the file's Envoy mapping, already checked by
	// envoy.NewMapping; nil when the file has none.
	Envoy []envoy.Domain
}

// Limit is one member of the file's limits.
type Limit struct {
	// Name is the limit's name.
	Name string
	// Spec is the PUT body as the API reads it (defaults of the body
	// filled in: history on).
	Spec ledger.LimitSpec
	// Limit is what a PUT of Spec stores (ledger.CheckLimit): the defaults
	// the server fills in are there, so that comparing it with a stored
	// limit finds only real changes. Its times are zero.
	Limit ledger.Limit
	// Line is the line of the file the limit starts on.
	Line int
}

// Document is the limit as the API shows it, without times.
func (l Limit) Document() api.Limit { return bhttp.LimitDocument(l.Limit) }

// Override is one member of the file's overrides.
type Override struct {
	// Limit is the name of the override's limit.
	Limit string
	// Override is the PUT body as the API reads it, with its pattern.
	Override ledger.Override
	// Line is the line of the file the override starts on.
	Line int
}

// Document is the override as the API shows it, without times.
func (o Override) Document() api.Override { return bhttp.OverrideDocument(o.Override) }

// Error is a limits file refused: Line (0 when unknown) and Field (the
// path of the member at fault, "" for the whole file) say where, Reason
// what; Code is the API's code for the same refusal when there is one.
type Error struct {
	Line   int
	Field  string
	Code   ledger.Code
	Reason string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("limits file")
	if e.Line > 0 {
		fmt.Fprintf(&b, ": line %d", e.Line)
	}
	if e.Field != "" {
		b.WriteString(": " + e.Field)
	}
	b.WriteString(": " + e.Reason)
	return b.String()
}

// Parse reads a limits file. Anything wrong in it refuses it whole with an
// *Error: malformed YAML or JSON, an unknown member anywhere, a value the
// API refuses, a limit name, (limit, pattern) or Envoy domain given twice,
// an override that does not fit its limit's kind when the limit is in the
// file. An override's expiry and an override of a limit the file does not
// hold are checked by Plan, against the server's clock and limits.
func Parse(data []byte) (*File, error) {
	doc, err := toJSON(data)
	if err != nil {
		return nil, err
	}
	p := &parse{doc: doc, file: &File{}}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc.json, &top); err != nil {
		return nil, p.fail("", "", "the file must be a mapping with limits, overrides and envoy")
	}
	for _, k := range slices.Sorted(maps.Keys(top)) {
		if k != "limits" && k != "overrides" && k != "envoy" {
			return nil, p.fail(k, "", fmt.Sprintf("unknown member %q: a limits file has limits, overrides and envoy", k))
		}
	}
	if err := p.limits(top["limits"]); err != nil {
		return nil, err
	}
	if err := p.overrides(top["overrides"]); err != nil {
		return nil, err
	}
	if err := p.envoy(top["envoy"]); err != nil {
		return nil, err
	}
	return p.file, nil
}

// parse is the state of one Parse.
type parse struct {
	doc  *document
	file *File
}

// fail is an *Error at path.
func (p *parse) fail(path string, code ledger.Code, reason string) error {
	return &Error{Line: p.doc.line(path), Field: path, Code: code, Reason: reason}
}

// at turns an error of the API's parsers, whose field is relative to the
// member at path, into an *Error naming the field's whole path and line.
func (p *parse) at(path string, err error) error {
	var ie *ledger.InvalidError
	if !errors.As(err, &ie) {
		return p.fail(path, "", err.Error())
	}
	field := path
	if ie.Field != "" && ie.Field != "body" {
		field = p.within(path, ie.Field)
	}
	reason := ie.Reason
	// The API's decoder names the field in its reason too; say it once.
	reason = strings.ReplaceAll(reason, ie.Field+" must", "must")
	return p.fail(field, ie.Code, reason)
}

// within is the path of field inside the member at path. encoding/json
// names an unknown member of a nested object by its name alone (every, not
// leak.every): when path.field is not in the file, the one member of that
// name under path is meant.
func (p *parse) within(path, field string) string {
	whole := path + "." + field
	if _, ok := p.doc.lines[whole]; ok || strings.ContainsAny(field, ".[") {
		return whole
	}
	found := ""
	for k := range p.doc.lines {
		if strings.HasPrefix(k, path+".") && strings.HasSuffix(k, "."+field) {
			if found != "" {
				return whole
			}
			found = k
		}
	}
	return cmp.Or(found, whole)
}

// each calls fn with every item of the member name (a list, when
// present), its path (limits[2]), its JSON and its members (a mapping).
func (p *parse) each(name string, raw json.RawMessage, fn func(i int, path string, item json.RawMessage, m map[string]json.RawMessage) error) error {
	if raw == nil || string(raw) == "null" {
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return p.fail(name, ledger.CodeInvalidRequest, "must be a list")
	}
	for i, item := range items {
		path := fmt.Sprintf("%s[%d]", name, i)
		var m map[string]json.RawMessage
		if err := json.Unmarshal(item, &m); err != nil || m == nil {
			return p.fail(path, ledger.CodeInvalidRequest, "must be a mapping")
		}
		if err := fn(i, path, item, m); err != nil {
			return err
		}
	}
	return nil
}

// name reads the string member key of an item, which must be there.
func (p *parse) name(path, key string, m map[string]json.RawMessage) (string, error) {
	raw, ok := m[key]
	if !ok || string(raw) == "null" {
		return "", p.fail(path+"."+key, ledger.CodeInvalidRequest, "is required")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", p.fail(path+"."+key, ledger.CodeInvalidRequest, "must be a string")
	}
	return s, nil
}

// limits reads the limits member.
func (p *parse) limits(raw json.RawMessage) error {
	seen := map[string]int{}
	return p.each("limits", raw, func(i int, path string, item json.RawMessage, m map[string]json.RawMessage) error {
		name, err := p.name(path, "name", m)
		if err != nil {
			return err
		}
		if err := ledger.ValidateName(name); err != nil {
			return p.at(path, err)
		}
		if j, dup := seen[name]; dup {
			return p.fail(path+".name", ledger.CodeInvalidRequest, fmt.Sprintf("%q is already defined by limits[%d]", name, j))
		}
		seen[name] = i
		spec, err := bhttp.ParseLimit(name, item)
		if err != nil {
			return p.at(path, err)
		}
		l, err := ledger.CheckLimit(name, spec)
		if err != nil {
			return p.at(path, err)
		}
		p.file.Limits = append(p.file.Limits, Limit{Name: name, Spec: spec, Limit: l, Line: p.doc.line(path)})
		return nil
	})
}

// overrides reads the overrides member; the limits are read already.
func (p *parse) overrides(raw json.RawMessage) error {
	type ref struct{ limit, pattern string }
	seen := map[ref]int{}
	return p.each("overrides", raw, func(i int, path string, _ json.RawMessage, m map[string]json.RawMessage) error {
		limit, err := p.name(path, "limit", m)
		if err != nil {
			return err
		}
		if err := ledger.ValidateName(limit); err != nil {
			return p.at(path, &ledger.InvalidError{Code: ledger.CodeInvalidName, Field: "limit", Reason: err.(*ledger.InvalidError).Reason})
		}
		pattern, err := p.name(path, "pattern", m)
		if err != nil {
			return err
		}
		if err := ledger.ValidatePattern(pattern); err != nil {
			return p.at(path, err)
		}
		if j, dup := seen[ref{limit, pattern}]; dup {
			return p.fail(path+".pattern", ledger.CodeInvalidRequest, fmt.Sprintf("%q of limit %q is already defined by overrides[%d]", pattern, limit, j))
		}
		seen[ref{limit, pattern}] = i
		delete(m, "limit")
		body, err := json.Marshal(m)
		if err != nil {
			return p.fail(path, "", err.Error())
		}
		o, err := bhttp.ParseOverride(pattern, body)
		if err != nil {
			return p.at(path, err)
		}
		if l, ok := p.limit(limit); ok {
			// The zero instant: any expiry is after it; Plan checks the
			// expiry against the server's clock.
			if err := ledger.ValidateOverride(l.Limit, o, time.Time{}); err != nil {
				return p.at(path, err)
			}
		}
		p.file.Overrides = append(p.file.Overrides, Override{Limit: limit, Override: o, Line: p.doc.line(path)})
		return nil
	})
}

// limit returns the file's limit name.
func (p *parse) limit(name string) (Limit, bool) {
	return p.file.lookup(name)
}

// lookup returns the file's limit name.
func (f *File) lookup(name string) (Limit, bool) {
	for _, l := range f.Limits {
		if l.Name == name {
			return l, true
		}
	}
	return Limit{}, false
}

// envoy reads the envoy member: its shape against envoy.Domain (no member
// it does not have), then envoy.NewMapping's checks.
func (p *parse) envoy(raw json.RawMessage) error {
	if raw == nil || string(raw) == "null" {
		return nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return p.fail("envoy", ledger.CodeInvalidRequest, err.Error())
	}
	if err := p.shape(v, reflect.TypeFor[[]envoy.Domain](), "envoy"); err != nil {
		return err
	}
	var domains []envoy.Domain
	if err := json.Unmarshal(raw, &domains); err != nil {
		return p.fail("envoy", ledger.CodeInvalidRequest, err.Error())
	}
	if _, err := envoy.NewMapping(domains); err != nil {
		var ie *ledger.InvalidError
		if errors.As(err, &ie) {
			return p.fail(ie.Field, ie.Code, ie.Reason)
		}
		return p.fail("envoy", "", err.Error())
	}
	p.file.Envoy = domains
	return nil
}

// shape checks that v, decoded JSON found at path, fits t: an object only
// where t is a struct, with only the members t names (json tags, exactly),
// a list where t is a slice, a string where t is a string.
func (p *parse) shape(v any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v == nil {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return p.fail(path, ledger.CodeInvalidRequest, "must be a mapping")
		}
		fields := map[string]reflect.Type{}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			fields[name] = f.Type
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			ft, ok := fields[k]
			if !ok {
				return p.fail(path+"."+k, ledger.CodeInvalidRequest, fmt.Sprintf("unknown field %q", k))
			}
			if err := p.shape(m[k], ft, path+"."+k); err != nil {
				return err
			}
		}
	case reflect.Slice:
		items, ok := v.([]any)
		if !ok {
			return p.fail(path, ledger.CodeInvalidRequest, "must be a list")
		}
		for i, item := range items {
			if err := p.shape(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			return p.fail(path, ledger.CodeInvalidRequest, "must be a string")
		}
	}
	return nil
}

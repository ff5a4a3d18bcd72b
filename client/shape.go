package client

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// checkShape refuses an answer that is JSON but not the document v is: a
// member the document always carries (one without omitempty in its api
// type, null when it has no value) is missing, at the top or in a nested
// document. Without it a 200 from something else ({} from a proxy, another
// service's document) would read as zero values: an empty bucket, a limit
// of capacity 0.
func checkShape(body []byte, v any) error {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var raw json.RawMessage = body
	return shapeOf(raw, t, "the answer")
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// shapeOf checks the document raw against the type t; at names it for
// the error.
func shapeOf(raw json.RawMessage, t reflect.Type, at string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		var members map[string]json.RawMessage
		if err := json.Unmarshal(raw, &members); err != nil || members == nil {
			return fmt.Errorf("%s is not a JSON object", at)
		}
		return membersOf(members, t, at)
	case reflect.Slice:
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return nil // json.Unmarshal says what is wrong
		}
		for i, it := range items {
			if string(it) == "null" {
				continue
			}
			if err := shapeOf(it, t.Elem(), fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// membersOf checks the members of one object against the struct type t,
// its embedded structs included.
func membersOf(members map[string]json.RawMessage, t reflect.Type, at string) error {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			if err := membersOf(members, f.Type, at); err != nil {
				return err
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		m, ok := members[name]
		if !ok {
			if strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero") {
				continue
			}
			return fmt.Errorf("%s has no member %q", at, name)
		}
		if string(m) == "null" {
			continue
		}
		if err := shapeOf(m, f.Type, at+"."+name); err != nil {
			return err
		}
	}
	return nil
}

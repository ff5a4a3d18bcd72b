package http

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/labstack/echo/v4"
)

// maxBody is the largest request body read; a larger one answers 413.
const maxBody = 64 << 10

// readJSON decodes the request body into dst. The body is JSON whatever the
// Content-Type says (so plain `curl -d` works); an empty body decodes as {}.
// Unknown fields are refused: a misspelt "amount" must not commit the whole
// hold. So are duplicate members, compared as encoding/json matches names
// (case-insensitively): {"cost":"1","Cost":"4"} would charge 4 while a proxy
// or an audit log reading the first member saw 1.
func readJSON(c echo.Context, dst any) error {
	bp, err := readBody(c)
	if err != nil {
		return err
	}
	defer bufPool.Put(bp)
	return decodeBody(*bp, dst)
}

// decodeBody is readJSON of a body already read.
func decodeBody(body []byte, dst any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if err := duplicateMember(body); err != nil {
		return err
	}
	return decodeStrict(body, dst, "")
}

// readBody reads the request body, at most maxBody bytes, into a buffer of
// bufPool that the caller puts back once done with it.
func readBody(c echo.Context) (*[]byte, error) {
	r := c.Request()
	if r.ContentLength > maxBody {
		return nil, errTooLarge
	}
	bp := bufPool.Get().(*[]byte)
	b := (*bp)[:0]
	if r.Body != nil {
		for {
			if len(b) == cap(b) {
				b = append(b, 0)[:len(b)]
			}
			n, err := r.Body.Read(b[len(b):min(cap(b), maxBody+1)])
			b = b[:len(b)+n]
			if len(b) > maxBody {
				*bp = b[:0]
				bufPool.Put(bp)
				return nil, errTooLarge
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				*bp = b[:0]
				bufPool.Put(bp)
				return nil, invalidRequest("body", "could not read the request body")
			}
		}
	}
	*bp = b
	return bp, nil
}

// duplicateMember returns an invalid_request error naming the first member of
// any JSON object in data (nested ones too, e.g. items[2].cost or
// leak.amount) whose name is given again, compared with the case folding
// encoding/json applies when it matches names to fields. It returns nil for
// malformed JSON, which decodeStrict then explains.
func duplicateMember(data []byte) error {
	if bytes.Count(data, []byte{':'}) < 2 {
		return nil // at most one member: no duplicate (the common {"cost":"1"})
	}
	type frame struct {
		object  bool
		path    string
		seen    map[string]string // folded name → name as first sent
		name    string            // the member whose value is being read
		wantKey bool
		index   int
	}
	var stack []*frame
	valuePath := func() string {
		if len(stack) == 0 {
			return ""
		}
		top := stack[len(stack)-1]
		if top.object {
			return joinPath(top.path, top.name)
		}
		return fmt.Sprintf("%s[%d]", top.path, top.index)
	}
	valueDone := func() {
		if len(stack) == 0 {
			return
		}
		if top := stack[len(stack)-1]; top.object {
			top.wantKey = true
		} else {
			top.index++
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // numbers stay text: no value can fail to convert
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // the end, or malformed JSON that decodeStrict reports
		}
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantKey {
			top := stack[n-1]
			name, ok := tok.(string)
			if !ok { // the closing brace
				stack = stack[:n-1]
				valueDone()
				continue
			}
			f := foldName(name)
			if first, dup := top.seen[f]; dup {
				field := joinPath(top.path, first)
				if first == "" { // an empty name: name the object instead
					field = cmp.Or(top.path, "body")
				}
				return invalidRequest(field, fmt.Sprintf("%s is given twice (as %q and %q); member names are matched case-insensitively, so each may appear once", field, first, name))
			}
			top.seen[f] = name
			top.name, top.wantKey = name, false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, path: valuePath(), seen: map[string]string{}, wantKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{path: valuePath()})
			continue
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		valueDone()
	}
}

// foldName maps a member name to one spelling per class of names that
// encoding/json treats as the same field: every rune becomes the smallest
// rune of its Unicode simple case-folding orbit (so "Cost", "COST" and "coſt"
// with a long s all match "cost", as bytes.EqualFold has it).
func foldName(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	for _, r := range name {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			m = min(m, f)
		}
		b.WriteRune(m)
	}
	return b.String()
}

// joinPath names member name of the object at path, as SPEC's field paths do.
func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// decodeStrict decodes one JSON value from data into dst, refusing unknown
// fields and trailing data. Errors name fields with prefix in front (e.g.
// "items[2]."), so a nested object decoded on its own is named as the client
// sent it.
func decodeStrict(data []byte, dst any, prefix string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err, prefix)
	}
	if len(bytes.TrimSpace(data[dec.InputOffset():])) != 0 {
		return invalidRequest("body", "unexpected data after the JSON object")
	}
	return nil
}

// decodeError names what is wrong with a body encoding/json refused; field
// names get prefix in front.
func decodeError(err error, prefix string) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return invalidRequest("body", fmt.Sprintf("malformed JSON at byte %d: %v", syn.Offset, syn))
	case errors.As(err, &typ):
		if typ.Field == "" {
			if prefix != "" {
				field := strings.TrimSuffix(prefix, ".")
				return invalidRequest(field, field+" must be a JSON object")
			}
			return invalidRequest("body", "the body must be a JSON object")
		}
		field := prefix + typ.Field
		return invalidRequest(field, fmt.Sprintf("%s must be a JSON %s, not %s", field, jsonKind(typ.Type.Kind().String()), typ.Value))
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return invalidRequest("body", "the JSON body ends too early")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := prefix + strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return invalidRequest(field, fmt.Sprintf("unknown field %q", field))
	}
	return invalidRequest("body", "malformed JSON: "+err.Error())
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "slice", "array":
		return "array"
	case "struct", "map":
		return "object"
	}
	return "number"
}

func invalidRequest(field, reason string) error {
	return &ledger.InvalidError{Code: ledger.CodeInvalidRequest, Field: field, Reason: reason}
}

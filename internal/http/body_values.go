package http

// The JSON values of request bodies kept as sent and checked when read, so
// that every error names its field: texts, amounts, durations and meta.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// jsonText is a JSON string kept exactly as sent. encoding/json would turn
// invalid UTF-8 and lone surrogate escapes (\ud800) into U+FFFD, silently
// naming another key than the client's; jsonText marks them instead.
type jsonText struct {
	text    string
	notText bool // present but not a string
	badUTF8 bool // a string that is not valid UTF-8
}

func (t *jsonText) UnmarshalJSON(b []byte) error {
	*t = jsonText{}
	switch {
	case string(b) == "null":
	case b[0] != '"':
		t.notText = true
	case !utf8.Valid(b) || loneSurrogate(b):
		t.badUTF8 = true
	default:
		return json.Unmarshal(b, &t.text)
	}
	return nil
}

// loneSurrogate reports whether the JSON string literal b has a \u escape of
// a UTF-16 surrogate that is not part of a valid pair. b is well-formed JSON.
func loneSurrogate(b []byte) bool {
	hex4 := func(i int) (uint64, bool) {
		if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 32)
		return v, err == nil
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		v, ok := hex4(i)
		switch {
		case !ok:
			i++ // a two-character escape such as \\ or \"
		case v >= 0xd800 && v < 0xdc00:
			lo, ok := hex4(i + 6)
			if !ok || lo < 0xdc00 || lo >= 0xe000 {
				return true
			}
			i += 11
		case v >= 0xdc00 && v < 0xe000:
			return true
		default:
			i += 5
		}
	}
	return false
}

// string returns the text, or an error naming field when it was not a
// string or not valid UTF-8; code is the error code for the latter.
func (t jsonText) string(field string, code ledger.Code) (string, error) {
	switch {
	case t.notText:
		return "", invalidRequest(field, field+" must be a JSON string")
	case t.badUTF8:
		return "", &ledger.InvalidError{Code: code, Field: field, Reason: field + " is not valid UTF-8"}
	}
	return t.text, nil
}

// jsonAmount is an amount as it arrives in JSON: a string, or a number whose
// text is kept as written so it is never parsed through float64.
type jsonAmount struct {
	text string
	set  bool // present and not null
	bad  bool // neither a string nor a number
}

func (a *jsonAmount) UnmarshalJSON(b []byte) error {
	switch {
	case string(b) == "null":
		*a = jsonAmount{}
	case b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*a = jsonAmount{text: s, set: true}
	case b[0] == '-' || (b[0] >= '0' && b[0] <= '9'):
		*a = jsonAmount{text: string(b), set: true}
	default:
		*a = jsonAmount{set: true, bad: true}
	}
	return nil
}

// parse returns the amount, or an error naming field. A missing amount is
// an error when required, and reported as not valid otherwise.
func (a jsonAmount) parse(field string, required bool) (decimal.NullDecimal, error) {
	switch {
	case a.bad: // a wrong JSON type: SPEC's invalid_request
		return decimal.NullDecimal{}, invalidRequest(field, field+" must be a decimal string like \"12.37\" (or a JSON number)")
	case !a.set && required:
		return decimal.NullDecimal{}, &ledger.InvalidError{Code: ledger.CodeInvalidAmount, Field: field, Reason: "is required"}
	case !a.set:
		return decimal.NullDecimal{}, nil
	}
	d, err := ledger.ParseAmount(field, a.text)
	if err != nil {
		return decimal.NullDecimal{}, err
	}
	return decimal.NullDecimal{Decimal: d, Valid: true}, nil
}

// required parses an amount that must be present.
func (a jsonAmount) required(field string) (decimal.Decimal, error) {
	d, err := a.parse(field, true)
	return d.Decimal, err
}

// jsonDuration is a Go duration string such as "10m" or "720h".
type jsonDuration struct {
	text string
	set  bool
	bad  bool
}

func (d *jsonDuration) UnmarshalJSON(b []byte) error {
	switch {
	case string(b) == "null":
		*d = jsonDuration{}
	case b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*d = jsonDuration{text: s, set: true}
	default:
		*d = jsonDuration{set: true, bad: true}
	}
	return nil
}

// parse returns the duration within [min, max], 0 when absent and not
// required.
func (d jsonDuration) parse(field string, required bool, min, max time.Duration) (time.Duration, error) {
	switch {
	case d.bad: // a wrong JSON type: SPEC's invalid_request
		return 0, invalidRequest(field, field+" must be a Go duration string like \"10m\" or \"720h\"")
	case !d.set && required:
		return 0, &ledger.InvalidError{Code: ledger.CodeInvalidDuration, Field: field, Reason: "is required"}
	case !d.set:
		return 0, nil
	}
	return ledger.ParseDuration(field, d.text, min, max)
}

// jsonMeta is a meta object as it arrives. It is kept raw and checked when
// read (parse), so that every error names its field: meta, meta.<key>, or
// items[2].meta.
type jsonMeta struct{ raw []byte }

func (m *jsonMeta) UnmarshalJSON(b []byte) error {
	m.raw = append(m.raw[:0], b...)
	return nil
}

// parse returns the meta (nil when absent, null or {}), or an
// invalid_request error naming field or the entry at fault: not an object,
// a value that is not a string (numbers, null, objects), a value that is not
// valid UTF-8, or any bound of ledger.ValidateMeta.
func (m jsonMeta) parse(field string) (ledger.Meta, error) {
	if len(m.raw) == 0 || string(m.raw) == "null" {
		return nil, nil
	}
	if m.raw[0] != '{' {
		return nil, invalidRequest(field, field+" must be a JSON object of string values")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(m.raw, &raw); err != nil {
		return nil, invalidRequest(field, field+" must be a JSON object of string values")
	}
	if len(raw) > ledger.MaxMetaEntries {
		return nil, invalidRequest(field, fmt.Sprintf("%s has %d entries; at most %d are allowed", field, len(raw), ledger.MaxMetaEntries))
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the first bad entry by key, whatever the map's order
	out := make(ledger.Meta, len(raw))
	for _, k := range keys {
		v := raw[k]
		at := field + "." + k
		if string(v) == "null" {
			return nil, invalidRequest(at, at+" must be a JSON string, not null")
		}
		var t jsonText
		if err := t.UnmarshalJSON(v); err != nil {
			return nil, err
		}
		s, err := t.string(at, ledger.CodeInvalidRequest)
		if err != nil {
			return nil, err
		}
		out[k] = s
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, ledger.ValidateMeta(field, out)
}

// metaCanon is what meta adds to a body's canonical form for its
// Idempotency-Key: nothing without meta (so the hashes of calls without meta
// are what they always were), else ";meta=" and the meta as JSON with its
// keys in byte order, so that key order does not matter.
func metaCanon(m ledger.Meta) string {
	if len(m) == 0 {
		return ""
	}
	return ";meta=" + m.JSON()
}

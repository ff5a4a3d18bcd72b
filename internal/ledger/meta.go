package ledger

import (
	"encoding/json"
	"unicode/utf8"
)

// Bounds on meta, the caller's notes on a charge (SPEC "Seeing the spend").
const (
	// MaxMetaEntries is the most entries one meta object may have.
	MaxMetaEntries = 16
	// MaxMetaValueBytes is the longest meta value, in bytes of UTF-8.
	MaxMetaValueBytes = 256
	// MaxMetaBytes bounds a whole meta object: the sum of its keys' and
	// values' lengths in bytes.
	MaxMetaBytes = 2048
)

// validMetaKey reports whether k matches [a-z0-9_.-]{1,64}.
func validMetaKey(k string) bool {
	if len(k) == 0 || len(k) > 64 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !isNameByte(k[i]) {
			return false
		}
	}
	return true
}

// metaControl returns the first control character of v that meta refuses:
// every C0 character (U+0000–U+001F) but tab, line feed and carriage
// return, and DEL. NUL above all: PostgreSQL's jsonb cannot hold it, and
// meta must be stored the same on every store; the others have no place in
// a note and would reach logs and the dashboard as they are. Text a caller
// writes (multi-line notes included) keeps its tabs and line breaks.
func metaControl(v string) (rune, bool) {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f {
			return rune(c), true
		}
	}
	return 0, false
}

// Meta is what a caller says of a charge (an order id, a user, a job): up to
// MaxMetaEntries string values under keys of [a-z0-9_.-]{1,64}. It is stored
// on the history entry of the event and returned in history. A nil or empty
// Meta is no meta.
type Meta map[string]string

// ValidateMeta checks m against the bounds, naming field ("meta",
// "items[2].meta") and the offending key in the error.
func ValidateMeta(field string, m Meta) error {
	if len(m) > MaxMetaEntries {
		return invalid(CodeInvalidRequest, field, "has %d entries; at most %d are allowed", len(m), MaxMetaEntries)
	}
	total := 0
	for k, v := range m {
		if !validMetaKey(k) {
			return invalid(CodeInvalidRequest, field, "key %q is not 1-64 characters of [a-z0-9_.-]", clip(k))
		}
		switch {
		case len(v) > MaxMetaValueBytes:
			return invalid(CodeInvalidRequest, field+"."+k, "is %d bytes; at most %d are allowed", len(v), MaxMetaValueBytes)
		case !utf8.ValidString(v):
			return invalid(CodeInvalidRequest, field+"."+k, "is not valid UTF-8")
		}
		if r, bad := metaControl(v); bad {
			return invalid(CodeInvalidRequest, field+"."+k, "contains the control character U+%04X; only tab, line feed and carriage return are allowed", r)
		}
		total += len(k) + len(v)
	}
	if total > MaxMetaBytes {
		return invalid(CodeInvalidRequest, field, "keys and values come to %d bytes; at most %d are allowed", total, MaxMetaBytes)
	}
	return nil
}

// JSON returns m as a JSON object with its keys in byte order (the form every
// store keeps), or "" for no meta.
func (m Meta) JSON() string {
	if len(m) == 0 {
		return ""
	}
	b, err := json.Marshal(map[string]string(m)) // encoding/json sorts map keys
	if err != nil {
		panic(err) // a map of strings always encodes
	}
	return string(b)
}

// ParseMeta reads what Meta.JSON wrote; "" is no meta.
func ParseMeta(s string) (Meta, error) {
	if s == "" {
		return nil, nil
	}
	var m Meta
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, err
	}
	return m, nil
}

// sameMeta reports whether a and b hold the same entries.
func sameMeta(a, b Meta) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

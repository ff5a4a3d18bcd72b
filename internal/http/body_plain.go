package http

// The Fillup bodies' fast path: the common single- and multi-bucket bodies read
// without encoding/json, every other body left to the strict decoder (body.go).

import (
	"slices"
	"unicode/utf8"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/labstack/echo/v4"
)

// readFillupBody is readJSON for a single-bucket Fillup: the common body
// {"cost":"…"} is taken without encoding/json (plainCost), any other goes
// through the strict decoder.
func readFillupBody(c echo.Context, body *fillupBody) error {
	bp, err := readBody(c)
	if err != nil {
		return err
	}
	defer bufPool.Put(bp)
	if text, ok := plainCost(*bp); ok {
		body.Cost = jsonAmount{text: text, set: true}
		return nil
	}
	return decodeBody(*bp, body)
}

// plainCost reads the common Fillup body {"cost":"12.37"} exactly so written
// (no space, no escape, no other member) and returns the cost's text; ok is
// false for every other body, which goes through encoding/json. Both read
// such a body alike: it has one member, a string without escapes.
func plainCost(body []byte) (string, bool) {
	const head, tail = `{"cost":"`, `"}`
	n := len(body) - len(head) - len(tail)
	if n < 1 || n > 32 || string(body[:len(head)]) != head || string(body[len(body)-len(tail):]) != tail {
		return "", false
	}
	text := body[len(head) : len(head)+n]
	for _, c := range text {
		if c < '.' || c > '9' || c == '/' {
			return "", false
		}
	}
	return string(text), true
}

// plainItems reads the common multi-bucket body, as package api's client
// writes it: {"items":[{"limit":"…","key":"…","cost":"…"},…]} with 1 to
// ledger.MaxItems items, each with those three members once in any order,
// every string valid UTF-8 without escapes, and JSON whitespace allowed
// between tokens. It appends the items to dst, their texts substrings of
// body; ok is false for every other body (meta, a number, an escape, another
// or a repeated member, a name in other case), which goes through
// encoding/json. Both read such a body alike (TestPlainItems).
func plainItems(body string, dst []multiItem) ([]multiItem, bool) {
	sc := plainScanner{s: body}
	if !sc.token('{') || !sc.name("items") || !sc.token('[') {
		return dst, false
	}
	for n := 0; ; n++ {
		if n == ledger.MaxItems || !sc.token('{') {
			return dst, false
		}
		var it multiItem
		var seen [3]bool
		for m := 0; m < len(seen); m++ {
			if m > 0 && !sc.token(',') {
				return dst, false
			}
			name, ok := sc.text()
			if !ok || !sc.token(':') {
				return dst, false
			}
			value, ok := sc.text()
			f := slices.Index([]string{"limit", "key", "cost"}, name)
			if !ok || f < 0 || seen[f] {
				return dst, false
			}
			seen[f] = true
			switch f {
			case 0:
				it.Limit.text = value
			case 1:
				it.Key.text = value
			default:
				it.Cost = jsonAmount{text: value, set: true}
			}
		}
		if !sc.token('}') {
			return dst, false
		}
		dst = append(dst, it)
		if !sc.token(',') {
			break
		}
	}
	if !sc.token(']') || !sc.token('}') {
		return dst, false
	}
	sc.space()
	return dst, sc.p == len(sc.s)
}

// plainScanner reads the tokens of the JSON text s from offset p on.
type plainScanner struct {
	s string
	p int
}

// space skips JSON whitespace.
func (sc *plainScanner) space() {
	for sc.p < len(sc.s) && (sc.s[sc.p] == ' ' || sc.s[sc.p] == '\t' || sc.s[sc.p] == '\n' || sc.s[sc.p] == '\r') {
		sc.p++
	}
}

// token reads the punctuation c after any whitespace.
func (sc *plainScanner) token(c byte) bool {
	sc.space()
	if sc.p < len(sc.s) && sc.s[sc.p] == c {
		sc.p++
		return true
	}
	return false
}

// text reads a string after any whitespace and returns its content; ok is
// false unless it is a string without escapes whose content is valid UTF-8
// (which encoding/json reads unchanged).
func (sc *plainScanner) text() (string, bool) {
	sc.space()
	if sc.p == len(sc.s) || sc.s[sc.p] != '"' {
		return "", false
	}
	start := sc.p + 1
	for i := start; i < len(sc.s); i++ {
		switch c := sc.s[i]; {
		case c == '"':
			sc.p = i + 1
			return sc.s[start:i], utf8.ValidString(sc.s[start:i])
		case c == '\\' || c < 0x20:
			return "", false
		}
	}
	return "", false
}

// name reads the member name want and its colon.
func (sc *plainScanner) name(want string) bool {
	got, ok := sc.text()
	return ok && got == want && sc.token(':')
}

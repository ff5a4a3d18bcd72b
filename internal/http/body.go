package http

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/labstack/echo/v4"
	"github.com/shopspring/decimal"
)

// maxBody is the largest request body read; a larger one answers 413.
const maxBody = 64 << 10

// maxIdempotencyKey is the longest Idempotency-Key accepted.
const maxIdempotencyKey = 255

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
func (t jsonText) string(field, code string) (string, error) {
	switch {
	case t.notText:
		return "", invalidRequest(field, field+" must be a JSON string")
	case t.badUTF8:
		return "", &ledger.InvalidError{Code: code, Field: field, Reason: field + " is not valid UTF-8"}
	}
	return t.text, nil
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
	return &ledger.InvalidError{Code: "invalid_request", Field: field, Reason: reason}
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
		return decimal.NullDecimal{}, &ledger.InvalidError{Code: "invalid_amount", Field: field, Reason: "is required"}
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
		return 0, &ledger.InvalidError{Code: "invalid_duration", Field: field, Reason: "is required"}
	case !d.set:
		return 0, nil
	}
	return ledger.ParseDuration(field, d.text, min, max)
}

// idempotency reads the Idempotency-Key header for a request whose route and
// target are scope and whose canonical body is canon.
func idempotency(c echo.Context, scope, canon string) (ledger.Idempotency, error) {
	key := c.Request().Header.Get("Idempotency-Key")
	if key == "" {
		return ledger.Idempotency{}, nil
	}
	if len(key) > maxIdempotencyKey {
		return ledger.Idempotency{}, invalidRequest("Idempotency-Key", fmt.Sprintf("the Idempotency-Key header is %d bytes; at most %d are allowed", len(key), maxIdempotencyKey))
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return ledger.Idempotency{}, invalidRequest("Idempotency-Key", "the Idempotency-Key header must be printable ASCII")
		}
	}
	sum := sha256.Sum256([]byte(canon))
	return ledger.Idempotency{Scope: scope, Key: key, Hash: hex.EncodeToString(sum[:]), Caller: caller(c)}, nil
}

// caller names who sent a request, for the stores' per-caller bound on
// idempotency records: the API key with authentication on, else the TCP
// peer's address (never a forwarded header, which the caller writes).
func caller(c echo.Context) string {
	if k := requestKey(c); k != nil {
		return "key:" + k.Name
	}
	addr := c.Request().RemoteAddr
	if host, _, err := net.SplitHostPort(addr); err == nil {
		addr = host
	}
	return "addr:" + addr
}

// query parses the query string strictly: Go's URL.Query drops a malformed
// pair (?cost=%zz, ?cost=1;2) silently, which would turn a CanAccept into a
// state read. A malformed pair is a 400 naming its parameter.
func query(c echo.Context) (url.Values, error) {
	raw := c.Request().URL.RawQuery
	q, err := url.ParseQuery(raw)
	if err == nil {
		return q, nil
	}
	for _, pair := range strings.Split(raw, "&") {
		if _, err := url.ParseQuery(pair); err == nil {
			continue
		}
		name, _, _ := strings.Cut(pair, "=")
		name, _, _ = strings.Cut(name, ";")
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
		if name == "cost" {
			return nil, &ledger.InvalidError{Code: "invalid_amount", Field: "cost", Reason: "cost is not a valid query-string value"}
		}
		return nil, invalidRequest(name, fmt.Sprintf("the query parameter %q is malformed", clipText(name)))
	}
	return nil, invalidRequest("query", "the query string is malformed")
}

// clipText shortens s for an error message.
func clipText(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// parseExpiresAt reads an optional expires_at: an RFC 3339 time, or absent or
// null for none (set is false). An explicit time is a time like any other,
// even the zero one (0001-01-01T00:00:00Z): the ledger and the stores take
// a zero time.Time as "none", so an explicit zero instant, which is in the
// past on every clock, is refused here as any past expiry is refused there
// (issue 43).
func parseExpiresAt(raw json.RawMessage) (t time.Time, set bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return time.Time{}, false, nil
	}
	var text string
	err = json.Unmarshal(raw, &text)
	if err == nil {
		t, err = time.Parse(time.RFC3339Nano, text)
	}
	if err != nil {
		return time.Time{}, false, invalidRequest("expires_at", "expires_at must be an RFC 3339 time such as \"2026-12-04T00:00:00Z\"")
	}
	t = t.UTC()
	if t.IsZero() {
		return time.Time{}, false, invalidRequest("expires_at", t.Format(time.RFC3339Nano)+" is not in the future")
	}
	return t, true, nil
}

// bucketScope is the idempotency scope of a route on one bucket.
func bucketScope(route string, ref ledger.BucketRef) string {
	return route + "|" + ref.Limit + "|" + url.PathEscape(ref.Key)
}

// pathParam returns a path parameter, unescaped: keys are path-escaped by
// clients ("/" is %2F), and echo matches on the raw path when one is set.
func pathParam(c echo.Context, name string) (string, error) {
	v := c.Param(name)
	if c.Request().URL.RawPath == "" {
		return v, nil
	}
	u, err := url.PathUnescape(v)
	if err != nil {
		return "", &ledger.InvalidError{Code: "invalid_" + name, Field: name, Reason: "is not a valid path-escaped string"}
	}
	return u, nil
}

// bucketRef reads the limit name and key of a bucket route.
func bucketRef(c echo.Context) (ledger.BucketRef, error) {
	name, err := pathParam(c, "name")
	if err != nil {
		return ledger.BucketRef{}, err
	}
	key, err := pathParam(c, "key")
	if err != nil {
		return ledger.BucketRef{}, err
	}
	ref := ledger.BucketRef{Limit: name, Key: key}
	if err := ledger.ValidateName(name); err != nil {
		return ref, err
	}
	return ref, ledger.ValidateKey(key)
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
		s, err := t.string(at, "invalid_request")
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

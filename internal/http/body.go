package http

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

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
// hold.
func readJSON(c echo.Context, dst any) error {
	r := c.Request()
	if r.ContentLength > maxBody {
		return errTooLarge
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return invalidRequest("body", "could not read the request body")
	}
	if len(body) > maxBody {
		return errTooLarge
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalidRequest("body", "unexpected data after the JSON object")
	}
	return nil
}

// decodeError names what is wrong with a body encoding/json refused.
func decodeError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return invalidRequest("body", fmt.Sprintf("malformed JSON at byte %d: %v", syn.Offset, syn))
	case errors.As(err, &typ):
		if typ.Field == "" {
			return invalidRequest("body", "the body must be a JSON object")
		}
		return invalidRequest(typ.Field, fmt.Sprintf("%s must be a JSON %s, not %s", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value))
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return invalidRequest("body", "the JSON body ends too early")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
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
	case a.bad:
		return decimal.NullDecimal{}, &ledger.InvalidError{Code: "invalid_amount", Field: field, Reason: "must be a decimal string like \"12.37\""}
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
	case d.bad:
		return 0, &ledger.InvalidError{Code: "invalid_duration", Field: field, Reason: "must be a Go duration string like \"10m\" or \"720h\""}
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
	return ledger.Idempotency{Scope: scope, Key: key, Hash: hex.EncodeToString(sum[:])}, nil
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

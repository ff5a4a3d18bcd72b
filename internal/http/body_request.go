package http

// What a request carries besides its body: the Idempotency-Key header and
// its caller, the query string, path parameters and expires_at.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/labstack/echo/v4"
)

// maxIdempotencyKey is the longest Idempotency-Key accepted.
const maxIdempotencyKey = 255

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
			return nil, &ledger.InvalidError{Code: ledger.CodeInvalidAmount, Field: "cost", Reason: "cost is not a valid query-string value"}
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
		return "", &ledger.InvalidError{Code: pathParamCode(name), Field: name, Reason: "is not a valid path-escaped string"}
	}
	return u, nil
}

// pathParamCode is the problem code of a path parameter that does not
// unescape: a limit name's and a bucket key's own codes, invalid_request for
// the others (a hold's or a grant's id, an override's pattern).
func pathParamCode(name string) ledger.Code {
	switch name {
	case "name":
		return ledger.CodeInvalidName
	case "key":
		return ledger.CodeInvalidKey
	}
	return ledger.CodeInvalidRequest
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

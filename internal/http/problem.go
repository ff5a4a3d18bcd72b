package http

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/labstack/echo/v4"
)

// problemTypeBase prefixes every problem type; the codes are listed in
// docs/api.md.
const problemTypeBase = "urn:budgetd:problem:"

// sentinels maps the ledger's sentinel errors to a status and a code: the one
// table from which every error answer is made.
var sentinels = []struct {
	err    error
	status int
	code   api.Code
}{
	{ledger.ErrLimitNotFound, http.StatusNotFound, api.CodeLimitNotFound},
	{ledger.ErrReservationNotFound, http.StatusNotFound, api.CodeReservationNotFound},
	{ledger.ErrOverrideNotFound, http.StatusNotFound, api.CodeOverrideNotFound},
	{ledger.ErrGrantNotFound, http.StatusNotFound, api.CodeGrantNotFound},
	{ledger.ErrIdempotencyKeyReused, http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused},
	{ledger.ErrIdempotencyInFlight, http.StatusConflict, api.CodeIdempotencyInFlight},
	{ledger.ErrTooManyHolds, http.StatusConflict, api.CodeTooManyHolds},
	{ledger.ErrCrossSlot, http.StatusBadRequest, api.CodeCrossSlot},
	{ledger.ErrLevelOverflow, http.StatusUnprocessableEntity, api.CodeLevelOverflow},
	{ledger.ErrIdempotencyFull, http.StatusServiceUnavailable, api.CodeIdempotencyStoreFull},
	{ledger.ErrUnavailable, http.StatusServiceUnavailable, api.CodeStoreUnavailable},
	{ledger.ErrNotServed, http.StatusNotImplemented, api.CodeNotServed},
	{context.DeadlineExceeded, http.StatusServiceUnavailable, api.CodeStoreUnavailable},
	{context.Canceled, http.StatusServiceUnavailable, api.CodeStoreUnavailable},
}

// refusalStatus is the status of each hold refusal code.
var refusalStatus = map[string]int{
	ledger.RefusalExceedsHold: http.StatusUnprocessableEntity,
	ledger.RefusalExpired:     http.StatusGone,
	ledger.RefusalClosed:      http.StatusConflict,
}

// errTooLarge is a body over maxBody bytes.
var errTooLarge = &echo.HTTPError{Code: http.StatusRequestEntityTooLarge, Message: "the request body is larger than 64 KiB"}

// failureLog writes the log line of a store failure or an unexpected
// error.
type failureLog func(level slog.Level, msg string, err error)

// toProblem turns any error a handler returns into a problem document.
// Unknown errors become a generic 500; their detail goes to the log only.
func toProblem(err error, logFailure failureLog, r *http.Request) api.Problem {
	var inv *ledger.InvalidError
	if errors.As(err, &inv) {
		return newProblem(http.StatusBadRequest, api.Code(inv.Code), inv.Error(), inv.Field)
	}
	var ae *authError
	if errors.As(err, &ae) {
		code := api.CodeForbidden
		if ae.status == http.StatusUnauthorized {
			code = api.CodeUnauthorized
		}
		return newProblem(ae.status, code, ae.detail, ae.field)
	}
	var ref *ledger.Refusal
	if errors.As(err, &ref) {
		p := newProblem(refusalStatus[ref.Code], api.Code(ref.Code), ref.Error(), "")
		v := apiReservation(ref.Reservation)
		p.Reservation = &v
		return p
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			detail := err.Error()
			if s.status == http.StatusServiceUnavailable {
				// The cause may name hosts or SQL; keep it in the log.
				logFailure(slog.LevelWarn, "store unavailable", err)
				detail = "the store did not answer; the outcome of a write is unknown, retry with the same Idempotency-Key"
			}
			return newProblem(s.status, s.code, detail, "")
		}
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		switch he.Code {
		case http.StatusNotFound:
			return newProblem(he.Code, api.CodeNotFound, "no such path", "")
		case http.StatusMethodNotAllowed:
			return newProblem(he.Code, api.CodeMethodNotAllowed, "this path does not accept "+r.Method, "")
		case http.StatusServiceUnavailable:
			return newProblem(he.Code, api.CodeShuttingDown, "budgetd is shutting down", "")
		case http.StatusRequestEntityTooLarge:
			return newProblem(he.Code, api.CodePayloadTooLarge, "the request body is larger than 64 KiB", "")
		}
		if he.Code >= 400 && he.Code < 500 {
			return newProblem(he.Code, api.CodeInvalidRequest, http.StatusText(he.Code), "")
		}
	}
	logFailure(slog.LevelError, "request failed", err)
	return newProblem(http.StatusInternalServerError, api.CodeInternal, "internal error", "")
}

// newProblem is an RFC 9457 problem document (api.Problem) with budgetd's
// stable code and, for a 400, the offending field.
func newProblem(status int, code api.Code, detail, field string) api.Problem {
	return api.Problem{
		Type:   problemTypeBase + string(code),
		Title:  http.StatusText(status),
		Status: status,
		Detail: detail,
		Code:   code,
		Field:  field,
	}
}

// errorHandler is echo's HTTPErrorHandler: every error answer is problem+json.
func (s *server) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	p := toProblem(err, func(level slog.Level, msg string, err error) { s.logFailure(c, level, msg, err) }, c.Request())
	if p.Status == http.StatusUnauthorized {
		c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="budgetd"`)
	}
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(p.Status)
		return
	}
	writeJSON(c, p.Status, "application/problem+json", p)
}

// logFailure logs a failed request with its route template (never the
// path, whose bucket keys are often user ids or addresses) and request id.
// Unless the operator asked for keys in the logs (WithLogKeys), the
// request's bucket key is also cut out of the error's text, where a store
// may have quoted it; with WithLogKeys the line carries the path.
func (s *server) logFailure(c echo.Context, level slog.Level, msg string, err error) {
	r := c.Request()
	route := c.Path()
	if !s.routeSet[route] {
		route = "other"
	}
	attrs := []slog.Attr{slog.String("method", requestMethod(r)), slog.String("route", route), slog.Any("request_id", requestIDOf(c))}
	text := err.Error()
	if s.logKeys {
		attrs = append(attrs, slog.String("path", r.URL.Path))
	} else {
		text = redactKey(text, c)
	}
	attrs = append(attrs, slog.String("err", text))
	s.log.LogAttrs(r.Context(), level, msg, attrs...)
}

// minRedacted is the shortest bucket key cut out of an error's text:
// shorter ones would mangle the message and hardly identify anyone.
const minRedacted = 4

// redactKey replaces the request's bucket key (as sent and as decoded) in
// text with "<key>".
func redactKey(text string, c echo.Context) string {
	raw := c.Param("key")
	keys := []string{raw}
	if k, err := pathParam(c, "key"); err == nil && k != raw {
		keys = append(keys, k)
	}
	for _, k := range keys {
		if len(k) >= minRedacted {
			text = strings.ReplaceAll(text, k, "<key>")
		}
	}
	return text
}

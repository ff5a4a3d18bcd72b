package http

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/labstack/echo/v4"
)

// overrideBody is the body of PUT …/overrides/{pattern}. A client may send
// back a document it read: pattern (if present) must match the path, and
// the times are ignored.
type overrideBody struct {
	Pattern  *string    `json:"pattern"`
	Capacity jsonAmount `json:"capacity"`
	Leak     *struct {
		Amount jsonAmount   `json:"amount"`
		Per    jsonDuration `json:"per"`
	} `json:"leak"`
	Period    json.RawMessage `json:"period"`
	Window    json.RawMessage `json:"window"`
	ExpiresAt json.RawMessage `json:"expires_at"`
	CreatedAt json.RawMessage `json:"created_at"`
	UpdatedAt json.RawMessage `json:"updated_at"`
}

// parse reads the body into an override of pattern.
func (b *overrideBody) parse(pattern string) (ledger.Override, error) {
	o := ledger.Override{Pattern: pattern}
	if b.Pattern != nil && *b.Pattern != pattern {
		return o, invalidRequest("pattern", "the pattern in the body differs from the pattern in the path")
	}
	capacity, err := b.Capacity.parse("capacity", false)
	if err != nil {
		return o, err
	}
	o.Capacity = capacity
	if b.Leak != nil {
		amount, err := b.Leak.Amount.required("leak.amount")
		if err != nil {
			return o, err
		}
		per, err := b.Leak.Per.parse("leak.per", true, time.Microsecond, ledger.MaxPer)
		if err != nil {
			return o, err
		}
		if amount.Sign() <= 0 {
			return o, &ledger.InvalidError{Code: ledger.CodeInvalidAmount, Field: "leak.amount", Reason: "must be greater than 0"}
		}
		o.LeakAmount, o.LeakPer = amount, per
	}
	if len(b.Period) > 0 && string(b.Period) != "null" {
		var p struct {
			TZ       *jsonText `json:"tz"`
			StartDay *int      `json:"start_day"`
		}
		if err := decodeStrict(b.Period, &p, "period."); err != nil {
			return o, err
		}
		if p.TZ != nil {
			tz, err := p.TZ.string("period.tz", ledger.CodeInvalidRequest)
			if err != nil {
				return o, err
			}
			if tz == "" {
				return o, invalidRequest("period.tz", "the time zone is empty; omit tz to keep the limit's")
			}
			o.TZ = tz
		}
		if p.StartDay != nil {
			if *p.StartDay == 0 {
				return o, invalidRequest("period.start_day", "start_day 0 is not a day; omit it to keep the limit's")
			}
			o.StartDay = *p.StartDay
		}
		if o.TZ == "" && o.StartDay == 0 {
			return o, invalidRequest("period", "an override's period sets tz, start_day or both")
		}
	}
	if len(b.Window) > 0 && string(b.Window) != "null" {
		var w struct {
			Length jsonDuration `json:"length"`
		}
		if err := decodeStrict(b.Window, &w, "window."); err != nil {
			return o, err
		}
		length, err := w.Length.parse("window.length", true, ledger.MinWindow, ledger.MaxWindow)
		if err != nil {
			return o, asInvalidRequest(err)
		}
		o.WindowLength = length
	}
	// Absent or null is no expiry (zero for the ledger); an explicit time
	// is never zero (parseExpiresAt refuses the zero instant).
	t, _, err := parseExpiresAt(b.ExpiresAt)
	if err != nil {
		return o, err
	}
	o.ExpiresAt = t
	return o, nil
}

// overridePattern reads the limit name and the {pattern} path parameter.
func overridePattern(c echo.Context) (string, string, error) {
	name, err := validName(c)
	if err != nil {
		return "", "", err
	}
	pattern, err := pathParam(c, "pattern")
	if err != nil {
		return "", "", err
	}
	return name, pattern, ledger.ValidatePattern(pattern)
}

// putOverride is PUT /v1/limits/{name}/overrides/{pattern}.
func (s *server) putOverride(c echo.Context) error {
	name, pattern, err := overridePattern(c)
	if err != nil {
		return err
	}
	var body overrideBody
	if err := readJSON(c, &body); err != nil {
		return err
	}
	o, err := body.parse(pattern)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	before, err := s.svc.GetOverride(ctx, name, pattern)
	if err != nil && !isNotFound(err) {
		return err
	}
	o, err = s.svc.PutOverride(ctx, name, o)
	if err != nil {
		return err
	}
	var was any
	if before.Pattern != "" {
		was = apiOverride(before)
	}
	s.audit(c, "put_override", slog.String("limit", name), slog.String("pattern", pattern),
		slog.Any("before", jsonValue(was)), slog.Any("after", jsonValue(apiOverride(o))))
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, apiOverride(o))
	return nil
}

// isNotFound reports whether err says the override (or its limit) is not
// there.
func isNotFound(err error) bool {
	return errors.Is(err, ledger.ErrOverrideNotFound)
}

// getOverride is GET /v1/limits/{name}/overrides/{pattern}.
func (s *server) getOverride(c echo.Context) error {
	name, pattern, err := overridePattern(c)
	if err != nil {
		return err
	}
	o, err := s.svc.GetOverride(c.Request().Context(), name, pattern)
	if err != nil {
		return err
	}
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, apiOverride(o))
	return nil
}

// deleteOverride is DELETE /v1/limits/{name}/overrides/{pattern}.
func (s *server) deleteOverride(c echo.Context) error {
	name, pattern, err := overridePattern(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	before, err := s.svc.GetOverride(ctx, name, pattern)
	if err != nil {
		return err
	}
	if err := s.svc.DeleteOverride(ctx, name, pattern); err != nil {
		return err
	}
	s.audit(c, "delete_override", slog.String("limit", name), slog.String("pattern", pattern),
		slog.Any("before", jsonValue(apiOverride(before))), slog.Any("after", jsonValue(nil)))
	return c.NoContent(http.StatusNoContent)
}

// listOverrides is GET /v1/limits/{name}/overrides?limit=N&cursor=C: the
// limit's unexpired overrides in byte order of pattern, one page at a time
// (the cursor is the last pattern of a page, base64url, as for buckets).
func (s *server) listOverrides(c echo.Context) error {
	name, err := validName(c)
	if err != nil {
		return err
	}
	n, cursor, err := pageParams(c)
	if err != nil {
		return err
	}
	after := ""
	if cursor != "" {
		b, err := base64.RawURLEncoding.Strict().DecodeString(cursor)
		if err != nil || len(cursor) > 2*ledger.MaxPatternBytes || ledger.ValidatePattern(string(b)) != nil {
			return invalidRequest("cursor", "malformed cursor")
		}
		after = string(b)
	}
	items, err := s.svc.ListOverrides(c.Request().Context(), name, after, n+1)
	if err != nil {
		return err
	}
	next := ""
	if len(items) > n {
		items = items[:n]
		next = base64.RawURLEncoding.EncodeToString([]byte(items[n-1].Pattern))
	}
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, apiPage(items, next, apiOverride))
	return nil
}

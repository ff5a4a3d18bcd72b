package http

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/labstack/echo/v4"
)

// periodBody is the period of a limit body. A null tz or start_day takes
// the default; start_day must be a whole JSON number.
type periodBody struct {
	Every    jsonText  `json:"every"`
	TZ       *jsonText `json:"tz"`
	StartDay *int      `json:"start_day"`
}

// parse checks the period and fills in its defaults.
func (p *periodBody) parse() (ledger.Period, error) {
	every, err := p.Every.string("period.every", ledger.CodeInvalidRequest)
	if err != nil {
		return ledger.Period{}, err
	}
	if every == "" {
		return ledger.Period{}, invalidRequest("period.every", "period.every is required: day, week, month, quarter or year")
	}
	var tz *string
	if p.TZ != nil {
		t, err := p.TZ.string("period.tz", ledger.CodeInvalidRequest)
		if err != nil {
			return ledger.Period{}, err
		}
		tz = &t
	}
	return ledger.ValidatePeriod(every, tz, p.StartDay)
}

// windowBody is the window of a limit body; a null or absent precision
// takes the default.
type windowBody struct {
	Length    jsonDuration `json:"length"`
	Precision jsonDuration `json:"precision"`
}

// parse checks the window and fills in its default precision.
func (w *windowBody) parse() (ledger.Window, error) {
	if !w.Length.set && !w.Length.bad {
		return ledger.Window{}, invalidRequest("window.length", "window.length is required: a Go duration from 1s to 8760h")
	}
	length, err := w.Length.parse("window.length", true, ledger.MinWindow, ledger.MaxWindow)
	if err != nil {
		return ledger.Window{}, asInvalidRequest(err)
	}
	precision, err := w.Precision.parse("window.precision", false, time.Microsecond, ledger.MaxWindow)
	if err != nil {
		return ledger.Window{}, asInvalidRequest(err)
	}
	return ledger.ValidateWindow(length, precision)
}

// asInvalidRequest gives a window's duration errors SPEC's code for them,
// invalid_request, keeping the field and the reason.
func asInvalidRequest(err error) error {
	var ie *ledger.InvalidError
	if errors.As(err, &ie) {
		return &ledger.InvalidError{Code: ledger.CodeInvalidRequest, Field: ie.Field, Reason: ie.Reason}
	}
	return err
}

// limitBody is the body of PUT /v1/limits/{name}. A client may send back a
// limit document it read: name (if present) must match the path, and the
// times are ignored.
type limitBody struct {
	Name     *string    `json:"name"`
	Capacity jsonAmount `json:"capacity"`
	Leak     *struct {
		Amount jsonAmount   `json:"amount"`
		Per    jsonDuration `json:"per"`
	} `json:"leak"`
	Period  json.RawMessage `json:"period"`
	Window  json.RawMessage `json:"window"`
	History *bool           `json:"history"`
	// RecordDenials defaults to false.
	RecordDenials *bool `json:"record_denials"`
	// Mode defaults to enforce; Grace ("10%") is for soft mode only.
	Mode       *string   `json:"mode"`
	Grace      *string   `json:"grace"`
	Thresholds *[]string `json:"thresholds"`
	// Rollover ({"max":"1000"}, periodic limits only) is null for none.
	Rollover  json.RawMessage `json:"rollover"`
	CreatedAt json.RawMessage `json:"created_at"`
	UpdatedAt json.RawMessage `json:"updated_at"`
}

// spec checks the body of a PUT of the limit name, in the order of its
// members' errors (name, capacity, the kind, then the other settings).
func (b *limitBody) spec(name string) (ledger.LimitSpec, error) {
	if b.Name != nil && *b.Name != name {
		return ledger.LimitSpec{}, &ledger.InvalidError{Code: ledger.CodeInvalidName, Field: "name", Reason: "the name in the body differs from the name in the path"}
	}
	capacity, err := b.Capacity.required("capacity")
	if err != nil {
		return ledger.LimitSpec{}, err
	}
	spec := ledger.LimitSpec{Capacity: capacity, History: true}
	if err := b.kind(&spec); err != nil {
		return spec, err
	}
	if err := b.settings(&spec); err != nil {
		return spec, err
	}
	return spec, b.rollover(&spec)
}

// kind reads the one of leak, period and window the body sets into spec.
func (b *limitBody) kind(spec *ledger.LimitSpec) error {
	var period *periodBody
	if len(b.Period) > 0 && string(b.Period) != "null" {
		// Decoded on its own so that an unknown member is named period.x.
		period = &periodBody{}
		if err := decodeStrict(b.Period, period, "period."); err != nil {
			return err
		}
	}
	var window *windowBody
	if len(b.Window) > 0 && string(b.Window) != "null" {
		window = &windowBody{}
		if err := decodeStrict(b.Window, window, "window."); err != nil {
			return err
		}
	}
	switch {
	case window != nil && (b.Leak != nil || period != nil):
		return invalidRequest("window", "a limit has one of leak (a rate), period (a calendar budget) or window (a rolling window), not several")
	case b.Leak != nil && period != nil:
		return invalidRequest("leak", "a limit has one of leak (a rate), period (a calendar budget) or window (a rolling window), not several")
	case b.Leak == nil && period == nil && window == nil:
		return invalidRequest("leak", "a limit needs leak (a rate), period (a calendar budget) or window (a rolling window)")
	case window != nil:
		w, err := window.parse()
		if err != nil {
			return err
		}
		spec.Window = &w
	case period != nil:
		p, err := period.parse()
		if err != nil {
			return err
		}
		spec.Period = &p
	default:
		amount, err := b.Leak.Amount.required("leak.amount")
		if err != nil {
			return err
		}
		per, err := b.Leak.Per.parse("leak.per", true, time.Microsecond, ledger.MaxPer)
		if err != nil {
			return err
		}
		spec.LeakAmount, spec.LeakPer = amount, per
	}
	return nil
}

// settings reads history, record_denials, mode, grace and thresholds into
// spec.
func (b *limitBody) settings(spec *ledger.LimitSpec) error {
	if b.History != nil {
		spec.History = *b.History
	}
	if b.RecordDenials != nil {
		spec.RecordDenials = *b.RecordDenials
	}
	if b.Mode != nil {
		spec.Mode = *b.Mode
		if spec.Mode == "" {
			return invalidRequest("mode", `mode is one of "enforce", "shadow", "soft"`)
		}
	}
	if b.Grace != nil {
		if spec.Mode != ledger.ModeSoft {
			return invalidRequest("grace", "grace is only for a limit in soft mode")
		}
		g, err := api.ParsePercent("grace", *b.Grace)
		if err != nil {
			return invalidRequest("grace", err.(*api.Problem).Detail)
		}
		spec.Grace = g
	}
	if b.Thresholds != nil {
		for i, t := range *b.Thresholds {
			th, err := ledger.ParseThreshold("thresholds["+strconv.Itoa(i)+"]", t)
			if err != nil {
				return err
			}
			spec.Thresholds = append(spec.Thresholds, th)
		}
	}
	return nil
}

// rollover reads the rollover into spec.
func (b *limitBody) rollover(spec *ledger.LimitSpec) error {
	if len(b.Rollover) == 0 || string(b.Rollover) == "null" {
		return nil
	}
	// Decoded on its own so that an unknown member is named rollover.x.
	var r struct {
		Max jsonAmount `json:"max"`
	}
	if err := decodeStrict(b.Rollover, &r, "rollover."); err != nil {
		return err
	}
	m, err := r.Max.required("rollover.max")
	if err != nil {
		return err
	}
	spec.Rollover = &ledger.Rollover{Max: m}
	return nil
}

// putLimit is PUT /v1/limits/{name}: creates or replaces the limit.
func (s *server) putLimit(c echo.Context) error {
	name, err := pathParam(c, "name")
	if err != nil {
		return err
	}
	if err := ledger.ValidateName(name); err != nil {
		return err
	}
	var body limitBody
	if err := readJSON(c, &body); err != nil {
		return err
	}
	spec, err := body.spec(name)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	before, err := s.svc.GetLimit(ctx, name)
	if err != nil && !errors.Is(err, ledger.ErrLimitNotFound) {
		return err
	}
	l, err := s.svc.PutLimit(ctx, name, spec)
	if err != nil {
		return err
	}
	s.audit(c, "put_limit", slog.String("limit", name), slog.Any("before", jsonValue(optLimit(before))), slog.Any("after", jsonValue(apiLimit(l))))
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, apiLimit(l))
	return nil
}

func (s *server) getLimit(c echo.Context) error {
	name, err := validName(c)
	if err != nil {
		return err
	}
	l, err := s.svc.GetLimit(c.Request().Context(), name)
	if err != nil {
		return err
	}
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, apiLimit(l))
	return nil
}

func (s *server) deleteLimit(c echo.Context) error {
	name, err := validName(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	before, err := s.svc.GetLimit(ctx, name)
	if err != nil {
		return err
	}
	if err := s.svc.DeleteLimit(ctx, name); err != nil {
		return err
	}
	s.m.forget(name)
	s.audit(c, "delete_limit", slog.String("limit", name), slog.Any("before", jsonValue(apiLimit(before))), slog.Any("after", jsonValue(nil)))
	return c.NoContent(http.StatusNoContent)
}

func (s *server) listLimits(c echo.Context) error {
	n, cursor, err := pageParams(c)
	if err != nil {
		return err
	}
	if cursor != "" && ledger.ValidateName(cursor) != nil {
		return invalidRequest("cursor", "malformed cursor")
	}
	limits, err := s.listReadable(c, cursor, n+1)
	if err != nil {
		return err
	}
	next := ""
	if len(limits) > n {
		limits = limits[:n]
		next = limits[n-1].Name
	}
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, apiPage(limits, next, apiLimit))
	return nil
}

// listReadable lists up to n limits after cursor that the request's key may
// read: all of them without authentication or for an unrestricted key.
func (s *server) listReadable(c echo.Context, cursor string, n int) ([]ledger.Limit, error) {
	ctx := c.Request().Context()
	k := requestKey(c)
	if k == nil || k.AllLimits() {
		return s.svc.ListLimits(ctx, cursor, n)
	}
	var out []ledger.Limit
	for len(out) < n {
		page, err := s.svc.ListLimits(ctx, cursor, maxPage)
		if err != nil {
			return nil, err
		}
		for _, l := range page {
			if k.MayUse(l.Name) && len(out) < n {
				out = append(out, l)
			}
		}
		if len(page) < maxPage {
			break
		}
		cursor = page[len(page)-1].Name
	}
	return out, nil
}

// optLimit is a limit document, or null for a limit that did not exist.
func optLimit(l ledger.Limit) any {
	if l.Name == "" {
		return nil
	}
	return apiLimit(l)
}

// validName reads and checks the {name} path parameter.
func validName(c echo.Context) (string, error) {
	name, err := pathParam(c, "name")
	if err != nil {
		return "", err
	}
	return name, ledger.ValidateName(name)
}

// Page sizes of lists.
const (
	defaultPage = 100
	maxPage     = 1000
)

// pageParams reads ?limit=N&cursor=C.
func pageParams(c echo.Context) (int, string, error) {
	q, err := query(c)
	if err != nil {
		return 0, "", err
	}
	n, err := limitParam(q, defaultPage, maxPage)
	return n, q.Get("cursor"), err
}

// limitParam reads ?limit, a whole number from 1 to most written in plain
// digits (def when absent).
func limitParam(q url.Values, def, most int) (int, error) {
	vs, ok := q["limit"]
	if !ok {
		return def, nil
	}
	v, err := strconv.Atoi(vs[0])
	if err != nil || v < 1 || v > most || len(vs[0]) > len(strconv.Itoa(most)) || vs[0][0] < '0' || vs[0][0] > '9' {
		return 0, invalidRequest("limit", "limit must be a whole number from 1 to "+strconv.Itoa(most))
	}
	return v, nil
}

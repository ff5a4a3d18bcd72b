package middleware_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/budgetd/budgetd/client"
	"github.com/budgetd/budgetd/client/middleware"
	"github.com/budgetd/budgetd/client/middleware/echomw"
	"github.com/labstack/echo/v4"
	"github.com/shopspring/decimal"
)

// perTenant is the README's ItemsFunc: a request without X-Tenant is the
// caller's mistake.
func perTenant(r *http.Request) ([]client.Item, error) {
	tenant := r.Header.Get("X-Tenant")
	if tenant == "" {
		return nil, middleware.BadRequest(errors.New("no X-Tenant header"))
	}
	return []client.Item{
		{Limit: "user", Key: tenant, Cost: decimal.NewFromInt(1)},
		{Limit: "global", Key: "all", Cost: decimal.NewFromInt(1)},
	}, nil
}

// A request the ItemsFunc calls a bad request answers 400 and counts as
// BadRequest, in every variant; it is never a failure to decide (503,
// FailedClosed), and FailOpen does not let it through.
func TestBadRequestIsTheCallersMistake(t *testing.T) {
	c := budgetd(t)
	for _, failOpen := range []bool{false, true} {
		opts := []middleware.Option{}
		if failOpen {
			opts = append(opts, middleware.FailOpen())
		}
		var errs []error
		opts = append(opts, middleware.OnError(func(_ *http.Request, err error) { errs = append(errs, err) }))
		l := middleware.New(c, perTenant, opts...)
		e := echo.New()
		e.GET("/x/e", func(c echo.Context) error { return c.String(200, "done") }, echomw.Charge(l))
		e.GET("/x/re", func(c echo.Context) error { return c.String(200, "done") }, echomw.Reserve(l))
		for name, h := range map[string]http.Handler{"Handler": l.Handler(ok), "ReserveHandler": l.ReserveHandler(ok), "Echo": e, "ReserveEcho": e} {
			path := map[string]string{"Echo": "/e", "ReserveEcho": "/re"}[name]
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/x"+path, nil))
			if w.Code != 400 || w.Body.String() == "done" {
				t.Errorf("%s (fail open %v) without X-Tenant: %d %s", name, failOpen, w.Code, w.Body)
			}
		}
		if got := l.Counts(); got != (middleware.Counts{BadRequest: 4}) || len(errs) != 4 || !middleware.IsBadRequest(errs[0]) {
			t.Errorf("fail open %v: counts %+v, errors %v", failOpen, got, errs)
		}
		req := httptest.NewRequest("GET", "/x", nil)
		req.Header.Set("X-Tenant", "t1")
		w := httptest.NewRecorder()
		l.Handler(ok).ServeHTTP(w, req)
		if w.Code != 200 {
			t.Errorf("with X-Tenant: %d", w.Code)
		}
	}
}

// Any other error of the ItemsFunc means the costs could not be worked out:
// the fail mode applies (503 and FailedClosed, or FailOpen lets it pass).
func TestItemsFuncFailureIsTheFailMode(t *testing.T) {
	c := budgetd(t)
	lookup := errors.New("tenant directory unavailable")
	broken := func(*http.Request) ([]client.Item, error) { return nil, lookup }
	var got []error
	closed := middleware.New(c, broken, middleware.OnError(func(_ *http.Request, err error) { got = append(got, err) }))
	for _, h := range []http.Handler{closed.Handler(ok), closed.ReserveHandler(ok)} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/x", nil))
		if w.Code != 503 {
			t.Errorf("fail closed: %d", w.Code)
		}
	}
	if c := closed.Counts(); c != (middleware.Counts{FailedClosed: 2}) || len(got) != 2 || !errors.Is(got[0], lookup) {
		t.Errorf("fail closed: %+v %v", c, got)
	}
	open := middleware.New(c, broken, middleware.FailOpen())
	w := httptest.NewRecorder()
	open.Handler(ok).ServeHTTP(w, httptest.NewRequest("GET", "/x", nil))
	if w.Code != 200 || open.Counts() != (middleware.Counts{FailedOpen: 1}) {
		t.Errorf("fail open: %d %+v", w.Code, open.Counts())
	}
}

// Package echomw adapts a middleware.Limiter to echo, in a package of its
// own so that a program that imports client/middleware for net/http alone
// does not compile echo in.
package echomw

import (
	"net/http"

	"github.com/budgetd/budgetd/client/middleware"
	"github.com/labstack/echo/v4"
)

// Charge is middleware.Limiter.Handler for echo: the request's items are
// charged before the handler runs, and a denied request never reaches it.
func Charge(l *middleware.Limiter) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if !l.Admit(c.Response(), c.Request()) {
				return nil
			}
			return next(c)
		}
	}
}

// Reserve is middleware.Limiter.ReserveHandler for echo: a handler that
// returns an error, answers 5xx or panics has its holds released; otherwise
// the cost it reported with middleware.ReportCost (or the estimate) is
// committed.
func Reserve(l *middleware.Limiter) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) (err error) {
			r, done, ok := l.Hold(c.Response(), c.Request())
			if !ok {
				return nil
			}
			c.SetRequest(r)
			ran := false
			defer func() {
				done(ran && err == nil && c.Response().Status < http.StatusInternalServerError)
			}()
			err = next(c)
			ran = true
			return err
		}
	}
}

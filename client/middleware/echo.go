package middleware

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// Echo is the middleware for echo.
func (l *Limiter) Echo() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if l.charge(c.Response(), c.Request()) != pass {
				return nil
			}
			return next(c)
		}
	}
}

// ReserveEcho is the response-cost variant for echo (see ReserveHandler): a
// handler that returns an error, answers 5xx or panics has its holds
// released.
func (l *Limiter) ReserveEcho() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) (err error) {
			h, r, v := l.reserve(c.Response(), c.Request())
			if v != pass {
				return nil
			}
			c.SetRequest(r)
			ok := false
			defer func() {
				l.finish(r, h, ok && err == nil && c.Response().Status < http.StatusInternalServerError)
			}()
			err = next(c)
			ok = true
			return err
		}
	}
}

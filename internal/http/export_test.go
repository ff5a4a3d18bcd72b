package http

import (
	"log/slog"

	"github.com/labstack/echo/v4"
)

// Routes lists the API's routes, for the OpenAPI test.
func Routes() []*echo.Route {
	e := echo.New()
	(&server{log: slog.Default()}).routes(e)
	return e.Routes()
}

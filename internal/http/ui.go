package http

import (
	"embed"
	"io/fs"
	"net/http"

	"github.com/labstack/echo/v4"
)

// uiFiles is the dashboard: static HTML, CSS and JavaScript with no
// dependencies, served at /ui/ from the binary (docs/dashboard.md).
//
//go:embed ui
var uiFiles embed.FS

// uiPolicy keeps the dashboard to its own files: no inline script, no other
// origin, nothing framed. Values from the API reach the page as text only.
const uiPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'none'; frame-ancestors 'none'; base-uri 'none'"

// uiHandler serves the dashboard's files. It needs no token: the page asks
// for one and sends it with each API call.
func uiHandler() echo.HandlerFunc {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix("/ui/", http.FileServer(http.FS(sub)))
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("Content-Security-Policy", uiPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(c.Response(), c.Request())
		return nil
	}
}

// uiRedirect sends /ui to /ui/, where the page's relative links work.
func uiRedirect(c echo.Context) error { return c.Redirect(http.StatusMovedPermanently, "/ui/") }

// rootRedirect sends / to the dashboard (/ui/), with 302 Found rather than
// a permanent redirect, which browsers would keep: / is not promised to
// stay the dashboard. Like the dashboard's files it needs no token
// (publicRoute); the query, if any, is not carried over.
func rootRedirect(c echo.Context) error { return c.Redirect(http.StatusFound, "/ui/") }

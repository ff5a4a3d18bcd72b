package http

import (
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/budgetd/budgetd/api"
	"github.com/labstack/echo/v4"
)

// TestPathParamCodes: a path parameter that does not unescape is a 400
// whose code is one of api.Codes (the name's and the key's own codes,
// invalid_request for the others) and whose field and detail name the
// parameter; it was "invalid_id" and "invalid_pattern", codes no client
// knows.
func TestPathParamCodes(t *testing.T) {
	e := echo.New()
	for name, want := range map[string]api.Code{
		"name": api.CodeInvalidName, "key": api.CodeInvalidKey,
		"id": api.CodeInvalidRequest, "pattern": api.CodeInvalidRequest,
	} {
		req := httptest.NewRequest("GET", "/v1/x", nil)
		req.URL.RawPath = "/v1/%zz" // a raw path is set, and the parameter is not a path-escaped string
		c := e.NewContext(req, httptest.NewRecorder())
		c.SetParamNames(name)
		c.SetParamValues("%zz")
		_, err := pathParam(c, name)
		if err == nil {
			t.Fatalf("%s: %%zz unescaped", name)
		}
		p := toProblem(err, func(slog.Level, string, error) { t.Errorf("%s: logged as a failure", name) }, req)
		if p.Status != 400 || api.Code(p.Code) != want || !slices.Contains(api.Codes, api.Code(p.Code)) || p.Field != name || !strings.HasPrefix(p.Detail, name+":") {
			t.Errorf("%s: %+v, want 400 %s naming %s", name, p, want, name)
		}
	}
}

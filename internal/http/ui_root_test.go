package http_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/budgetd/budgetd/internal/auth"
	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
)

// TestRootRedirectsToUI: GET and HEAD / answer 302 Found to /ui/, with
// authentication off and on (no token needed, as for the dashboard's
// files), and a browser that follows it gets the dashboard. Nothing else
// changes: an unknown /v1 path or any other path is still the 404
// problem+json (401 without a token when authentication is on), another
// method on / is a 405, and a token in the query is refused on / as
// everywhere (issue 43).
func TestRootRedirectsToUI(t *testing.T) {
	const token = "bdg_root-admin"
	for _, authOn := range []bool{false, true} {
		name := "auth off"
		var opts []budgethttp.Option
		if authOn {
			name = "auth on"
			opts = append(opts, budgethttp.WithAuth(keysOf(t, auth.Line("ops", token, auth.Admin, nil))))
		}
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(budgethttp.New(ledger.NewService(memory.New()), opts...))
			t.Cleanup(srv.Close)
			noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			send := func(c *http.Client, method, path string, withToken bool) (*http.Response, string) {
				t.Helper()
				req, err := http.NewRequest(method, srv.URL+path, nil)
				if err != nil {
					t.Fatal(err)
				}
				if withToken && authOn {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				res, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer res.Body.Close()
				b, _ := io.ReadAll(res.Body)
				return res, string(b)
			}

			for _, method := range []string{http.MethodGet, http.MethodHead} {
				for _, path := range []string{"/", "/?from=bookmark"} {
					res, body := send(noFollow, method, path, false)
					if res.StatusCode != http.StatusFound || res.Header.Get("Location") != "/ui/" {
						t.Errorf("%s %s: %d Location %q, want 302 to /ui/: %s", method, path, res.StatusCode, res.Header.Get("Location"), body)
					}
				}
			}
			res, body := send(http.DefaultClient, http.MethodGet, "/", false)
			if res.StatusCode != http.StatusOK || res.Request.URL.Path != "/ui/" ||
				!strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") || !strings.Contains(body, "app.js") {
				t.Errorf("GET / followed: %d at %s (%s): %.200s", res.StatusCode, res.Request.URL.Path, res.Header.Get("Content-Type"), body)
			}

			problem := func(method, path string, withToken bool, status int, code string) {
				t.Helper()
				res, body := send(noFollow, method, path, withToken)
				if res.StatusCode != status || res.Header.Get("Content-Type") != "application/problem+json" ||
					!strings.Contains(body, `"code":"`+code+`"`) {
					t.Errorf("%s %s (token %v): %d %s %s, want %d problem+json %s", method, path, withToken,
						res.StatusCode, res.Header.Get("Content-Type"), body, status, code)
				}
			}
			for _, path := range []string{"/v1/nope", "/v1/", "/v1", "/nope", "/ui.html"} {
				problem(http.MethodGet, path, true, http.StatusNotFound, "not_found")
				if authOn {
					problem(http.MethodGet, path, false, http.StatusUnauthorized, "unauthorized")
				}
			}
			problem(http.MethodPost, "/", false, http.StatusMethodNotAllowed, "method_not_allowed")
			if authOn {
				problem(http.MethodGet, "/?token="+token, false, http.StatusUnauthorized, "unauthorized")
			}
		})
	}
}

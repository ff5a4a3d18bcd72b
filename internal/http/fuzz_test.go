package http_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
)

// FuzzRequests sends arbitrary bodies and query strings to every endpoint:
// no input may produce a 5xx, and every error is problem+json.
func FuzzRequests(f *testing.F) {
	for _, s := range []string{`{"cost":"1"}`, `{"cost":1e400}`, `{"amount":"80","ttl":"10m"}`, `{"items":[{"limit":"l","key":"k","cost":"1"}]}`,
		`{"capacity":"5","leak":{"amount":"1","per":"1s"}}`, `{"amount":null,"overrun":true}`, `{"cost":"99999999999999999999999999"}`, "\x00", `[`} {
		f.Add(uint8(0), "k", s)
	}
	f.Fuzz(func(t *testing.T, route uint8, key, body string) {
		h := budgethttp.New(ledger.NewService(memory.New()))
		setup := httptest.NewRequest("PUT", "/v1/limits/l", strings.NewReader(`{"capacity":"10","leak":{"amount":"1","per":"1s"}}`))
		h.ServeHTTP(httptest.NewRecorder(), setup)
		esc := escape(key)
		routes := []struct{ method, path string }{
			{"POST", "/v1/limits/l/buckets/" + esc + "/fillup"},
			{"POST", "/v1/limits/l/buckets/" + esc + "/drain"},
			{"POST", "/v1/limits/l/buckets/" + esc + "/reservations"},
			{"GET", "/v1/limits/l/buckets/" + esc + "?cost=" + escape(body)},
			{"GET", "/v1/limits/l/buckets/" + esc + "/history?limit=" + escape(body) + "&cursor=" + esc},
			{"POST", "/v1/fillup"},
			{"PUT", "/v1/limits/" + esc},
			{"POST", "/v1/reservations/" + esc + "/commit"},
			{"POST", "/v1/reservations/" + esc + "/release"},
			{"GET", "/v1/limits?cursor=" + esc},
		}
		r := routes[int(route)%len(routes)]
		req := httptest.NewRequest(r.method, "/", strings.NewReader(body))
		req.URL.RawPath, req.URL.Path, req.URL.RawQuery = "", "", ""
		u, err := req.URL.Parse(r.path)
		if err != nil {
			t.Skip()
		}
		req.URL = u
		req.Header.Set("Idempotency-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s %q: %d %s", r.method, r.path, body, rec.Code, rec.Body)
		}
		if rec.Code >= 400 && rec.Code != 429 && rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Fatalf("%s %s: %d with content type %q", r.method, r.path, rec.Code, rec.Header().Get("Content-Type"))
		}
	})
}

// escape path-escapes s byte by byte, as a client would.
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' {
			b.WriteByte(c)
		} else {
			b.WriteString("%" + strings.ToUpper(string("0123456789abcdef"[c>>4])+string("0123456789abcdef"[c&15])))
		}
	}
	return b.String()
}

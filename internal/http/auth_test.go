package http_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/budgetd/budgetd/internal/auth"
	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
)

// logBuffer collects log lines the server writes while the test reads.
// Its access log writes to it too; String waits for the lines queued.
type logBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	access *budgethttp.AccessLog
}

// accessLog is an access log in JSON to l, closed at the end of the test.
func (l *logBuffer) accessLog(t *testing.T) *budgethttp.AccessLog {
	l.access = budgethttp.NewAccessLog(l, budgethttp.AccessJSON)
	t.Cleanup(func() {
		if err := l.access.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return l.access
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	if l.access != nil {
		l.access.Flush()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Tokens of the keys every auth test uses.
const (
	adminToken  = "bdg_admin-secret"
	chargeToken = "bdg_team-secret"
	readToken   = "bdg_reader-secret"
)

// authAPI is an API with authentication on over store, with three keys: an
// admin, a charge key restricted to team-* limits and a read key. The
// returned api sends no token unless told.
func authAPI(t *testing.T, clock *ledgertest.Clock, store ledger.Store, opts ...budgethttp.Option) (*api, *logBuffer, http.Handler) {
	t.Helper()
	logs := &logBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	opts = append([]budgethttp.Option{
		budgethttp.WithLogger(log), budgethttp.WithAccessLog(logs.accessLog(t)),
		budgethttp.WithAuth(keysOf(t,
			auth.Line("ops", adminToken, auth.Admin, nil),
			auth.Line("team-svc", chargeToken, auth.Charge, []string{"team-*"}),
			auth.Line("dash", readToken, auth.Read, nil))),
	}, opts...)
	h := budgethttp.New(ledger.NewService(store), opts...)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &api{t: t, url: srv.URL, clock: clock, store: store}, logs, h
}

func bearer(token string) []string { return []string{"Authorization", "Bearer " + token} }

func with(headers []string, more ...string) []string {
	return append(append([]string{}, headers...), more...)
}

func TestAuthentication(t *testing.T) {
	eachStoreRaw(t, func(t *testing.T, clock *ledgertest.Clock, store ledger.Store) {
		a, logs, _ := authAPI(t, clock, store)
		admin, charge, read := bearer(adminToken), bearer(chargeToken), bearer(readToken)
		limitBody := `{"capacity":"10","leak":{"amount":"1","per":"1h"}}`

		// No token, a wrong one, a malformed header: 401 with the challenge,
		// before the body is read (a broken body is not a 400).
		for _, h := range [][]string{nil, bearer("nope"), bearer(adminToken + " x"), bearer(" " + adminToken),
			{"Authorization", "Basic " + adminToken}, {"Authorization", adminToken}, bearer(strings.ToUpper(adminToken))} {
			r := a.expect("PUT", "/v1/limits/team-a", `{"broken`, 401, h...)
			if r.str("code") != "unauthorized" || r.header.Get("WWW-Authenticate") != `Bearer realm="budgetd"` ||
				r.header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("%v: %s %v", h, r.raw, r.header)
			}
		}
		a.expect("GET", "/v1/limits/team-a", "", 404, admin...) // nothing was created

		// Probes and the API description need no token; /metrics needs read.
		for _, p := range []string{"/healthz", "/readyz", "/openapi.json"} {
			a.expect("GET", p, "", 200)
		}
		a.expect("GET", "/metrics", "", 401)
		a.expect("GET", "/metrics", "", 200, read...)
		a.expect("GET", "/no/such/path", "", 401)

		// Scopes.
		a.expect("PUT", "/v1/limits/team-a", limitBody, 200, admin...)
		a.expect("PUT", "/v1/limits/other", limitBody, 200, admin...)
		r := a.expect("PUT", "/v1/limits/team-b", limitBody, 403, charge...)
		if r.str("code") != "forbidden" || r.header.Get("WWW-Authenticate") != "" {
			t.Fatalf("charge key PUT: %s", r.raw)
		}
		a.expect("POST", "/v1/limits/team-a/buckets/k/fillup", `{"cost":"1"}`, 403, read...)
		a.expect("POST", "/v1/limits/team-a/buckets/k/fillup", `{"broken`, 403, read...)
		a.expect("POST", "/v1/limits/team-a/buckets/k/drain", `{"amount":"1"}`, 403, charge...)
		a.expect("DELETE", "/v1/limits/team-a", "", 403, charge...)
		a.expect("GET", "/v1/limits/team-a/buckets/k", "", 200, read...)
		a.expect("POST", "/v1/limits/team-a/buckets/k/fillup", `{"cost":"1"}`, 200, charge...)

		// Limit patterns: on the path, in multi-bucket items (nothing
		// charged), on holds, and in the list.
		a.expect("POST", "/v1/limits/other/buckets/k/fillup", `{"cost":"1"}`, 403, charge...)
		a.expect("GET", "/v1/limits/other/buckets/k", "", 403, charge...)
		r = a.expect("POST", "/v1/fillup", `{"items":[{"limit":"team-a","key":"k","cost":"2"},{"limit":"other","key":"k","cost":"1"}]}`, 403, charge...)
		if r.str("field") != "items[1].limit" {
			t.Fatalf("multi-bucket 403 names %q: %s", r.str("field"), r.raw)
		}
		decEq(t, "team-a level after a refused multi-bucket call", a.expect("GET", "/v1/limits/team-a/buckets/k", "", 200, admin...).str("level"), "1")
		decEq(t, "other level", a.expect("GET", "/v1/limits/other/buckets/k", "", 200, admin...).str("level"), "0")

		hold := a.expect("POST", "/v1/limits/other/buckets/h/reservations", `{"amount":"1"}`, 201, admin...).str("id")
		a.expect("GET", "/v1/reservations/"+hold, "", 403, charge...)
		a.expect("POST", "/v1/reservations/"+hold+"/commit", `{}`, 403, charge...)
		a.expect("POST", "/v1/reservations/"+hold+"/release", `{}`, 403, charge...)
		if st := a.expect("GET", "/v1/reservations/"+hold, "", 200, read...).str("state"); st != "active" {
			t.Fatalf("hold after refused calls: %s", st)
		}
		own := a.expect("POST", "/v1/limits/team-a/buckets/h/reservations", `{"amount":"1"}`, 201, charge...).str("id")
		a.expect("POST", "/v1/reservations/"+own+"/commit", `{}`, 200, charge...)

		a.expect("PUT", "/v1/limits/team-c", limitBody, 200, admin...)
		if raw := a.expect("GET", "/v1/limits?limit=1", "", 200, charge...).raw; !strings.Contains(raw, `"team-a"`) || strings.Contains(raw, `"other"`) {
			t.Fatalf("charge key's first page: %s", raw)
		}
		page := a.expect("GET", "/v1/limits", "", 200, charge...).raw
		if !strings.Contains(page, `"team-a"`) || !strings.Contains(page, `"team-c"`) || strings.Contains(page, `"other"`) {
			t.Fatalf("charge key's list: %s", page)
		}

		// A refusal is never stored as the idempotent answer.
		a.expect("POST", "/v1/limits/team-a/buckets/i/fillup", `{"cost":"1"}`, 403, with(read, "Idempotency-Key", "k1")...)
		r = a.expect("POST", "/v1/limits/team-a/buckets/i/fillup", `{"cost":"1"}`, 200, with(charge, "Idempotency-Key", "k1")...)
		if r.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("a 403 was replayed: %v", r.header)
		}

		// A token in the query string is refused, even with a good header,
		// and no log line carries it.
		r = a.expect("GET", "/v1/limits/team-a?access_token="+readToken, "", 401, admin...)
		if r.str("code") != "unauthorized" {
			t.Fatalf("token in query: %s", r.raw)
		}
		a.expect("GET", "/v1/limits?token=x", "", 401, admin...)

		// Audit lines for PUT, Drain and DELETE, with who, before and after.
		a.expect("POST", "/v1/limits/team-a/buckets/k/drain", `{"amount":"5"}`, 200, admin...)
		a.expect("DELETE", "/v1/limits/team-c", "", 204, admin...)
		out := logs.String()
		for _, tok := range []string{adminToken, chargeToken, readToken} {
			if strings.Contains(out, tok) {
				t.Fatalf("a log line carries a token: %s", out)
			}
		}
		for _, want := range []string{
			`"msg":"audit","action":"put_limit","key":"ops"`,
			`"limit":"team-a","before":null,"after":{"name":"team-a","capacity":"10"`,
			`"action":"drain","key":"ops"`,
			`"limit":"team-a","bucket_key":"k","amount":"5","removed":"1","level_before":"1","level_after":"0"`,
			`"action":"delete_limit","key":"ops"`,
			`"limit":"team-c","before":{"name":"team-c"`,
			`"msg":"request","method":"POST","route":"/v1/limits/:name/buckets/:key/fillup","status":200`,
			`"key":"team-svc"`,
			`"status":401`,
		} {
			if !strings.Contains(out, want) {
				t.Errorf("no %s in the logs:\n%s", want, out)
			}
		}
		if !regexp.MustCompile(`"action":"put_limit","key":"ops","request_id":"[0-9a-f]{24}"`).MatchString(out) {
			t.Errorf("audit lines carry no request id:\n%s", out)
		}
	})
}

// TestWrongTokensAreCounted sends 10,000 wrong tokens: each is a 401,
// counted by reason, and a good token still works at once.
func TestWrongTokensAreCounted(t *testing.T) {
	clock := ledgertest.NewClock()
	_, _, h := authAPI(t, clock, memory.New(memory.WithClock(clock.Now)))
	for i := 0; i < 10000; i++ {
		req := httptest.NewRequest("GET", "/v1/limits", nil)
		req.Header.Set("Authorization", fmt.Sprintf("Bearer wrong-%d", i))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 401 {
			t.Fatalf("wrong token %d: %d", i, rec.Code)
		}
	}
	req := httptest.NewRequest("GET", "/v1/limits", nil)
	req.Header.Set("Authorization", "Bearer "+readToken)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("good token after the flood: %d %s", rec.Code, rec.Body)
	}
	// A token with anything around it is another token. (On the wire,
	// HTTP strips spaces around a field value and ends the field at a line
	// break, so these arrive only through a proxy that passes them.)
	for _, v := range []string{"Bearer " + readToken + " ", "Bearer " + readToken + "\n", "Bearer " + readToken + "\r\n", "Bearer  " + readToken, "Bearer\t" + readToken} {
		req := httptest.NewRequest("GET", "/v1/limits", nil)
		req.Header["Authorization"] = []string{v}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 401 {
			t.Errorf("Authorization %q: %d", v, rec.Code)
		}
	}
	m := scrape(t, h, readToken)
	for _, want := range []string{`budgetd_auth_failures_total{reason="unknown"} 10004`, `budgetd_auth_failures_total{reason="scope"} 0`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// scrape returns /metrics as text.
func scrape(t *testing.T, h http.Handler, token string) string {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("/metrics: %d", rec.Code)
	}
	return rec.Body.String()
}

package http_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/budgetd/budgetd/internal/auth"
	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
)

// Tokens of the further keys the hardening tests use.
const (
	teamReadToken = "bdg_team-reader-secret"
	starReadToken = "bdg_star-reader-secret"
)

// hardenedAPI is authAPI's keys plus a read key restricted to team-* and a
// read key restricted to "*" (which is every limit).
func hardenedAPI(t *testing.T, store ledger.Store) (*httptest.Server, http.Handler) {
	t.Helper()
	h := budgethttp.New(ledger.NewService(store),
		budgethttp.WithAuth(keysOf(t,
			auth.Line("ops", adminToken, auth.Admin, nil),
			auth.Line("team-svc", chargeToken, auth.Charge, []string{"team-*"}),
			auth.Line("dash", readToken, auth.Read, nil),
			auth.Line("team-dash", teamReadToken, auth.Read, []string{"team-*"}),
			auth.Line("star-dash", starReadToken, auth.Read, []string{"*"}))))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, h
}

// send makes one request over the wire; header holds every value of every
// header (a name may repeat).
func send(t *testing.T, method, url, body string, header http.Header) response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := response{status: res.StatusCode, header: res.Header, raw: string(raw)}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func auths(tokens ...string) http.Header {
	h := http.Header{}
	for _, tok := range tokens {
		h.Add("Authorization", "Bearer "+tok)
	}
	return h
}

// TestMetricsNeedEveryLimit: /metrics names every limit with its decisions
// and spend, so a key restricted to some limits is refused it (403), while
// a key allowed every limit reads the series of all of them.
func TestMetricsNeedEveryLimit(t *testing.T) {
	clock := ledgertest.NewClock()
	srv, _ := hardenedAPI(t, memory.New(memory.WithClock(clock.Now)))
	limit := `{"capacity":"10000","leak":{"amount":"1","per":"1h"}}`
	for _, name := range []string{"team-a", "other"} {
		if r := send(t, "PUT", srv.URL+"/v1/limits/"+name, limit, auths(adminToken)); r.status != 200 {
			t.Fatalf("PUT %s: %d %s", name, r.status, r.raw)
		}
	}
	if r := send(t, "POST", srv.URL+"/v1/limits/other/buckets/k/fillup", `{"cost":"1234.56"}`, auths(adminToken)); r.status != 200 {
		t.Fatalf("fillup: %d %s", r.status, r.raw)
	}
	for _, tok := range []string{teamReadToken, chargeToken} {
		r := send(t, "GET", srv.URL+"/metrics", "", auths(tok))
		if r.status != 403 || r.str("code") != "forbidden" || strings.Contains(r.raw, "other") || strings.Contains(r.raw, "1234") {
			t.Fatalf("/metrics with a key restricted to team-*: %d %s", r.status, r.raw)
		}
		// The key still reads its own limits.
		if r := send(t, "GET", srv.URL+"/v1/limits/team-a", "", auths(tok)); r.status != 200 {
			t.Fatalf("GET own limit: %d %s", r.status, r.raw)
		}
	}
	for _, tok := range []string{readToken, starReadToken, adminToken} {
		r := send(t, "GET", srv.URL+"/metrics", "", auths(tok))
		if r.status != 200 || !strings.Contains(r.raw, `budgetd_charged_total{limit="other"} 1234.56`) {
			t.Fatalf("/metrics with a key allowed every limit: %d %s", r.status, r.raw)
		}
	}
	// The refusal is counted like every other limit refusal.
	m := send(t, "GET", srv.URL+"/metrics", "", auths(readToken)).raw
	if !strings.Contains(m, `budgetd_auth_failures_total{reason="limit"} 2`) {
		t.Fatalf("refusals not counted:\n%s", m)
	}
}

// TestRepeatedAuthorization: with several Authorization headers a proxy
// that checks one sees another caller than budgetd would act as, so the
// request is refused with 400 before anything is done, whatever the order
// and whichever route.
func TestRepeatedAuthorization(t *testing.T) {
	eachStoreRaw(t, func(t *testing.T, clock *ledgertest.Clock, store ledger.Store) {
		srv, _ := hardenedAPI(t, store)
		limit := `{"capacity":"10","leak":{"amount":"1","per":"1h"}}`
		for _, h := range []http.Header{
			auths("bad", adminToken),
			auths(adminToken, "bad"),
			auths(adminToken, adminToken),
			auths(readToken, adminToken),
			auths(adminToken, readToken),
		} {
			r := send(t, "PUT", srv.URL+"/v1/limits/team-dup", limit, h)
			if r.status != 400 || r.str("code") != "invalid_request" || r.str("field") != "Authorization" ||
				r.header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("PUT with Authorization %q: %d %s", h.Values("Authorization"), r.status, r.raw)
			}
			if r := send(t, "GET", srv.URL+"/v1/limits", "", h); r.status != 400 {
				t.Fatalf("GET with Authorization %q: %d %s", h.Values("Authorization"), r.status, r.raw)
			}
		}
		// Nothing was created; one header still works.
		if r := send(t, "GET", srv.URL+"/v1/limits/team-dup", "", auths(adminToken)); r.status != 404 {
			t.Fatalf("after refused PUTs: %d %s", r.status, r.raw)
		}
		if r := send(t, "PUT", srv.URL+"/v1/limits/team-dup", limit, auths(adminToken)); r.status != 200 {
			t.Fatalf("PUT with one header: %d %s", r.status, r.raw)
		}
		if r := send(t, "POST", srv.URL+"/v1/limits/team-dup/buckets/k/fillup", `{"cost":"1"}`, auths("bad", chargeToken)); r.status != 400 {
			t.Fatalf("fillup with two headers: %d %s", r.status, r.raw)
		}
		r := send(t, "GET", srv.URL+"/v1/limits/team-dup/buckets/k", "", auths(adminToken))
		decEq(t, "level after a refused fillup", r.str("level"), "0")
	})
}

// TestTokenInQueryAnyCase: the names of token parameters are refused in
// every case, not just in lower case.
func TestTokenInQueryAnyCase(t *testing.T) {
	clock := ledgertest.NewClock()
	srv, _ := hardenedAPI(t, memory.New(memory.WithClock(clock.Now)))
	for _, q := range []string{"access_token", "Access_Token", "ACCESS_TOKEN", "Token", "TOKEN", "Api_Key", "APIKEY", "apiKey"} {
		r := send(t, "GET", srv.URL+"/v1/limits?"+q+"="+readToken, "", auths(adminToken))
		if r.status != 401 || r.str("code") != "unauthorized" {
			t.Errorf("?%s=: %d %s", q, r.status, r.raw)
		}
		r = send(t, "PUT", srv.URL+"/v1/limits/q?x=1&"+q+"=t", `{"capacity":"1","leak":{"amount":"1","per":"1h"}}`, auths(adminToken))
		if r.status != 401 {
			t.Errorf("PUT ?%s=: %d %s", q, r.status, r.raw)
		}
	}
	if r := send(t, "GET", srv.URL+"/v1/limits/q", "", auths(adminToken)); r.status != 404 {
		t.Fatalf("a refused PUT created the limit: %d %s", r.status, r.raw)
	}
	// Names that merely contain one are not token parameters.
	if r := send(t, "GET", srv.URL+"/v1/limits?tokens=1&my_token=2", "", auths(adminToken)); r.status != 200 {
		t.Fatalf("?tokens=: %d %s", r.status, r.raw)
	}
}

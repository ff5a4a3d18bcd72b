package http_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/budgetd/budgetd/client"
	"github.com/budgetd/budgetd/internal/auth"
	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/shopspring/decimal"
)

// contract is a transport that checks every request and answer against
// openapi.json with kin-openapi's validator, and records which operations
// and statuses it saw.
type contract struct {
	t      *testing.T
	router routers.Router
	mu     sync.Mutex
	seen   map[string]bool // "METHOD /path status"
}

func newContract(t *testing.T, serverURL string) *contract {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(budgethttp.OpenAPI)
	if err != nil {
		t.Fatalf("openapi.json does not load: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.json is not valid: %v", err)
	}
	doc.Servers = openapi3.Servers{{URL: serverURL}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &contract{t: t, router: router, seen: map[string]bool{}}
}

func (c *contract) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(got))

	check := req.Clone(context.Background())
	check.Body = io.NopCloser(bytes.NewReader(body))
	route, params, err := c.router.FindRoute(check)
	if err != nil {
		c.t.Errorf("%s %s: no operation in openapi.json: %v", req.Method, req.URL, err)
		return res, nil
	}
	in := &openapi3filter.RequestValidationInput{
		Request: check, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	}
	if res.StatusCode < 400 { // requests that budgetd refuses are meant to be off the contract
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			c.t.Errorf("%s %s %s: request off the contract: %v", req.Method, req.URL, body, err)
		}
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: res.StatusCode, Header: res.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	out.SetBodyBytes(got)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		c.t.Errorf("%s %s: %d answer off the contract: %v\n%s", req.Method, req.URL, res.StatusCode, err, got)
	}
	c.mu.Lock()
	c.seen[req.Method+" "+route.Path+" "+http.StatusText(res.StatusCode)] = true
	c.seen[req.Method+" "+route.Path] = true
	c.mu.Unlock()
	return res, nil
}

// TestContract drives every endpoint of a real budgetd, through the Go
// client and by hand for the error answers, and checks each request and
// answer against openapi.json.
func TestContract(t *testing.T) {
	clock := ledgertest.NewClock()
	const admin, reader = "bdg_contract-admin", "bdg_contract-reader"
	keys := budgethttp.WithAuth(keysOf(t, auth.Line("ops", admin, auth.Admin, nil), auth.Line("dash", reader, auth.Read, nil)))
	srv := httptest.NewServer(budgethttp.New(ledger.NewService(memory.New(memory.WithClock(clock.Now))), keys))
	defer srv.Close()
	ct := newContract(t, srv.URL)
	hc := &http.Client{Transport: ct}
	c, err := client.New(srv.URL, client.WithHTTPClient(hc), client.WithToken(admin))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d := decimal.RequireFromString
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.PutLimit(ctx, "spend", client.LimitSpec{Capacity: d("100"), Leak: &client.Leak{Amount: d("1"), Per: time.Hour}})
	must(err)
	_, err = c.PutLimit(ctx, "rows", client.LimitSpec{Capacity: d("10"), Leak: &client.Leak{Amount: d("1"), Per: time.Second}})
	must(err)
	_, err = c.GetLimit(ctx, "spend")
	must(err)
	_, _, err = c.ListLimits(ctx, "", 1)
	must(err)
	_, err = c.Bucket(ctx, "spend", "a/b")
	must(err)
	_, err = c.CanAccept(ctx, "spend", "a/b", d("200"))
	must(err)
	_, err = c.Fillup(ctx, "spend", "a/b", d("12.37"))
	must(err)
	_, err = c.Fillup(ctx, "spend", "a/b", d("99"))
	must(err)
	_, err = c.FillupMany(ctx, []client.Item{{Limit: "spend", Key: "a/b", Cost: d("1")}, {Limit: "rows", Key: "u", Cost: d("2")}})
	must(err)
	_, err = c.FillupMany(ctx, []client.Item{{Limit: "spend", Key: "a/b", Cost: d("1")}, {Limit: "rows", Key: "u", Cost: d("20")}})
	must(err)
	_, err = c.Drain(ctx, "spend", "a/b", d("0.37"))
	must(err)
	hold, _, err := c.Reserve(ctx, "spend", "a/b", d("5"), time.Minute)
	must(err)
	_, _, err = c.Reserve(ctx, "spend", "a/b", d("95"), 0)
	must(err)
	_, err = c.Reservation(ctx, hold.ID)
	must(err)
	amt := d("4")
	_, err = c.Commit(ctx, hold.ID, &amt, false)
	must(err)
	h2, _, err := c.Reserve(ctx, "spend", "a/b", d("1"), time.Minute)
	must(err)
	_, err = c.Release(ctx, h2.ID)
	must(err)
	_, err = c.Release(ctx, hold.ID) // 409 reservation_closed
	if !client.IsCode(err, "reservation_closed") {
		t.Fatal(err)
	}
	h3, _, err := c.Reserve(ctx, "rows", "x", d("1"), time.Second)
	must(err)
	big := d("2")
	if _, err = c.Commit(ctx, h3.ID, &big, false); !client.IsCode(err, "exceeds_hold") {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	if _, err = c.Release(ctx, h3.ID); !client.IsCode(err, "reservation_expired") {
		t.Fatal(err)
	}
	_, _, err = c.History(ctx, "spend", "a/b", "", 2)
	must(err)
	routed := map[string]bool{}
	for _, r := range budgethttp.Routes() {
		routed[r.Method+" "+r.Path] = true
	}
	if routed["GET /v1/limits/:name/buckets"] {
		_, _, err = c.ListBuckets(ctx, "spend", "", 10)
		must(err)
	}
	if routed["GET /v1/limits/:name/buckets/:key/reservations"] {
		_, err = c.Holds(ctx, "spend", "a/b")
		must(err)
	}
	until, raised := clock.Now().Add(time.Hour), d("150")
	_, err = c.PutOverride(ctx, "spend", client.Override{Pattern: "a/*", Capacity: &raised, ExpiresAt: &until})
	must(err)
	_, err = c.PutOverride(ctx, "spend", client.Override{Pattern: "a/b", Leak: &client.Leak{Amount: d("2"), Per: time.Hour}})
	must(err)
	_, err = c.GetOverride(ctx, "spend", "a/*")
	must(err)
	_, _, err = c.ListOverrides(ctx, "spend", "", 1)
	must(err)
	_, err = c.Fillup(ctx, "spend", "a/c", d("1"))
	must(err)
	must(c.DeleteOverride(ctx, "spend", "a/b"))
	if _, err = c.GetOverride(ctx, "spend", "a/b"); !client.IsCode(err, "override_not_found") {
		t.Fatal(err)
	}
	g, err := c.Grant(ctx, "spend", "a/b", d("500"), until, client.IdempotencyKey("g1"), client.Meta(map[string]string{"ticket": "T-1"}))
	must(err)
	_, err = c.Grant(ctx, "spend", "a/b", d("500"), until, client.IdempotencyKey("g1"), client.Meta(map[string]string{"ticket": "T-1"}))
	must(err)
	_, err = c.ListGrants(ctx, "spend", "a/b")
	must(err)
	_, err = c.Fillup(ctx, "spend", "a/b", d("1"))
	must(err)
	_, err = c.RevokeGrant(ctx, "spend", "a/b", g.Grant.ID)
	must(err)
	if _, err = c.RevokeGrant(ctx, "spend", "a/b", g.Grant.ID); !client.IsCode(err, "grant_not_found") {
		t.Fatal(err)
	}
	// Rollover: on the limit document, the PUT body, decisions and bucket
	// states, across a month's end.
	rl, err := c.PutLimit(ctx, "monthly", client.LimitSpec{Capacity: d("100"), Period: &client.Period{Every: "month"}, Rollover: &client.Rollover{Max: d("30")}})
	must(err)
	if rl.Rollover == nil || !rl.Rollover.Max.Equal(d("30")) {
		t.Fatalf("limit with rollover: %+v", rl)
	}
	_, err = c.Fillup(ctx, "monthly", "a/b", d("10"))
	must(err)
	clock.Advance(32 * 24 * time.Hour)
	rb, err := c.Bucket(ctx, "monthly", "a/b")
	must(err)
	rd, err := c.Fillup(ctx, "monthly", "a/b", d("1"))
	must(err)
	if !rb.Rollover.Equal(d("30")) || !rd.Rollover.Equal(d("30")) || !rd.Capacity.Equal(d("130")) {
		t.Fatalf("rollover in the bucket %+v and the decision %+v", rb, rd)
	}

	// Error answers, by hand.
	raw := func(method, path, body string, headers ...string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Authorization", "Bearer "+admin)
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	raw("POST", "/v1/limits/spend/buckets/k/fillup", `{"cost":"1e2"}`)
	raw("POST", "/v1/limits/nope/buckets/k/fillup", `{"cost":"1"}`)
	raw("GET", "/v1/limits/nope", "")
	raw("GET", "/v1/reservations/nope", "")
	raw("POST", "/v1/limits/spend/buckets/k/fillup", `{"cost":"`+strings.Repeat("1", 70000)+`"}`)
	raw("POST", "/v1/limits/spend/buckets/k/fillup", `{"cost":"1"}`, "Idempotency-Key", "x")
	raw("POST", "/v1/limits/spend/buckets/k/fillup", `{"cost":"2"}`, "Idempotency-Key", "x")
	raw("PUT", "/v1/limits/Bad", `{"capacity":"1","leak":{"amount":"1","per":"1s"}}`)
	raw("PUT", "/v1/limits/spend/overrides/a*b", `{"capacity":"5"}`)
	raw("PUT", "/v1/limits/spend/overrides/k", `{"window":{"length":"1m"}}`)
	raw("PUT", "/v1/limits/nope/overrides/k", `{"capacity":"5"}`)
	raw("POST", "/v1/limits/spend/buckets/k/grants", `{"amount":"0","expires_at":"2099-01-01T00:00:00Z"}`)
	raw("POST", "/v1/limits/spend/buckets/k/grants", `{"amount":"5","expires_at":"yesterday"}`)
	raw("POST", "/v1/limits/nope/buckets/k/grants", `{"amount":"5","expires_at":"2099-01-01T00:00:00Z"}`)
	raw("GET", "/v1/limits", "", "Authorization", "")                                                   // 401
	raw("POST", "/v1/limits/spend/buckets/k/fillup", `{"cost":"1"}`, "Authorization", "Bearer "+reader) // 403
	raw("GET", "/healthz", "", "Authorization", "")
	raw("GET", "/readyz", "")
	raw("GET", "/openapi.json", "")
	raw("GET", "/metrics", "")
	raw("GET", "/v1/limits/spend/buckets/a%2Fb/levels?points=5", "")
	raw("GET", "/v1/limits/spend/buckets/a%2Fb/levels?points=1", "")
	if _, _, err := c.Events(ctx, "", 10); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BucketEvents(ctx, "spend", "a/b", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := c.LimitCounts(ctx, "spend"); err != nil {
		t.Fatal(err)
	}
	raw("GET", "/v1/limits/nope/counts", "")
	must(c.DeleteLimit(ctx, "rows"))

	// Every operation of the document that the server routes was exercised.
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(budgethttp.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	var missing []string
	for path, ops := range doc.Paths {
		route := path
		for _, name := range []string{"name", "key", "id"} {
			route = strings.ReplaceAll(route, "{"+name+"}", ":"+name)
		}
		for method := range ops {
			m := strings.ToUpper(method)
			if method == "parameters" || !routed[m+" "+route] {
				continue
			}
			if !ct.seen[m+" "+path] {
				missing = append(missing, m+" "+path)
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("not exercised: %v", missing)
	}
	for _, s := range []string{"POST /v1/limits/{name}/buckets/{key}/fillup Too Many Requests", "POST /v1/fillup Too Many Requests",
		"POST /v1/reservations/{id}/release Gone", "POST /v1/reservations/{id}/commit Unprocessable Entity", "POST /v1/limits/{name}/buckets/{key}/fillup Request Entity Too Large",
		"GET /v1/limits Unauthorized", "POST /v1/limits/{name}/buckets/{key}/fillup Forbidden"} {
		if !ct.seen[s] {
			t.Errorf("not exercised: %s", s)
		}
	}
}

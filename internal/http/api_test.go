package http_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/auth"
	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/budgetd/budgetd/internal/storemetrics"
	"github.com/shopspring/decimal"
)

// api is a budgetd API over a memory store with a pinned clock. With
// BUDGETD_TEST_AUTH=1 (scripts/test runs the package both ways) the API
// requires a token, and every request carries an admin key's unless it
// sets its own Authorization header.
type api struct {
	t     *testing.T
	url   string
	clock *ledgertest.Clock
	store ledger.Store
	token string
}

func newAPI(t *testing.T) *api {
	t.Helper()
	clock := ledgertest.NewClock()
	store := memory.New(memory.WithClock(clock.Now))
	return serve(t, clock, store)
}

func serve(t *testing.T, clock *ledgertest.Clock, store ledger.Store) *api {
	var opts []budgethttp.Option
	token := ""
	if os.Getenv("BUDGETD_TEST_AUTH") == "1" {
		token = "test-admin-token"
		opts = append(opts, budgethttp.WithAuth(keysOf(t, auth.Line("test-admin", token, auth.Admin, nil))))
	}
	// The store measured, as budgetd serves it (cmd/budgetd wraps every
	// store), so that these tests also cover what the wrapper passes on.
	srv := httptest.NewServer(budgethttp.New(ledger.NewService(storemetrics.Wrap(store)), opts...))
	t.Cleanup(srv.Close)
	return &api{t: t, url: srv.URL, clock: clock, store: store, token: token}
}

// keysOf parses key-file lines for WithAuth.
func keysOf(t *testing.T, lines ...string) func() *auth.Keys {
	t.Helper()
	ks, err := auth.Parse(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	return func() *auth.Keys { return ks }
}

// response is an answer with its body decoded loosely.
type response struct {
	status int
	header http.Header
	raw    string
	body   map[string]any
}

func (r response) str(field string) string {
	v, _ := r.body[field].(string)
	return v
}

func (a *api) do(method, path, body string, headers ...string) response {
	a.t.Helper()
	req, err := http.NewRequest(method, a.url+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := response{status: res.StatusCode, header: res.Header, raw: string(raw)}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func (a *api) expect(method, path, body string, status int, headers ...string) response {
	a.t.Helper()
	r := a.do(method, path, body, headers...)
	if r.status != status {
		a.t.Fatalf("%s %s %s: status %d, want %d: %s", method, path, body, r.status, status, r.raw)
	}
	return r
}

func (a *api) limit(name, capacity, amount, per string) {
	a.t.Helper()
	a.expect("PUT", "/v1/limits/"+name, `{"capacity":"`+capacity+`","leak":{"amount":"`+amount+`","per":"`+per+`"}}`, 200)
}

// bucketState returns the raw state document of a bucket.
func (a *api) bucketState(path string) string {
	a.t.Helper()
	return a.expect("GET", path, "", 200).raw
}

func decEq(t *testing.T, what, got, want string) {
	t.Helper()
	g, err := decimal.NewFromString(got)
	if err != nil || !g.Equal(decimal.RequireFromString(want)) {
		t.Fatalf("%s = %q, want %s", what, got, want)
	}
}

func TestSeedScenario(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.limit("seed", "10", "1", "1s")
		for i := 0; i < 10; i++ {
			a.expect("POST", "/v1/limits/seed/buckets/k/fillup", `{"cost":"1"}`, 200)
		}
		r := a.expect("POST", "/v1/limits/seed/buckets/k/fillup", `{"cost":"1"}`, 429)
		if r.header.Get("Retry-After") != "1" || r.str("retry_after") != "1" || r.body["accepted"] != false {
			t.Fatalf("denial: Retry-After %q, body %s", r.header.Get("Retry-After"), r.raw)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("429 content type %q", ct)
		}
		a.clock.Advance(4 * time.Second)
		for i := 0; i < 4; i++ {
			a.expect("POST", "/v1/limits/seed/buckets/k/fillup", `{"cost":"1"}`, 200)
		}
		a.expect("POST", "/v1/limits/seed/buckets/k/fillup", `{"cost":"1"}`, 429)
	})
}

func TestCanAcceptAndState(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.limit("rows", "100000", "100000", "1h")
		empty := a.expect("GET", "/v1/limits/rows/buckets/t42", "", 200)
		if empty.body["updated_at"] != nil || empty.str("level") != "0" || empty.str("remaining") != "100000" {
			t.Fatalf("never-written bucket: %s", empty.raw)
		}
		r := a.expect("GET", "/v1/limits/rows/buckets/t42?cost=25000", "", 200)
		if r.body["accepted"] != true || r.body["retry_after"] != nil || r.body["never_fits"] != false {
			t.Fatalf("CanAccept: %s", r.raw)
		}
		a.expect("POST", "/v1/limits/rows/buckets/t42/fillup", `{"cost":"90000"}`, 200)
		a.clock.Advance(36 * time.Second) // leaks 1000
		r = a.expect("GET", "/v1/limits/rows/buckets/t42?cost=25000", "", 200)
		if r.body["accepted"] != false || r.str("retry_after") != "504" || r.str("level") != "89000" {
			t.Fatalf("CanAccept when full: %s", r.raw)
		}
		never := a.expect("GET", "/v1/limits/rows/buckets/t42?cost=100000.000001", "", 200)
		if never.body["never_fits"] != true || never.body["retry_after"] != nil {
			t.Fatalf("never fits: %s", never.raw)
		}
		// Any number of CanAccepts leave the bucket as it was.
		before := a.bucketState("/v1/limits/rows/buckets/t42")
		for i := 0; i < 20; i++ {
			a.expect("GET", "/v1/limits/rows/buckets/t42?cost=1", "", 200)
		}
		if after := a.bucketState("/v1/limits/rows/buckets/t42"); after != before {
			t.Fatalf("CanAccept changed the bucket:\n%s\n%s", before, after)
		}
		// A denied fillup with never_fits has no Retry-After.
		d := a.expect("POST", "/v1/limits/rows/buckets/t42/fillup", `{"cost":"200000"}`, 429)
		if _, ok := d.header["Retry-After"]; ok || d.body["never_fits"] != true {
			t.Fatalf("never-fits denial: header %v body %s", d.header, d.raw)
		}
	})
}

// TestBadInput sends every kind of bad input to each endpoint: each answers
// a 4xx problem+json with a stable code naming the field, and nothing
// changes.
func TestBadInput(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.limit("spend", "100", "1", "1s")
		a.expect("POST", "/v1/limits/spend/buckets/k/fillup", `{"cost":"10"}`, 200)
		reserved := a.expect("POST", "/v1/limits/spend/buckets/k/reservations", `{"amount":"5"}`, 201)
		hold := reserved.str("id")
		bucketURL := "/v1/limits/spend/buckets/k"
		before := a.bucketState(bucketURL)
		limitBefore := a.expect("GET", "/v1/limits/spend", "", 200).raw
		huge := `{"cost":"` + strings.Repeat("9", 70000) + `"}`
		cases := []struct {
			method, path, body string
			status             int
			code, field        string
		}{
			{"POST", bucketURL + "/fillup", `{"cost":"-1"}`, 400, "invalid_amount", "cost"},
			{"POST", bucketURL + "/fillup", `{"cost":"NaN"}`, 400, "invalid_amount", "cost"},
			{"POST", bucketURL + "/fillup", `{"cost":"Infinity"}`, 400, "invalid_amount", "cost"},
			{"POST", bucketURL + "/fillup", `{"cost":1e1000000}`, 400, "invalid_amount", "cost"},
			{"POST", bucketURL + "/fillup", `{"cost":1e400}`, 400, "invalid_amount", "cost"},
			{"POST", bucketURL + "/fillup", `{"cost":"1e2"}`, 400, "invalid_amount", "cost"},
			{"POST", bucketURL + "/fillup", `{"cost":"0.0000001"}`, 400, "invalid_amount", "cost"},
			{"POST", bucketURL + "/fillup", `{"cost":"1.0000000"}`, 400, "invalid_amount", "cost"},
			{"POST", bucketURL + "/fillup", `{"cost":"007"}`, 400, "invalid_amount", "cost"},
			{"POST", bucketURL + "/fillup", `{"cost":"-0"}`, 400, "invalid_amount", "cost"},
			{"POST", bucketURL + "/fillup", `{"cost":"+5"}`, 400, "invalid_amount", "cost"},
			{"POST", bucketURL + "/fillup", `{"cost":".5"}`, 400, "invalid_amount", "cost"},
			{"POST", bucketURL + "/fillup", `{"cost":"5."}`, 400, "invalid_amount", "cost"},
			{"POST", bucketURL + "/fillup", `{"cost":" 5"}`, 400, "invalid_amount", "cost"},
			{"POST", bucketURL + "/fillup", `{"cost":""}`, 400, "invalid_amount", "cost"},
			{"POST", bucketURL + "/fillup", `{"cost":"abc"}`, 400, "invalid_amount", "cost"},
			{"POST", bucketURL + "/fillup", `{"cost":"1000000000000.000001"}`, 400, "invalid_amount", "cost"},
			{"POST", bucketURL + "/fillup", `{"cost":true}`, 400, "invalid_request", "cost"},
			{"POST", bucketURL + "/fillup", `{}`, 400, "invalid_amount", "cost"},
			{"POST", bucketURL + "/fillup", ``, 400, "invalid_amount", "cost"},
			{"POST", bucketURL + "/fillup", `{"cost":"1"`, 400, "invalid_request", "body"},
			{"POST", bucketURL + "/fillup", `[1]`, 400, "invalid_request", "body"},
			{"POST", bucketURL + "/fillup", `{"cost":"1"} {}`, 400, "invalid_request", "body"},
			{"POST", bucketURL + "/fillup", `{"cost":"1","cots":"2"}`, 400, "invalid_request", "cots"},
			{"POST", bucketURL + "/fillup", huge, 413, "payload_too_large", ""},
			{"POST", bucketURL + "/drain", `{"amount":"-3"}`, 400, "invalid_amount", "amount"},
			{"POST", bucketURL + "/reservations", `{"amount":"0"}`, 400, "invalid_amount", "amount"},
			{"POST", bucketURL + "/reservations", `{"amount":"1","ttl":"10"}`, 400, "invalid_duration", "ttl"},
			{"POST", bucketURL + "/reservations", `{"amount":"1","ttl":"0.5s"}`, 400, "invalid_duration", "ttl"},
			{"POST", bucketURL + "/reservations", `{"amount":"1","ttl":"25h"}`, 400, "invalid_duration", "ttl"},
			{"POST", bucketURL + "/reservations", `{"amount":"1","ttl":60}`, 400, "invalid_request", "ttl"},
			{"GET", bucketURL + "?cost=", "", 400, "invalid_amount", "cost"},
			{"GET", bucketURL + "?cost=1e3", "", 400, "invalid_amount", "cost"},
			{"GET", "/v1/limits/spend/buckets/" + strings.Repeat("k", 257), "", 400, "invalid_key", "key"},
			{"GET", "/v1/limits/spend/buckets/a%01b", "", 400, "invalid_key", "key"},
			{"GET", "/v1/limits/spend/buckets/a%C2%85b", "", 400, "invalid_key", "key"},
			{"GET", "/v1/limits/spend/buckets/a%FFb", "", 400, "invalid_key", "key"},
			{"POST", "/v1/limits/spend/buckets/a%7Fb/fillup", `{"cost":"1"}`, 400, "invalid_key", "key"},
			{"POST", "/v1/limits/nope/buckets/k/fillup", `{"cost":"1"}`, 404, "limit_not_found", ""},
			{"GET", "/v1/limits/nope", "", 404, "limit_not_found", ""},
			{"GET", "/v1/limits/Spend", "", 400, "invalid_name", "name"},
			{"PUT", "/v1/limits/spend", `{"capacity":"0","leak":{"amount":"1","per":"1s"}}`, 400, "invalid_amount", "capacity"},
			{"PUT", "/v1/limits/spend", `{"capacity":"-5","leak":{"amount":"1","per":"1s"}}`, 400, "invalid_amount", "capacity"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","leak":{"amount":"0","per":"1s"}}`, 400, "invalid_amount", "leak.amount"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","leak":{"amount":"1","per":"0s"}}`, 400, "invalid_duration", "leak.per"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","leak":{"amount":"1","per":"-1s"}}`, 400, "invalid_duration", "leak.per"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","leak":{"amount":"1","per":"1ns"}}`, 400, "invalid_duration", "leak.per"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","leak":{"amount":"1","per":"87601h"}}`, 400, "invalid_duration", "leak.per"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","leak":{"amount":"1","per":"soon"}}`, 400, "invalid_duration", "leak.per"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","leak":{"amount":"1"}}`, 400, "invalid_duration", "leak.per"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5"}`, 400, "invalid_request", "leak"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","leak":null,"period":null}`, 400, "invalid_request", "leak"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","leak":{"amount":"1","per":"1s"},"period":{"every":"month"}}`, 400, "invalid_request", "leak"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","period":"month"}`, 400, "invalid_request", "period"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","period":{}}`, 400, "invalid_request", "period.every"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","period":{"every":"fortnight"}}`, 400, "invalid_request", "period.every"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","period":{"every":"Month"}}`, 400, "invalid_request", "period.every"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","period":{"every":30}}`, 400, "invalid_request", "period.every"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","period":{"every":"month","tz":"Mars/Olympus"}}`, 400, "invalid_request", "period.tz"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","period":{"every":"month","tz":"../etc/passwd"}}`, 400, "invalid_request", "period.tz"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","period":{"every":"month","tz":"` + strings.Repeat("a", 400) + `"}}`, 400, "invalid_request", "period.tz"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","period":{"every":"month","tz":""}}`, 400, "invalid_request", "period.tz"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","period":{"every":"month","tz":"Europe/"}}`, 400, "invalid_request", "period.tz"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","period":{"every":"month","tz":1}}`, 400, "invalid_request", "period.tz"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","period":{"every":"month","start_day":0}}`, 400, "invalid_request", "period.start_day"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","period":{"every":"month","start_day":29}}`, 400, "invalid_request", "period.start_day"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","period":{"every":"quarter","start_day":29}}`, 400, "invalid_request", "period.start_day"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","period":{"every":"week","start_day":8}}`, 400, "invalid_request", "period.start_day"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","period":{"every":"day","start_day":1}}`, 400, "invalid_request", "period.start_day"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","period":{"every":"year","start_day":1}}`, 400, "invalid_request", "period.start_day"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","period":{"every":"month","start_day":"1"}}`, 400, "invalid_request", "period.start_day"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","period":{"every":"month","start_day":1.5}}`, 400, "invalid_request", "period.start_day"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","period":{"every":"month","when":1}}`, 400, "invalid_request", "period.when"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","leak":{"amount":"1","per":"1s"},"window":{"length":"1m"}}`, 400, "invalid_request", "window"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","period":{"every":"day"},"window":{"length":"1m"}}`, 400, "invalid_request", "window"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","window":"1m"}`, 400, "invalid_request", "window"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","window":{}}`, 400, "invalid_request", "window.length"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","window":{"length":"999ms"}}`, 400, "invalid_request", "window.length"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","window":{"length":"8761h"}}`, 400, "invalid_request", "window.length"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","window":{"length":"soon"}}`, 400, "invalid_request", "window.length"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","window":{"length":60}}`, 400, "invalid_request", "window.length"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","window":{"length":"1m","precision":"7s"}}`, 400, "invalid_request", "window.precision"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","window":{"length":"1h","precision":"1ms"}}`, 400, "invalid_request", "window.precision"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","window":{"length":"1m","precision":"2m"}}`, 400, "invalid_request", "window.precision"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","window":{"length":"1m","precision":"0s"}}`, 400, "invalid_request", "window.precision"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","window":{"length":"1.0001s"}}`, 400, "invalid_request", "window.precision"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","window":{"length":"1m","precision":1}}`, 400, "invalid_request", "window.precision"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","window":{"length":"1m","every":"day"}}`, 400, "invalid_request", "window.every"},
			{"PUT", "/v1/limits/spend", `{"capacity":"5","leak":{"amount":"1","per":"1s"},"history":"yes"}`, 400, "invalid_request", "history"},
			{"PUT", "/v1/limits/-bad", `{"capacity":"5","leak":{"amount":"1","per":"1s"}}`, 400, "invalid_name", "name"},
			{"GET", "/v1/limits?limit=0", "", 400, "invalid_request", "limit"},
			{"GET", "/v1/limits?limit=1001", "", 400, "invalid_request", "limit"},
			{"GET", "/v1/limits?limit=x", "", 400, "invalid_request", "limit"},
			{"GET", "/v1/limits?limit=%2B5", "", 400, "invalid_request", "limit"},
			{"GET", "/v1/limits?limit=%zz", "", 400, "invalid_request", "limit"},
			{"GET", bucketURL + "?cost=%zz", "", 400, "invalid_amount", "cost"},
			{"GET", bucketURL + "?cost=1;2", "", 400, "invalid_amount", "cost"},
			{"GET", "/v1/limits/nope/buckets/k?cost=%zz", "", 400, "invalid_amount", "cost"},
			{"GET", bucketURL + "/history?cursor=%zz", "", 400, "invalid_request", "cursor"},
			{"GET", "/v1/limits/spend/buckets/", "", 400, "invalid_key", "key"},
			{"GET", "/v1/limits/spend/buckets/?cost=1", "", 400, "invalid_key", "key"},
			{"GET", bucketURL + "/history?cursor=zzz", "", 400, "invalid_request", "cursor"},
			{"POST", "/v1/fillup", `{"items":[]}`, 400, "invalid_request", "items"},
			{"POST", "/v1/fillup", `{"items":[` + strings.Repeat(`{"limit":"spend","key":"k","cost":"1"},`, 64) + `{"limit":"spend","key":"k","cost":"1"}]}`, 400, "invalid_request", "items"},
			{"POST", "/v1/fillup", `{"items":[{"limit":"spend","key":"k","cost":"1"},{"limit":"spend","key":"","cost":"1"}]}`, 400, "invalid_key", "items[1].key"},
			{"POST", "/v1/fillup", `{"items":[{"limit":"spend","key":"k","cost":"x"}]}`, 400, "invalid_amount", "items[0].cost"},
			{"POST", "/v1/fillup", `{"items":[{"limit":"Spend","key":"k","cost":"1"}]}`, 400, "invalid_name", "items[0].limit"},
			{"POST", "/v1/fillup", `{"items":[{"limit":"spend","key":"\ud800","cost":"1"}]}`, 400, "invalid_key", "items[0].key"},
			{"POST", "/v1/fillup", `{"items":[{"limit":"spend","key":"k","cost":"1"},{"limit":"spend","key":"a\udc00b","cost":"1"}]}`, 400, "invalid_key", "items[1].key"},
			{"POST", "/v1/fillup", `{"items":[{"limit":"spend","key":"\ud800\u0041","cost":"1"}]}`, 400, "invalid_key", "items[0].key"},
			{"POST", "/v1/fillup", "{\"items\":[{\"limit\":\"spend\",\"key\":\"a\xc3\",\"cost\":\"1\"}]}", 400, "invalid_key", "items[0].key"},
			{"POST", "/v1/fillup", `{"items":[{"limit":"spend","key":2,"cost":"1"}]}`, 400, "invalid_request", "items[0].key"},
			{"POST", "/v1/fillup", `{"items":[{"limit":1,"key":"k","cost":"1"}]}`, 400, "invalid_request", "items[0].limit"},
			{"POST", "/v1/fillup", `{"items":[{"limit":"spend","key":"k","cost":"1"},"x"]}`, 400, "invalid_request", "items[1]"},
			{"POST", "/v1/fillup", `{"items":[{"limit":"spend","key":"k","cost":"1","x":1}]}`, 400, "invalid_request", "items[0].x"},
			{"POST", "/v1/fillup", `{"items":[{"limit":"spend","key":"k","cost":"1"},{"limit":"nope","key":"k","cost":"1"}]}`, 404, "limit_not_found", ""},
			{"POST", "/v1/reservations/" + hold + "/commit", `{"amount":"1.1234567"}`, 400, "invalid_amount", "amount"},
			{"POST", "/v1/reservations/" + hold + "/commit", `{"amount":"6"}`, 422, "exceeds_hold", ""},
			{"POST", "/v1/reservations/" + hold + "/commit", `{"ammount":"1"}`, 400, "invalid_request", "ammount"},
			{"POST", "/v1/reservations/nope/commit", `{}`, 404, "reservation_not_found", ""},
			{"POST", "/v1/reservations/bad%20id/release", ``, 404, "reservation_not_found", ""},
			{"GET", "/v1/reservations/" + strings.Repeat("x", 129), "", 404, "reservation_not_found", ""},
			{"POST", bucketURL + "/fillup", `{"cost":"1"}`, 400, "invalid_request", "Idempotency-Key"},
			{"DELETE", bucketURL, "", 405, "method_not_allowed", ""},
		}
		for _, tc := range cases {
			var headers []string
			if tc.field == "Idempotency-Key" {
				headers = []string{"Idempotency-Key", strings.Repeat("i", 256)}
			}
			r := a.do(tc.method, tc.path, tc.body, headers...)
			name := tc.method + " " + clip(tc.path) + " " + clip(tc.body)
			if r.status != tc.status || r.str("code") != tc.code || r.str("field") != tc.field {
				t.Errorf("%s: %d %s field %q, want %d %s field %q: %s", name, r.status, r.str("code"), r.str("field"), tc.status, tc.code, tc.field, clip(r.raw))
				continue
			}
			if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("%s: content type %q", name, ct)
			}
			if r.str("type") == "" || r.str("title") == "" || r.str("detail") == "" || r.body["status"] != float64(tc.status) {
				t.Errorf("%s: incomplete problem %s", name, r.raw)
			}
		}
		if after := a.bucketState(bucketURL); after != before {
			t.Fatalf("bad input changed the bucket:\n%s\n%s", before, after)
		}
		if after := a.expect("GET", "/v1/limits/spend", "", 200).raw; after != limitBefore {
			t.Fatalf("bad input changed the limit:\n%s\n%s", limitBefore, after)
		}
		if r := a.expect("GET", "/v1/reservations/"+hold, "", 200); r.str("state") != "active" {
			t.Fatalf("bad input resolved the hold: %s", r.raw)
		}
	})
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// TestJSONNumbersAreExact charges JSON numbers, which must be read from
// their text: 0.1 a thousand times is exactly 100.
func TestJSONNumbersAreExact(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.limit("exact", "1000", "1", "24h")
		for i := 0; i < 1000; i++ {
			a.expect("POST", "/v1/limits/exact/buckets/k/fillup", `{"cost":0.1}`, 200)
		}
		r := a.expect("GET", "/v1/limits/exact/buckets/k", "", 200)
		decEq(t, "level", r.str("level"), "100")
		a.expect("POST", "/v1/limits/exact/buckets/k/fillup", `{"cost":123456789012.123456}`, 429)
		a.limit("big", "1000000000000", "1", "1s")
		r = a.expect("POST", "/v1/limits/big/buckets/k/fillup", `{"cost":999999999999.999999}`, 200)
		if r.str("level") != "999999999999.999999" {
			t.Fatalf("level %s", r.str("level"))
		}
	})
}

func TestKeysArePathEscaped(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.limit("keys", "10", "1", "1s")
		a.expect("POST", "/v1/limits/keys/buckets/a%2Fb/fillup", `{"cost":"3"}`, 200)
		a.expect("POST", "/v1/limits/keys/buckets/a%25b/fillup", `{"cost":"2"}`, 200)
		decEq(t, "a/b", a.expect("GET", "/v1/limits/keys/buckets/a%2Fb", "", 200).str("level"), "3")
		decEq(t, "a%b", a.expect("GET", "/v1/limits/keys/buckets/a%25b", "", 200).str("level"), "2")
		decEq(t, "a", a.expect("GET", "/v1/limits/keys/buckets/a", "", 200).str("level"), "0")
		utf := "/v1/limits/keys/buckets/" + "%E7%A7%9F%E6%88%B7-42"
		a.expect("POST", utf+"/fillup", `{"cost":"1"}`, 200)
		decEq(t, "utf-8 key", a.expect("GET", utf, "", 200).str("level"), "1")
		long := strings.Repeat("k", 256)
		a.expect("POST", "/v1/limits/keys/buckets/"+long+"/fillup", `{"cost":"1"}`, 200)
	})
}

func TestLimits(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		r := a.expect("PUT", "/v1/limits/team-spend", `{"capacity":"5000.00","leak":{"amount":"5000.00","per":"720h"}}`, 200)
		if r.str("name") != "team-spend" || r.body["history"] != true || r.str("created_at") == "" {
			t.Fatalf("PUT: %s", r.raw)
		}
		decEq(t, "capacity", r.str("capacity"), "5000")
		leak := r.body["leak"].(map[string]any)
		if leak["per"] != "720h" || leak["amount"] != "5000" {
			t.Fatalf("leak %v", leak)
		}
		if !strings.HasSuffix(r.str("created_at"), "Z") || len(r.str("created_at")) != len("2006-01-02T15:04:05.000000Z") {
			t.Fatalf("created_at %q", r.str("created_at"))
		}
		// A GET document can be PUT back.
		doc := a.expect("GET", "/v1/limits/team-spend", "", 200)
		a.expect("PUT", "/v1/limits/team-spend", doc.raw, 200)
		a.expect("PUT", "/v1/limits/team-spend", strings.Replace(doc.raw, `"team-spend"`, `"other"`, 1), 400)

		a.expect("POST", "/v1/limits/team-spend/buckets/a/fillup", `{"cost":"100"}`, 200)
		a.expect("PUT", "/v1/limits/team-spend", `{"capacity":"50","leak":{"amount":"1","per":"1h"},"history":false}`, 200)
		b := a.expect("GET", "/v1/limits/team-spend/buckets/a?cost=0.01", "", 200)
		if b.body["accepted"] != false || b.str("level") != "100" || b.str("remaining") != "0" {
			t.Fatalf("after lowering capacity: %s", b.raw)
		}
		for _, n := range []string{"b", "c", "d", "e"} {
			a.limit(n, "1", "1", "1s")
		}
		var names []string
		cursor := ""
		for {
			p := a.expect("GET", "/v1/limits?limit=2"+cursor, "", 200)
			for _, it := range p.body["items"].([]any) {
				names = append(names, it.(map[string]any)["name"].(string))
			}
			next, _ := p.body["next_cursor"].(string)
			if next == "" {
				if p.body["next_cursor"] != nil {
					t.Fatalf("next_cursor %v", p.body["next_cursor"])
				}
				break
			}
			cursor = "&cursor=" + next
		}
		if strings.Join(names, ",") != "b,c,d,e,team-spend" {
			t.Fatalf("listed %v", names)
		}
		r = a.do("DELETE", "/v1/limits/team-spend", "")
		if r.status != 204 || r.raw != "" {
			t.Fatalf("DELETE: %d %q", r.status, r.raw)
		}
		a.expect("DELETE", "/v1/limits/team-spend", "", 404)
		a.expect("GET", "/v1/limits/team-spend/buckets/a", "", 404)
		a.limit("team-spend", "5000", "5000", "720h")
		decEq(t, "level after re-create", a.expect("GET", "/v1/limits/team-spend/buckets/a", "", 200).str("level"), "0")
	})
}

func TestHolds(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.limit("spend", "100", "1", "1h")
		r := a.expect("POST", "/v1/limits/spend/buckets/team-a/reservations", `{"amount":"80","ttl":"10m"}`, 201)
		id := r.str("id")
		if id == "" || r.str("state") != "active" || r.str("amount") != "80" || r.body["accepted"] != true || r.str("held") != "80" || r.str("remaining") != "20" {
			t.Fatalf("reserve: %s", r.raw)
		}
		want := a.clock.Now().Add(10 * time.Minute).UTC().Format("2006-01-02T15:04:05.000000Z")
		if r.str("expires_at") != want {
			t.Fatalf("expires_at %s, want %s", r.str("expires_at"), want)
		}
		denied := a.expect("POST", "/v1/limits/spend/buckets/team-a/reservations", `{"amount":"30"}`, 429)
		if denied.header.Get("Retry-After") == "" || denied.str("id") != "" {
			t.Fatalf("denied reserve: %v %s", denied.header, denied.raw)
		}
		// The hold counts at once: a fillup of 30 is denied, one of 20 passes.
		a.expect("POST", "/v1/limits/spend/buckets/team-a/fillup", `{"cost":"30"}`, 429)

		c := a.expect("POST", "/v1/reservations/"+id+"/commit", `{"amount":"61.20"}`, 200)
		if c.str("state") != "committed" || c.str("committed_amount") != "61.2" || c.str("level") != "61.2" || c.str("held") != "0" {
			t.Fatalf("commit: %s", c.raw)
		}
		if bk, ok := c.body["bucket"].(map[string]any); !ok || bk["level"] != "61.2" {
			t.Fatalf("commit bucket: %s", c.raw)
		}
		again := a.expect("POST", "/v1/reservations/"+id+"/commit", `{"amount":"61.2"}`, 200)
		if again.str("state") != "committed" || again.str("level") != "61.2" {
			t.Fatalf("repeated commit: %s", again.raw)
		}
		p := a.expect("POST", "/v1/reservations/"+id+"/commit", `{"amount":"62"}`, 409)
		if p.str("code") != "reservation_closed" {
			t.Fatalf("commit with another amount: %s", p.raw)
		}
		a.expect("POST", "/v1/reservations/"+id+"/release", ``, 409)
		if g := a.expect("GET", "/v1/reservations/"+id, "", 200); g.str("state") != "committed" || g.str("committed_amount") != "61.2" {
			t.Fatalf("read committed hold: %s", g.raw)
		}

		// Release, then commit is refused; release repeats.
		r2 := a.expect("POST", "/v1/limits/spend/buckets/team-a/reservations", `{"amount":"10"}`, 201)
		a.expect("POST", "/v1/reservations/"+r2.str("id")+"/release", ``, 200)
		a.expect("POST", "/v1/reservations/"+r2.str("id")+"/release", `{}`, 200)
		a.expect("POST", "/v1/reservations/"+r2.str("id")+"/commit", `{}`, 409)

		// Expiry: from expires_at on, the hold is expired and cannot resolve.
		r3 := a.expect("POST", "/v1/limits/spend/buckets/team-a/reservations", `{"amount":"10","ttl":"1s"}`, 201)
		a.clock.Advance(time.Second)
		if g := a.expect("GET", "/v1/reservations/"+r3.str("id"), "", 200); g.str("state") != "expired" {
			t.Fatalf("expired hold reads %s", g.raw)
		}
		e := a.expect("POST", "/v1/reservations/"+r3.str("id")+"/commit", `{"amount":"1"}`, 410)
		if e.str("code") != "reservation_expired" {
			t.Fatalf("commit after expiry: %s", e.raw)
		}
		a.expect("POST", "/v1/reservations/"+r3.str("id")+"/release", ``, 410)

		// Overrun: only when asked; the level may pass capacity.
		r4 := a.expect("POST", "/v1/limits/spend/buckets/team-a/reservations", `{"amount":"5"}`, 201)
		a.expect("POST", "/v1/reservations/"+r4.str("id")+"/commit", `{"amount":"50","overrun":true}`, 200)
		a.expect("POST", "/v1/limits/spend/buckets/team-a/fillup", `{"cost":"0.01"}`, 429)
		a.expect("POST", "/v1/limits/spend/buckets/team-a/fillup", `{"cost":"0"}`, 200)

		h := a.expect("GET", "/v1/limits/spend/buckets/team-a/history", "", 200)
		var events []string
		for _, it := range h.body["items"].([]any) {
			events = append(events, it.(map[string]any)["event"].(string))
		}
		if got := strings.Join(events, ","); got != "committed,reserved,expired,reserved,released,reserved,committed,reserved" {
			t.Fatalf("history %s", got)
		}
	})
}

func TestMultiBucket(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.limit("user", "10", "1", "1s")
		a.limit("team", "15", "1", "1s")
		body := `{"items":[{"limit":"user","key":"{a}u1","cost":"6"},{"limit":"team","key":"{a}t1","cost":"6"},{"limit":"user","key":"{a}u1","cost":"2"}]}`
		r := a.expect("POST", "/v1/fillup", body, 200)
		items := r.body["items"].([]any)
		if r.body["accepted"] != true || len(items) != 3 || items[0].(map[string]any)["level"] != "8" || items[2].(map[string]any)["level"] != "8" {
			t.Fatalf("multi: %s", r.raw)
		}
		// user/u1 cannot take 8 more; team could: nothing is charged.
		r = a.expect("POST", "/v1/fillup", body, 429)
		items = r.body["items"].([]any)
		if items[0].(map[string]any)["accepted"] != false || items[1].(map[string]any)["accepted"] != true {
			t.Fatalf("denied multi: %s", r.raw)
		}
		if ra := r.header.Get("Retry-After"); ra != "6" {
			t.Fatalf("Retry-After %q, want 6: %s", ra, r.raw)
		}
		decEq(t, "team level", a.expect("GET", "/v1/limits/team/buckets/%7Ba%7Dt1", "", 200).str("level"), "6")
		// A denied item that never fits drops the header.
		r = a.expect("POST", "/v1/fillup", `{"items":[{"limit":"user","key":"{a}u1","cost":"11"},{"limit":"team","key":"{a}t1","cost":"14"}]}`, 429)
		if _, ok := r.header["Retry-After"]; ok {
			t.Fatalf("Retry-After with a never-fitting item: %v", r.header)
		}
		// A key written with a surrogate-pair escape names the same bucket
		// as its UTF-8 spelling in the path.
		a.expect("POST", "/v1/fillup", `{"items":[{"limit":"user","key":"{a}\ud83d\ude00","cost":"3"}]}`, 200)
		decEq(t, "escaped key level", a.expect("GET", "/v1/limits/user/buckets/%7Ba%7D%F0%9F%98%80", "", 200).str("level"), "3")
	})
}

func TestDrainAndHistoryPages(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.limit("spend", "100", "1", "1h")
		for i := 0; i < 5; i++ {
			a.expect("POST", "/v1/limits/spend/buckets/k/fillup", `{"cost":"10"}`, 200)
			a.clock.Advance(time.Millisecond)
		}
		d := a.expect("POST", "/v1/limits/spend/buckets/k/drain", `{"amount":"70"}`, 200)
		if d.str("removed") == "" || d.body["accepted"] != true {
			t.Fatalf("drain: %s", d.raw)
		}
		decEq(t, "level after drain", d.str("level"), "0")
		a.expect("POST", "/v1/limits/spend/buckets/k/drain", `{"amount":"0"}`, 200)
		var ids []string
		cursor := ""
		for pages := 0; ; pages++ {
			p := a.expect("GET", "/v1/limits/spend/buckets/k/history?limit=2"+cursor, "", 200)
			for _, it := range p.body["items"].([]any) {
				e := it.(map[string]any)
				ids = append(ids, e["event"].(string)+":"+e["amount"].(string))
			}
			next, _ := p.body["next_cursor"].(string)
			if next == "" {
				break
			}
			cursor = "&cursor=" + next
		}
		if got := strings.Join(ids, ","); !strings.HasPrefix(got, "drain:") || strings.Count(got, "fillup:10") != 5 || len(ids) != 6 {
			t.Fatalf("history %s", got)
		}
	})
}

func TestIdempotency(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.limit("spend", "10", "1", "1h")
		path := "/v1/limits/spend/buckets/k/fillup"
		first := a.expect("POST", path, `{"cost":"4"}`, 200, "Idempotency-Key", "k1")
		a.clock.Advance(time.Minute)
		again := a.expect("POST", path, `{"cost": 4}`, 200, "Idempotency-Key", "k1")
		if again.raw != first.raw || again.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay differs:\n%s\n%s", first.raw, again.raw)
		}
		reused := a.expect("POST", path, `{"cost":"5"}`, 422, "Idempotency-Key", "k1")
		if reused.str("code") != "idempotency_key_reused" {
			t.Fatalf("reuse: %s", reused.raw)
		}
		// The same key on another bucket or route is another request.
		a.expect("POST", "/v1/limits/spend/buckets/other/fillup", `{"cost":"4"}`, 200, "Idempotency-Key", "k1")
		a.expect("POST", "/v1/limits/spend/buckets/k/drain", `{"amount":"1"}`, 200, "Idempotency-Key", "k1")

		// A denial is replayed with its status and Retry-After.
		a.expect("POST", path, `{"cost":"8"}`, 429, "Idempotency-Key", "k2")
		a.expect("POST", path, `{"cost":"1"}`, 200)
		a.clock.Advance(time.Hour)
		d := a.expect("POST", path, `{"cost":"8"}`, 429, "Idempotency-Key", "k2")
		if d.header.Get("Retry-After") == "" {
			t.Fatalf("replayed denial without Retry-After")
		}
		// A validation error is not stored: the key is still free.
		a.expect("POST", path, `{"cost":"x"}`, 400, "Idempotency-Key", "k3")
		a.expect("POST", path, `{"cost":"1"}`, 200, "Idempotency-Key", "k3")

		// 100 parallel requests with one key charge once.
		a.limit("par", "1000", "1", "1h")
		var wg sync.WaitGroup
		bodies := make([]string, 100)
		for i := range bodies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				bodies[i] = a.expect("POST", "/v1/limits/par/buckets/k/fillup", `{"cost":"3"}`, 200, "Idempotency-Key", "par").raw
			}()
		}
		wg.Wait()
		for _, b := range bodies {
			if b != bodies[0] {
				t.Fatalf("parallel replays differ:\n%s\n%s", bodies[0], b)
			}
		}
		decEq(t, "charged once", a.expect("GET", "/v1/limits/par/buckets/k", "", 200).str("level"), "3")

		// Commit replays; a commit with another key and the same amount repeats.
		r := a.expect("POST", "/v1/limits/par/buckets/k/reservations", `{"amount":"5"}`, 201, "Idempotency-Key", "r1")
		r2 := a.expect("POST", "/v1/limits/par/buckets/k/reservations", `{"amount":"5"}`, 201, "Idempotency-Key", "r1")
		if r.str("id") != r2.str("id") {
			t.Fatalf("reserve replay made a second hold")
		}
		c1 := a.expect("POST", "/v1/reservations/"+r.str("id")+"/commit", `{"amount":"2"}`, 200, "Idempotency-Key", "c1")
		c2 := a.expect("POST", "/v1/reservations/"+r.str("id")+"/commit", `{"amount":"2"}`, 200, "Idempotency-Key", "c1")
		if c1.raw != c2.raw {
			t.Fatalf("commit replay differs")
		}
		decEq(t, "after commit", a.expect("GET", "/v1/limits/par/buckets/k", "", 200).str("level"), "5")
	})
}

// failing is a store that cannot be reached.
type failing struct{ ledger.Store }

func (failing) Ping(context.Context) error { return ledger.ErrUnavailable }
func (failing) Inspect(context.Context, ledger.BucketRef) (ledger.Snapshot, error) {
	return ledger.Snapshot{}, errors.Join(ledger.ErrUnavailable, errors.New("dial tcp 10.0.0.1:5432: refused"))
}

func TestStoreFailureIs503(t *testing.T) {
	a := serve(t, ledgertest.NewClock(), failing{memory.New()})
	a.expect("GET", "/healthz", "", 200)
	r := a.expect("GET", "/readyz", "", 503)
	if r.str("code") != "store_unavailable" {
		t.Fatalf("readyz: %s", r.raw)
	}
	r = a.expect("GET", "/v1/limits/x/buckets/k?cost=1", "", 503)
	if r.str("code") != "store_unavailable" || strings.Contains(r.raw, "10.0.0.1") {
		t.Fatalf("store failure: %s", r.raw)
	}
	a2 := newAPI(t)
	a2.expect("GET", "/readyz", "", 200)
}

func TestOpenAPI(t *testing.T) {
	a := newAPI(t)
	r := a.expect("GET", "/openapi.json", "", 200)
	if r.raw != string(budgethttp.OpenAPI) {
		t.Fatal("/openapi.json is not the embedded document")
	}
	docs, err := readFile("../../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if docs != string(budgethttp.OpenAPI) {
		t.Fatal("the served document is not docs/openapi.json")
	}
	var doc struct {
		Info struct {
			License struct {
				Identifier string `json:"identifier"`
			} `json:"license"`
		} `json:"info"`
		Paths map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(budgethttp.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	// The licence the document names is the repository's.
	license, err := readFile("../../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	if doc.Info.License.Identifier != "Apache-2.0" || !strings.Contains(license, "Apache License") || !strings.Contains(license, "Version 2.0") {
		t.Errorf("openapi.json names the licence %q; LICENSE is not Apache 2.0 or the document does not say so", doc.Info.License.Identifier)
	}
	for _, route := range budgethttp.Routes() {
		p := route.Path
		if strings.HasSuffix(p, "/buckets/") {
			continue // the empty key, only there to answer 400 invalid_key
		}
		if strings.HasPrefix(p, "/ui") || p == "/" {
			continue // the dashboard's static files and the redirect to them, not part of the API
		}
		for _, name := range []string{"name", "key", "id", "pattern"} {
			p = strings.ReplaceAll(p, ":"+name, "{"+name+"}")
		}
		if _, ok := doc.Paths[p][strings.ToLower(route.Method)]; !ok {
			t.Errorf("openapi.json does not describe %s %s", route.Method, p)
		}
	}
	m := a.expect("GET", "/metrics", "", 200)
	if !strings.Contains(m.raw, "budgetd_http_request_duration_seconds") {
		t.Fatal("/metrics lacks the request histogram")
	}
}

func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

// TestDefaultTTLWithinMaxTTL: with --max-ttl shorter than the 5m default, a
// Reserve without ttl gets the longest hold allowed instead of a 400.
func TestDefaultTTLWithinMaxTTL(t *testing.T) {
	clock := ledgertest.NewClock()
	store := memory.New(memory.WithClock(clock.Now))
	svc := ledger.NewService(store, ledger.WithMaxTTL(2*time.Minute))
	srv := httptest.NewServer(budgethttp.New(svc, budgethttp.WithMaxTTL(2*time.Minute)))
	t.Cleanup(srv.Close)
	a := &api{t: t, url: srv.URL, clock: clock, store: store}
	a.limit("spend", "10", "1", "1h")
	r := a.expect("POST", "/v1/limits/spend/buckets/k/reservations", `{"amount":"1"}`, 201)
	if want := clock.Now().Add(2 * time.Minute).UTC().Format("2006-01-02T15:04:05.000000Z"); r.str("expires_at") != want {
		t.Fatalf("expires_at %s, want %s", r.str("expires_at"), want)
	}
	a.expect("POST", "/v1/limits/spend/buckets/k/reservations", `{"amount":"1","ttl":"3m"}`, 400)
}

package http_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
)

func openHandler(t *testing.T, opts ...budgethttp.Option) http.Handler {
	t.Helper()
	clock := ledgertest.NewClock()
	return budgethttp.New(ledger.NewService(memory.New(memory.WithClock(clock.Now))), opts...)
}

func serveReq(h http.Handler, method, path, body string, headers ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

var generatedID = regexp.MustCompile(`^[0-9a-f]{24}$`)

func TestRequestID(t *testing.T) {
	h := openHandler(t)
	serveReq(h, "PUT", "/v1/limits/l", `{"capacity":"1","leak":{"amount":"1","per":"1h"}}`)
	serveReq(h, "POST", "/v1/limits/l/buckets/k/fillup", `{"cost":"1"}`)
	long := strings.Repeat("a", 128)
	for _, tc := range []struct {
		method, path, body, id string
		status                 int
		keep                   bool
	}{
		{"GET", "/healthz", "", "abc-123_x.y:z", 200, true},
		{"GET", "/healthz", "", long, 200, true},
		{"GET", "/healthz", "", long + "a", 200, false},
		{"GET", "/healthz", "", "has space", 200, false},
		{"GET", "/healthz", "", "ünï", 200, false},
		{"GET", "/healthz", "", "", 200, false},
		{"GET", "/nope", "", "r1", 404, true},
		{"POST", "/v1/limits/l/buckets/k/fillup", `{"cost":"1"}`, "r2", 429, true},
		{"POST", "/v1/limits/l/buckets/k/fillup", `{"cost":"x"}`, "bad\x01", 400, false},
	} {
		rec := serveReq(h, tc.method, tc.path, tc.body, "X-Request-Id", tc.id)
		got := rec.Header().Get("X-Request-Id")
		if rec.Code != tc.status {
			t.Fatalf("%s %s: %d", tc.method, tc.path, rec.Code)
		}
		if tc.keep && got != tc.id || !tc.keep && !generatedID.MatchString(got) {
			t.Errorf("%s %s with X-Request-Id %q: answered %q", tc.method, tc.path, tc.id, got)
		}
	}
	if a, b := serveReq(h, "GET", "/healthz", "").Header().Get("X-Request-Id"), serveReq(h, "GET", "/healthz", "").Header().Get("X-Request-Id"); a == b {
		t.Errorf("two requests got the same id %q", a)
	}
}

func TestHEAD(t *testing.T) {
	h := openHandler(t)
	srv := httptest.NewServer(h)
	defer srv.Close()
	http.DefaultClient.Do(mustReq(t, "PUT", srv.URL+"/v1/limits/l", `{"capacity":"1","leak":{"amount":"1","per":"1h"}}`))
	for path, status := range map[string]int{"/healthz": 200, "/readyz": 200, "/openapi.json": 200, "/metrics": 200, "/v1/limits/l": 200,
		"/v1/limits/l/buckets/k": 200, "/v1/limits/nope": 404, "/v1/limits/l/buckets/k/fillup": 405} {
		res, err := http.Head(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != status || len(body) != 0 || res.Header.Get("X-Request-Id") == "" {
			t.Errorf("HEAD %s: %d, %d body bytes, headers %v", path, res.StatusCode, len(body), res.Header)
		}
	}
}

func mustReq(t *testing.T, method, url, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestMetricLabelsBounded sends invented methods and paths: they all land in
// the "other" series, so the number of series stays fixed.
func TestMetricLabelsBounded(t *testing.T) {
	h := openHandler(t)
	for i := 0; i < 500; i++ {
		serveReq(h, "M"+strconv.Itoa(i), "/healthz", "")
		serveReq(h, "GET", "/x/"+strconv.Itoa(i), "")
		serveReq(h, "GET", "/v1/limits/l"+strconv.Itoa(i)+"/nope", "")
	}
	m := scrape(t, h, "")
	series := 0
	for _, line := range strings.Split(m, "\n") {
		if strings.HasPrefix(line, "budgetd_http_request_duration_seconds_count") {
			series++
			if strings.Contains(line, `method="M`) || strings.Contains(line, `route="/x/`) || strings.Contains(line, `l1`) {
				t.Fatalf("unbounded label: %s", line)
			}
		}
	}
	if series > 4 {
		t.Fatalf("%d request series after 1500 odd requests:\n%s", series, m)
	}
	for _, want := range []string{
		`budgetd_http_request_duration_seconds_count{code="405",method="other",route="/healthz"} 500`,
		`budgetd_http_request_duration_seconds_count{code="404",method="GET",route="other"} 1000`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("no %s in\n%s", want, m)
		}
	}
}

// TestRequestSeriesCountEveryRequest: requests on several routes, methods
// and codes from several goroutines at once are each counted once in their
// own series.
func TestRequestSeriesCountEveryRequest(t *testing.T) {
	h := openHandler(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				serveReq(h, "GET", "/healthz", "")
				serveReq(h, "GET", "/x/"+strconv.Itoa(g*50+i), "")
				serveReq(h, "M"+strconv.Itoa(g), "/healthz", "")
			}
		}()
	}
	wg.Wait()
	m := scrape(t, h, "")
	for _, want := range []string{
		`budgetd_http_request_duration_seconds_count{code="200",method="GET",route="/healthz"} 400`,
		`budgetd_http_request_duration_seconds_count{code="404",method="GET",route="other"} 400`,
		`budgetd_http_request_duration_seconds_count{code="405",method="other",route="/healthz"} 400`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("no %s in\n%s", want, m)
		}
	}
}

func TestReadyzWhileDraining(t *testing.T) {
	draining := make(chan struct{})
	h := openHandler(t, budgethttp.WithDraining(draining))
	if rec := serveReq(h, "GET", "/readyz", ""); rec.Code != 200 {
		t.Fatalf("/readyz before shutdown: %d", rec.Code)
	}
	close(draining)
	rec := serveReq(h, "GET", "/readyz", "")
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), `"code":"shutting_down"`) {
		t.Fatalf("/readyz while draining: %d %s", rec.Code, rec.Body)
	}
	if rec := serveReq(h, "GET", "/healthz", ""); rec.Code != 200 {
		t.Fatalf("/healthz while draining: %d", rec.Code)
	}
}

func TestDecisionMetrics(t *testing.T) {
	h := openHandler(t)
	serveReq(h, "PUT", "/v1/limits/l", `{"capacity":"10","leak":{"amount":"1","per":"1h"}}`)
	serveReq(h, "PUT", "/v1/limits/gone", `{"capacity":"10","leak":{"amount":"1","per":"1h"}}`)
	serveReq(h, "POST", "/v1/limits/gone/buckets/k/fillup", `{"cost":"1"}`)
	for i := 0; i < 4; i++ {
		if rec := serveReq(h, "POST", "/v1/limits/l/buckets/k"+strconv.Itoa(i%2)+"/fillup", `{"cost":"2.5"}`, "Idempotency-Key", "i"+strconv.Itoa(i)); rec.Code != 200 {
			t.Fatalf("fillup %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	serveReq(h, "POST", "/v1/limits/l/buckets/k0/fillup", `{"cost":"2.5"}`, "Idempotency-Key", "i0") // a replay
	serveReq(h, "POST", "/v1/limits/l/buckets/k0/fillup", `{"cost":"11"}`)
	serveReq(h, "POST", "/v1/fillup", `{"items":[{"limit":"l","key":"m","cost":"1"},{"limit":"l","key":"n","cost":"1"}]}`)
	serveReq(h, "GET", "/v1/limits/l/buckets/k0?cost=1", "")
	id := regexp.MustCompile(`"id":"([^"]+)"`).FindStringSubmatch(serveReq(h, "POST", "/v1/limits/l/buckets/h/reservations", `{"amount":"1"}`).Body.String())[1]
	serveReq(h, "POST", "/v1/reservations/"+id+"/commit", `{}`)
	serveReq(h, "POST", "/v1/reservations/"+id+"/release", `{}`)
	serveReq(h, "DELETE", "/v1/limits/gone", "")
	m := scrape(t, h, "")
	for _, want := range []string{
		`budgetd_decisions_total{limit="l",op="fillup",result="accepted"} 4`,
		`budgetd_decisions_total{limit="l",op="fillup",result="never_fits"} 1`,
		`budgetd_decisions_total{limit="l",op="multi_fillup",result="accepted"} 2`,
		`budgetd_decisions_total{limit="l",op="check",result="accepted"} 1`,
		`budgetd_decisions_total{limit="l",op="reserve",result="accepted"} 1`,
		`budgetd_charged_total{limit="l"} 12`,
		`budgetd_idempotent_replays_total{op="fillup"} 1`,
		`budgetd_hold_events_total{kind="reserved"} 1`,
		`budgetd_hold_events_total{kind="committed"} 1`,
		`budgetd_hold_events_total{kind="reservation_closed"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("no %s in the metrics", want)
		}
	}
	if strings.Contains(m, `limit="gone"`) {
		t.Errorf("a deleted limit keeps its series")
	}
	// A limit made again under the deleted one's name counts afresh, in
	// series of its own (not in the deleted ones, which no scrape shows).
	serveReq(h, "PUT", "/v1/limits/gone", `{"capacity":"10","leak":{"amount":"1","per":"1h"}}`)
	serveReq(h, "POST", "/v1/limits/gone/buckets/k/fillup", `{"cost":"3"}`)
	m = scrape(t, h, "")
	for _, want := range []string{
		`budgetd_decisions_total{limit="gone",op="fillup",result="accepted"} 1`,
		`budgetd_charged_total{limit="gone"} 3`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("no %s in the metrics after the limit was made again", want)
		}
	}
	if t.Failed() {
		t.Log(m)
	}
}

// TestNewRequestIDsUnique: ids made at once by many goroutines are all
// different and all of the documented form.
func TestNewRequestIDsUnique(t *testing.T) {
	const goroutines, each = 8, 2000
	ids := make([][]string, goroutines)
	var wg sync.WaitGroup
	for g := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				ids[g] = append(ids[g], budgethttp.NewRequestID())
			}
		}()
	}
	wg.Wait()
	seen := make(map[string]bool, goroutines*each)
	for _, list := range ids {
		for _, id := range list {
			if !generatedID.MatchString(id) || seen[id] {
				t.Fatalf("id %q: malformed or made twice", id)
			}
			seen[id] = true
		}
	}
}

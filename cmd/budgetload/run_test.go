package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
)

func budgetd(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(budgethttp.New(ledger.NewService(memory.New())))
	t.Cleanup(srv.Close)
	return srv
}

func runJSON(t *testing.T, args ...string) (summary, error) {
	t.Helper()
	var out, errs bytes.Buffer
	err := run(context.Background(), append(args, "--json", "--quiet"), &out, &errs)
	var s summary
	if jerr := json.Unmarshal(out.Bytes(), &s); jerr != nil && err == nil {
		t.Fatalf("summary %q: %v (stderr %s)", out.String(), jerr, errs.String())
	}
	return s, err
}

// TestRunAndVerify drives the memory store through the real API, closed and
// open model, spread and hot, with history on, and demands verify: ok.
func TestRunAndVerify(t *testing.T) {
	srv := budgetd(t)
	for _, args := range [][]string{
		{"--keys", "50", "--concurrency", "8"},
		{"--keys", "1", "--concurrency", "4", "--history"},
		{"--keys", "20", "--rate", "400", "--concurrency", "16", "--history", "--mix", "fillup=1,can=1,reserve=1,multi=1"},
	} {
		// A second, so that a busy machine still completes some calls.
		s, err := runJSON(t, append([]string{"--url", srv.URL, "--duration", "1s", "--warmup", "50ms"}, args...)...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if s.Ops == 0 || s.Errors != 0 || s.Verify == nil || !s.Verify.OK || s.Verify.Checked == 0 {
			t.Fatalf("%v: %+v verify %+v", args, s, s.Verify)
		}
		var acc uint64
		for _, o := range s.PerOp {
			acc += o.Accepted
		}
		if acc != s.Ops {
			t.Fatalf("%v: %d accepted of %d with a huge capacity", args, acc, s.Ops)
		}
		// The open model schedules 400 calls in the second: each was either
		// made or reported unsent (a busy machine may fall behind).
		if due := int64(s.Ops) + s.Unsent; s.Model == "open" && (due < 380 || due > 430) {
			t.Fatalf("open model at 400/s for 1s: %d ops + %d unsent", s.Ops, s.Unsent)
		}
	}
}

// TestDenials: with a small capacity most calls are denied, and verify still
// agrees.
func TestDenials(t *testing.T) {
	srv := budgetd(t)
	s, err := runJSON(t, "--url", srv.URL, "--duration", "200ms", "--warmup", "0s", "--keys", "3", "--capacity", "10", "--concurrency", "4", "--history")
	if err != nil {
		t.Fatal(err)
	}
	var denied uint64
	for _, o := range s.PerOp {
		denied += o.Denied
	}
	if denied == 0 || !s.Verify.OK {
		t.Fatalf("%+v verify %+v", s, s.Verify)
	}
}

// TestVerifyCatchesLostCharges: a proxy that answers some fillups 200
// without passing them on makes the levels fall short of what was accepted,
// and one that double-charges makes them exceed it; verify must say so.
func TestVerifyCatchesLostCharges(t *testing.T) {
	srv := budgetd(t)
	for _, mode := range []string{"lose", "double"} {
		var n atomic.Int64
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			fill := strings.HasSuffix(r.URL.Path, "/fillup") && r.URL.Path != "/v1/fillup"
			if fill && n.Add(1)%10 == 0 {
				if mode == "lose" {
					w.WriteHeader(http.StatusOK)
					return
				}
				forward(srv.URL, r, body)
			}
			res := forward(srv.URL, r, body)
			w.WriteHeader(res.code)
			w.Write(res.body)
		}))
		defer proxy.Close()
		_, err := runJSON(t, "--url", proxy.URL, "--duration", "200ms", "--warmup", "0s", "--keys", "5", "--concurrency", "4", "--mix", "fillup=1")
		var ve verifyError
		if !errors.As(err, &ve) || exitCode(err) != 3 {
			t.Fatalf("%s: %v, want a verify failure", mode, err)
		}
	}
}

type answer struct {
	code int
	body []byte
}

func forward(base string, r *http.Request, body []byte) answer {
	req, _ := http.NewRequest(r.Method, base+r.URL.RequestURI(), bytes.NewReader(body))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{502, nil}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return answer{res.StatusCode, b}
}

// TestUnsure: calls whose answers are lost (5xx) widen the check instead of
// failing it.
func TestUnsure(t *testing.T) {
	srv := budgetd(t)
	var n atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		res := forward(srv.URL, r, body)
		if r.Method == http.MethodPost && n.Add(1)%7 == 0 {
			w.WriteHeader(http.StatusBadGateway) // applied, answer lost
			return
		}
		w.WriteHeader(res.code)
		w.Write(res.body)
	}))
	defer proxy.Close()
	s, err := runJSON(t, "--url", proxy.URL, "--duration", "200ms", "--warmup", "0s", "--keys", "5", "--concurrency", "4", "--history")
	if err != nil {
		t.Fatal(err)
	}
	if s.Errors == 0 || s.ErrorKinds["http 502"] == 0 || s.Verify.Unsure == 0 || !s.Verify.OK {
		t.Fatalf("%+v %+v", s, s.Verify)
	}
}

func TestPopulate(t *testing.T) {
	srv := budgetd(t)
	var out, errs bytes.Buffer
	if err := run(context.Background(), []string{"--url", srv.URL, "--populate", "--keys", "300", "--quiet"}, &out, &errs); err != nil {
		t.Fatal(err)
	}
	res, err := http.Get(srv.URL + "/v1/limits/budgetload/buckets/k299")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	// 1, less what leaked since (10^-12 per 315ms).
	if !strings.Contains(string(b), `"level":"1"`) && !strings.Contains(string(b), `"level":"0.99999999`) {
		t.Fatalf("k299 after populate: %s", b)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{"--url", "ftp://x"}, {"--keys", "0"}, {"--mix", "x=1"}, {"--limit", "Bad"}, {"extra"}, {"--nope"}, {"--client", "curl"}} {
		err := run(context.Background(), args, io.Discard, io.Discard)
		if exitCode(err) != 2 {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// TestOpenModelChargesTheQueue: a service that takes 20ms per call, driven
// at 200/s with 2 callers, can answer 100/s. The open model must report the
// latency from the scheduled time (growing far past 20ms), and count what it
// could not send.
func TestOpenModelChargesTheQueue(t *testing.T) {
	srv := budgetd(t)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		res := forward(srv.URL, r, body)
		if r.Method == http.MethodPost {
			time.Sleep(20 * time.Millisecond)
		}
		w.WriteHeader(res.code)
		w.Write(res.body)
	}))
	defer slow.Close()
	s, err := runJSON(t, "--url", slow.URL, "--duration", "500ms", "--warmup", "0s", "--keys", "3", "--rate", "200", "--concurrency", "2", "--mix", "fillup=1")
	if err != nil {
		t.Fatal(err)
	}
	if s.Unsent == 0 || s.Latency.P99 < 100 || !s.Verify.OK {
		t.Fatalf("unsent %d, p99 %.1fms, verify %+v: the queue is hidden", s.Unsent, s.Latency.P99, s.Verify)
	}
}

// TestWindowLimit: --window creates a rolling-window limit whose charges,
// within its length, add up without leaking, and verify agrees.
func TestWindowLimit(t *testing.T) {
	srv := budgetd(t)
	s, err := runJSON(t, "--url", srv.URL, "--duration", "300ms", "--warmup", "0s", "--keys", "10", "--concurrency", "4",
		"--window", "720h", "--limit", "rolling")
	if err != nil {
		t.Fatal(err)
	}
	if s.Ops == 0 || s.Errors != 0 || s.Verify == nil || !s.Verify.OK || s.Verify.MaxLeak != "0.000000000000" {
		t.Fatalf("%+v verify %+v", s, s.Verify)
	}
	res, err := http.Get(srv.URL + "/v1/limits/rolling")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var doc struct {
		Leak   *json.RawMessage `json:"leak"`
		Window struct{ Length, Precision string }
	}
	if err := json.NewDecoder(res.Body).Decode(&doc); err != nil || doc.Leak != nil || doc.Window.Length != "720h" || doc.Window.Precision != "1h" {
		t.Fatalf("limit = %+v, %v", doc, err)
	}
}

// TestPeriodicLimit: --period creates a calendar-period limit, the run's
// charges add up without leaking, and verify still catches a lost charge.
func TestPeriodicLimit(t *testing.T) {
	srv := budgetd(t)
	s, err := runJSON(t, "--url", srv.URL, "--duration", "300ms", "--warmup", "0s", "--keys", "10", "--concurrency", "4",
		"--period", "month", "--tz", "Europe/Berlin", "--limit", "monthly")
	if err != nil {
		t.Fatal(err)
	}
	if s.Ops == 0 || s.Errors != 0 || s.Verify == nil || !s.Verify.OK || s.Verify.MaxLeak != "0.000000000000" {
		t.Fatalf("%+v verify %+v", s, s.Verify)
	}
	res, err := http.Get(srv.URL + "/v1/limits/monthly")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var doc struct {
		Leak   *json.RawMessage `json:"leak"`
		Period struct {
			Every, TZ string
		} `json:"period"`
	}
	if err := json.NewDecoder(res.Body).Decode(&doc); err != nil || doc.Leak != nil || doc.Period.Every != "month" || doc.Period.TZ != "Europe/Berlin" {
		t.Fatalf("limit = %+v, %v", doc, err)
	}

	var n atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.HasSuffix(r.URL.Path, "/fillup") && n.Add(1)%10 == 0 {
			w.WriteHeader(http.StatusOK) // claims a charge it never made
			return
		}
		res := forward(srv.URL, r, body)
		w.WriteHeader(res.code)
		w.Write(res.body)
	}))
	defer proxy.Close()
	_, err = runJSON(t, "--url", proxy.URL, "--duration", "200ms", "--warmup", "0s", "--keys", "5", "--concurrency", "4",
		"--mix", "fillup=1", "--period", "year", "--limit", "yearly")
	var ve verifyError
	if !errors.As(err, &ve) {
		t.Fatalf("%v, want a verify failure", err)
	}
	if _, err := runJSON(t, "--url", srv.URL, "--period", "fortnight"); exitCode(err) != 2 {
		t.Fatalf("--period fortnight: %v, want a usage error", err)
	}
}

// TestThresholdsLimit: --thresholds creates the limit with them, and a run
// whose charges reach the amount threshold emits its crossings.
func TestThresholdsLimit(t *testing.T) {
	srv := budgetd(t)
	s, err := runJSON(t, "--url", srv.URL, "--duration", "300ms", "--warmup", "0s", "--keys", "3", "--concurrency", "2",
		"--mix", "fillup=100", "--thresholds", "50%,80%,2", "--limit", "watched")
	if err != nil {
		t.Fatal(err)
	}
	if s.Ops < 6 || s.Errors != 0 || s.Verify == nil || !s.Verify.OK {
		t.Fatalf("%+v verify %+v", s, s.Verify)
	}
	var doc struct{ Thresholds []string }
	getJSON(t, srv.URL+"/v1/limits/watched", &doc)
	if strings.Join(doc.Thresholds, ",") != "50%,80%,2" {
		t.Fatalf("thresholds %v", doc.Thresholds)
	}
	var events struct {
		Items []struct{ Key, Threshold, Type string }
	}
	getJSON(t, srv.URL+"/v1/events?limit=100", &events)
	crossed := map[string]int{}
	for _, e := range events.Items {
		if e.Type == "threshold.crossed" && e.Threshold == "2" {
			crossed[e.Key]++
		}
	}
	if len(crossed) != 3 || crossed["k0"] != 1 || crossed["k1"] != 1 || crossed["k2"] != 1 {
		t.Fatalf("crossings of 2 by key %v, want each of the 3 keys once (events %+v)", crossed, events.Items)
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// TestOverridesLimit: --overrides puts that many overrides on the limit,
// half exact keys and half prefixes, each load key resolving through one
// (the hot key k0 through its prefix), and the run verifies; a store that
// does not serve overrides makes budgetload exit 4.
func TestOverridesLimit(t *testing.T) {
	srv := budgetd(t)
	s, err := runJSON(t, "--url", srv.URL, "--duration", "300ms", "--warmup", "0s", "--keys", "40", "--concurrency", "4",
		"--mix", "fillup=100", "--overrides", "40", "--limit", "termed")
	if err != nil {
		t.Fatal(err)
	}
	if s.Ops < 1 || s.Errors != 0 || s.Verify == nil || !s.Verify.OK || s.Overrides != 40 || s.OverridesSeconds <= 0 {
		t.Fatalf("%+v verify %+v", s, s.Verify)
	}
	var page struct {
		Items []struct{ Pattern, Capacity string }
	}
	getJSON(t, srv.URL+"/v1/limits/termed/overrides?limit=100", &page)
	if len(page.Items) != 40 {
		t.Fatalf("%d overrides listed, want 40", len(page.Items))
	}
	got := map[string]string{}
	for _, o := range page.Items {
		got[o.Pattern] = o.Capacity
	}
	if got["k0*"] != "1000000000000" || got["k1"] != "1000000000000" || got["k38*"] == "" || got["k39"] == "" || got["k0"] != "" {
		t.Fatalf("overrides %v", got)
	}
	for key, want := range map[string]string{"k0": "k0*", "k7": "k7", "k12": "k12*"} {
		var st struct{ Override *string }
		getJSON(t, srv.URL+"/v1/limits/termed/buckets/"+key, &st)
		if st.Override == nil || *st.Override != want {
			t.Fatalf("bucket %s: override %v, want %s", key, st.Override, want)
		}
	}

	plain := httptest.NewServer(budgethttp.New(ledger.NewService(struct{ ledger.Store }{memory.New()})))
	t.Cleanup(plain.Close)
	if _, err := runJSON(t, "--url", plain.URL, "--duration", "100ms", "--warmup", "0s", "--keys", "2", "--overrides", "4"); exitCode(err) != 4 {
		t.Fatalf("a store without overrides: %v (exit %d), want exit 4", err, exitCode(err))
	}
	if _, err := runJSON(t, "--url", srv.URL, "--overrides", "4", "--setup=false"); exitCode(err) != 2 {
		t.Fatalf("--overrides with --setup=false: %v, want a usage error", err)
	}
}

// TestClients: both clients drive the real API to verify: ok. The raw one
// keeps each caller's connection across calls, and survives a server that
// closes some connections after answering and answers in chunks.
func TestClients(t *testing.T) {
	srv := budgetd(t)
	var n atomic.Int64
	proxy := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		res := forward(srv.URL, r, body)
		switch n.Add(1) % 5 {
		case 0:
			w.Header().Set("Connection", "close")
		case 1:
			w.WriteHeader(res.code)
			w.(http.Flusher).Flush() // no Content-Length: chunked
			w.Write(res.body)
			return
		}
		w.WriteHeader(res.code)
		w.Write(res.body)
	}))
	var conns atomic.Int64
	proxy.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	proxy.Start()
	defer proxy.Close()
	for _, c := range []struct{ url, client string }{{srv.URL, "net/http"}, {srv.URL, "raw"}, {proxy.URL, "raw"}} {
		conns.Store(0)
		s, err := runJSON(t, "--url", c.url, "--client", c.client, "--duration", "300ms", "--warmup", "0s", "--keys", "20",
			"--concurrency", "4", "--history", "--mix", "fillup=1,can=1,reserve=1,multi=1")
		if err != nil {
			t.Fatalf("%s %s: %v", c.client, c.url, err)
		}
		if s.Ops == 0 || s.Errors != 0 || s.Verify == nil || !s.Verify.OK {
			t.Fatalf("%s %s: %+v verify %+v", c.client, c.url, s, s.Verify)
		}
	}
	// One answer in five closes its connection: the raw client dials again
	// after those only.
	if got, reqs := conns.Load(), n.Load(); got < reqs/5 || got > reqs/3 {
		t.Fatalf("%d connections for %d requests", got, reqs)
	}
}

package client_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/client"
)

func newBudgetd(t *testing.T) (*client.Client, *httptest.Server) {
	t.Helper()
	srv, _ := startBudgetd()
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, client.WithRetries(3, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return c, srv
}

func TestEveryCall(t *testing.T) {
	ctx := context.Background()
	c, _ := newBudgetd(t)
	off := false
	l, err := c.PutLimit(ctx, "spend", client.LimitSpec{Capacity: dec("100.50"), Leak: &client.Leak{Amount: dec("10"), Per: time.Hour}, History: &off})
	if err != nil || !l.Capacity.Equal(dec("100.5")) || l.Leak.Per != api.Duration(time.Hour) || l.History {
		t.Fatalf("PutLimit: %+v %v", l, err)
	}
	if _, err := c.PutLimit(ctx, "rows", client.LimitSpec{Capacity: dec("10"), Leak: &client.Leak{Amount: dec("1"), Per: time.Second}}); err != nil {
		t.Fatal(err)
	}
	if l, err := c.GetLimit(ctx, "rows"); err != nil || !l.History || l.Name != "rows" {
		t.Fatalf("GetLimit: %+v %v", l, err)
	}
	ls, next, err := c.ListLimits(ctx, "", 1)
	if err != nil || len(ls) != 1 || ls[0].Name != "rows" || next == "" {
		t.Fatalf("ListLimits: %+v %q %v", ls, next, err)
	}
	if ls, next, err = c.ListLimits(ctx, next, 1); err != nil || len(ls) != 1 || ls[0].Name != "spend" {
		t.Fatalf("ListLimits page 2: %+v %q %v", ls, next, err)
	}

	key := "a/b c" // path-escaped by the client
	if b, err := c.Bucket(ctx, "rows", key); err != nil || b.UpdatedAt != nil || !b.Remaining.Equal(dec("10")) {
		t.Fatalf("Bucket: %+v %v", b, err)
	}
	d, err := c.Fillup(ctx, "rows", key, dec("7"))
	if err != nil || !d.Accepted || !d.Level.Equal(dec("7")) || d.RateLimit == "" || d.RateLimitPolicy == "" {
		t.Fatalf("Fillup: %+v %v", d, err)
	}
	d, err = c.Fillup(ctx, "rows", key, dec("4"))
	if err != nil || d.Accepted || d.RetryAfterDuration() != time.Second || d.RetryAfter.String() != "1" {
		t.Fatalf("denied Fillup: %+v %v", d, err)
	}
	if d, err = c.CanAccept(ctx, "rows", key, dec("11")); err != nil || !d.NeverFits || d.RetryAfter != nil {
		t.Fatalf("CanAccept: %+v %v", d, err)
	}
	m, err := c.FillupMany(ctx, []client.Item{{Limit: "rows", Key: key, Cost: dec("3")}, {Limit: "spend", Key: "t", Cost: dec("100")}})
	if err != nil || !m.Accepted || len(m.Items) != 2 || m.Items[1].Key != "t" || !m.Items[0].Remaining.IsZero() {
		t.Fatalf("FillupMany: %+v %v", m, err)
	}
	m, err = c.FillupMany(ctx, []client.Item{{Limit: "rows", Key: key, Cost: dec("2")}, {Limit: "spend", Key: "t", Cost: dec("0.5")}})
	if err != nil || m.Accepted || m.Items[0].Accepted || !m.Items[1].Accepted || m.RetryAfter != 2*time.Second {
		t.Fatalf("denied FillupMany: %+v %v", m, err)
	}
	dr, err := c.Drain(ctx, "rows", key, dec("4"))
	if err != nil || !dr.Removed.Equal(dec("4")) || !dr.Level.Equal(dec("6")) {
		t.Fatalf("Drain: %+v %v", dr, err)
	}
	hold, d, err := c.Reserve(ctx, "rows", key, dec("3"), time.Minute)
	if err != nil || !d.Accepted || hold == nil || hold.State != "active" || !d.Held.Equal(dec("3")) {
		t.Fatalf("Reserve: %+v %+v %v", hold, d, err)
	}
	if h, d, err := c.Reserve(ctx, "rows", key, dec("2"), 0); err != nil || h != nil || d.Accepted {
		t.Fatalf("denied Reserve: %+v %+v %v", h, d, err)
	}
	if r, err := c.Reservation(ctx, hold.ID); err != nil || r.ID != hold.ID || r.Key != key {
		t.Fatalf("Reservation: %+v %v", r, err)
	}
	two := dec("2")
	res, err := c.Commit(ctx, hold.ID, &two, false)
	if err != nil || res.Reservation.State != "committed" || !res.Reservation.CommittedAmount.Equal(two) || !res.Bucket.Level.Equal(dec("8")) {
		t.Fatalf("Commit: %+v %v", res, err)
	}
	if _, err := c.Release(ctx, hold.ID); !client.IsCode(err, "reservation_closed") {
		t.Fatalf("Release after commit: %v", err)
	}
	es, _, err := c.History(ctx, "rows", key, "", 10)
	if err != nil || len(es) != 5 || es[0].Event != "committed" || es[len(es)-1].Event != "fillup" {
		t.Fatalf("History: %+v %v", es, err)
	}
	if err := c.DeleteLimit(ctx, "rows"); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetLimit(ctx, "rows")
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 404 || e.Code != "limit_not_found" {
		t.Fatalf("GetLimit after delete: %v", err)
	}
}

// Problems carry budgetd's code, field, status and detail.
func TestProblems(t *testing.T) {
	ctx := context.Background()
	c, _ := newBudgetd(t)
	_, err := c.PutLimit(ctx, "rows", client.LimitSpec{Capacity: dec("10"), Period: &client.Period{Every: api.Month, TZ: "Mars/Olympus_Mons"}})
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 400 || e.Code != api.CodeInvalidRequest || e.Field != "period.tz" || e.Detail == "" {
		t.Fatalf("bad tz: %#v", err)
	}
	_, err = c.FillupMany(ctx, []client.Item{{Limit: "nope", Key: "k", Cost: dec("1")}})
	if !client.IsCode(err, "limit_not_found") {
		t.Fatalf("unknown limit: %v", err)
	}
	if _, err = c.Fillup(ctx, "rows", strings.Repeat("k", 300), dec("1")); !client.IsCode(err, "invalid_key") {
		t.Fatalf("long key: %v", err)
	}
}

// Amounts budgetd would refuse, or that cannot be written exactly, are
// refused before anything is sent.
func TestAmountsRefusedBeforeSending(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	defer srv.Close()
	c, _ := client.New(srv.URL)
	ctx := context.Background()
	for _, s := range []string{"-1", "0.0000001", "1000000000000.000001", "1000000000001", "1e13"} {
		_, err := c.Fillup(ctx, "l", "k", dec(s))
		var e *client.Error
		if !errors.As(err, &e) || e.Code != "invalid_amount" || e.Field != "cost" || e.Status != 0 {
			t.Errorf("%s: %v", s, err)
		}
	}
	if _, _, err := c.Reserve(ctx, "l", "k", dec("0.1234567"), 0); !client.IsCode(err, "invalid_amount") {
		t.Errorf("Reserve: %v", err)
	}
	if _, err := c.FillupMany(ctx, []client.Item{{Limit: "l", Key: "k", Cost: dec("1")}, {Limit: "l", Key: "k", Cost: dec("-2")}}); err == nil || !strings.Contains(err.Error(), "items[1].cost") {
		t.Errorf("FillupMany: %v", err)
	}
	if calls.Load() != 0 {
		t.Fatalf("%d requests sent", calls.Load())
	}
	if _, err := c.Fillup(ctx, "l", "k", dec("1000000000000")); err == nil || calls.Load() != 1 {
		t.Fatalf("10^12 was not sent")
	}
}

// A state-changing call that meets 503s and broken connections is retried
// with one Idempotency-Key, so budgetd charges it once.
func TestRetriesReuseTheIdempotencyKey(t *testing.T) {
	ctx := context.Background()
	real, _ := startBudgetd()
	defer real.Close()
	target, _ := url.Parse(real.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	var keys []string
	tries := 0
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if r.Method == http.MethodPost {
			keys = append(keys, r.Header.Get("Idempotency-Key"))
			tries++
		}
		n := tries
		mu.Unlock()
		switch {
		case r.Method == http.MethodPost && n == 1:
			proxy.ServeHTTP(httptest.NewRecorder(), r) // charged, but the answer is lost
			http.Error(w, `{"code":"store_unavailable"}`, http.StatusServiceUnavailable)
		case r.Method == http.MethodPost && n == 2:
			r.Body.Close()
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			conn.Close() // a network error
		default:
			proxy.ServeHTTP(w, r)
		}
	}))
	defer front.Close()
	c, _ := client.New(front.URL, client.WithRetries(4, time.Millisecond))
	if _, err := c.PutLimit(ctx, "rows", client.LimitSpec{Capacity: dec("10"), Leak: &client.Leak{Amount: dec("1"), Per: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	d, err := c.Fillup(ctx, "rows", "k", dec("4"))
	if err != nil || !d.Accepted || !d.Level.Equal(dec("4")) {
		t.Fatalf("Fillup: %+v %v", d, err)
	}
	if len(keys) != 3 || keys[0] == "" || keys[0] != keys[1] || keys[1] != keys[2] {
		t.Fatalf("Idempotency-Keys %q", keys)
	}
	b, _ := c.Bucket(ctx, "rows", "k")
	if !b.Level.Equal(dec("4")) {
		t.Fatalf("charged %s, want once", b.Level)
	}
	// A second call has its own key.
	c.Fillup(ctx, "rows", "k", dec("1"))
	if keys[3] == keys[0] {
		t.Fatalf("a new call reused key %q", keys[0])
	}
}

// Retries are bounded, and a context ends them.
func TestRetriesAreBounded(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(503)
		io.WriteString(w, `{"status":503,"code":"store_unavailable","detail":"the store did not answer"}`)
	}))
	defer srv.Close()
	c, _ := client.New(srv.URL, client.WithRetries(3, time.Millisecond))
	_, err := c.Fillup(context.Background(), "l", "k", dec("1"))
	if !client.IsCode(err, "store_unavailable") || !client.IsUnavailable(err) || calls.Load() != 3 {
		t.Fatalf("%v after %d calls", err, calls.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Fillup(ctx, "l", "k", dec("1")); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
}

// The token goes out as a bearer token, over TLS with a private CA.
func TestTokenAndTLS(t *testing.T) {
	var auth string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(403)
		io.WriteString(w, `{"status":403,"code":"forbidden","detail":"the key may not read limit x"}`)
	}))
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	c, _ := client.New(srv.URL, client.WithToken("s3cret"), client.WithTLSConfig(&tls.Config{RootCAs: pool}))
	_, err := c.GetLimit(context.Background(), "x")
	if !client.IsCode(err, "forbidden") || auth != "Bearer s3cret" {
		t.Fatalf("%v, Authorization %q", err, auth)
	}
	plain, _ := client.New(srv.URL)
	if _, err := plain.GetLimit(context.Background(), "x"); err == nil || client.IsCode(err, "forbidden") {
		t.Fatalf("an unknown CA was trusted: %v", err)
	}
}

// The listing endpoints of "Seeing the spend" are read as SPEC writes them.
func TestListings(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.EscapedPath() {
		case "/v1/limits/rows/buckets":
			if r.URL.Query().Get("cursor") != "c1" || r.URL.Query().Get("limit") != "2" {
				http.Error(w, "bad query "+r.URL.RawQuery, 400)
				return
			}
			io.WriteString(w, `{"items":[{"key":"a/b","level":"1.5","held":"2","remaining":"6.5","capacity":"10","updated_at":"2026-01-02T03:04:05.000006Z","period_start":null,"resets_at":null,"override":null,"grants":"0","rollover":"0"}],"next_cursor":"c2"}`)
		case "/v1/limits/rows/buckets/a%2Fb/reservations":
			io.WriteString(w, `{"items":[{"id":"h1","limit":"rows","key":"a/b","state":"active","amount":"2","committed_amount":null,"created_at":"2026-01-02T03:04:05.000006Z","expires_at":"2026-01-02T03:14:05.000006Z","resolved_at":null}]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c, _ := client.New(srv.URL)
	bs, next, err := c.ListBuckets(context.Background(), "rows", "c1", 2)
	if err != nil || len(bs) != 1 || bs[0].Key != "a/b" || !bs[0].Held.Equal(dec("2")) || bs[0].UpdatedAt.Nanosecond() != 6000 || next != "c2" {
		t.Fatalf("ListBuckets: %+v %q %v", bs, next, err)
	}
	hs, err := c.Holds(context.Background(), "rows", "a/b")
	if err != nil || len(hs) != 1 || hs[0].ID != "h1" || hs[0].ExpiresAt.Sub(hs[0].CreatedAt.Time) != 10*time.Minute {
		t.Fatalf("Holds: %+v %v", hs, err)
	}
}

// TestMeta: what a call says of itself with client.Meta comes back on its
// history entry, and bad meta is a typed problem naming the field.
func TestMeta(t *testing.T) {
	c, _ := newBudgetd(t)
	ctx := context.Background()
	on := true
	if _, err := c.PutLimit(ctx, "spend", client.LimitSpec{Capacity: dec("100"), Leak: &client.Leak{Amount: dec("1"), Per: time.Hour}, History: &on}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fillup(ctx, "spend", "team", dec("3"), client.Meta(map[string]string{"order": "A-1042"})); err != nil {
		t.Fatal(err)
	}
	hold, _, err := c.Reserve(ctx, "spend", "team", dec("5"), time.Minute, client.Meta(map[string]string{"job": "import"}))
	if err != nil || hold == nil {
		t.Fatalf("Reserve: %+v %v", hold, err)
	}
	if _, err := c.Commit(ctx, hold.ID, nil, false, client.Meta(map[string]string{"rows": "5000"})); err != nil {
		t.Fatal(err)
	}
	es, _, err := c.History(ctx, "spend", "team", "", 10)
	if err != nil || len(es) != 3 || es[0].Meta["rows"] != "5000" || es[1].Meta["job"] != "import" || es[2].Meta["order"] != "A-1042" {
		t.Fatalf("History: %+v %v", es, err)
	}
	_, err = c.Fillup(ctx, "spend", "team", dec("1"), client.Meta(map[string]string{"Order": "x"}))
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 0 || e.Code != "invalid_request" || e.Field != "meta" {
		t.Fatalf("bad meta: %v", err)
	}
}

// TestModes: the client writes a limit's mode and grace, reads them back,
// and reads the marks of decisions taken above capacity.
func TestModes(t *testing.T) {
	ctx := context.Background()
	c, _ := newBudgetd(t)
	grace := dec("12.5")
	l, err := c.PutLimit(ctx, "soft", client.LimitSpec{Capacity: dec("100"), Leak: &client.Leak{Amount: dec("1"), Per: time.Hour}, Mode: api.ModeSoft, Grace: &grace})
	if err != nil || l.Mode != api.ModeSoft || l.Grace == nil || !l.Grace.Value.Equal(grace) {
		t.Fatalf("PutLimit soft: %+v %v", l, err)
	}
	if d, err := c.Fillup(ctx, "soft", "k", dec("112.5")); err != nil || !d.Accepted || !d.OverCapacity || d.ShadowDenied {
		t.Fatalf("Fillup within the grace: %+v %v", d, err)
	}
	if l, err = c.PutLimit(ctx, "shadow", client.LimitSpec{Capacity: dec("1"), Leak: &client.Leak{Amount: dec("1"), Per: time.Hour}, Mode: api.ModeShadow}); err != nil || l.Mode != api.ModeShadow || l.Grace != nil {
		t.Fatalf("PutLimit shadow: %+v %v", l, err)
	}
	if d, err := c.CanAccept(ctx, "shadow", "k", dec("2")); err != nil || !d.Accepted || !d.ShadowDenied {
		t.Fatalf("CanAccept over the cap: %+v %v", d, err)
	}
	var e *client.Error
	if _, err := c.PutLimit(ctx, "bad", client.LimitSpec{Capacity: dec("1"), Leak: &client.Leak{Amount: dec("1"), Per: time.Hour}, Grace: &grace}); !errors.As(err, &e) || e.Field != "grace" {
		t.Fatalf("grace without soft: %v", err)
	}
}

// TestEvents: thresholds written by the client come back on the limit, and
// the events of a crossing are read with Events and AllEvents, each once.
func TestEvents(t *testing.T) {
	ctx := context.Background()
	c, _ := newBudgetd(t)
	l, err := c.PutLimit(ctx, "cap", client.LimitSpec{Capacity: dec("100"), Period: &client.Period{Every: api.Month}, Thresholds: []string{"50%", "90"}})
	if err != nil || strings.Join(l.Thresholds, ",") != "50%,90" {
		t.Fatalf("PutLimit: %+v %v", l, err)
	}
	if _, err := c.Fillup(ctx, "cap", "k", dec("95")); err != nil {
		t.Fatal(err)
	}
	page, next, err := c.Events(ctx, "", 1)
	if err != nil || len(page) != 1 || page[0].Threshold != "50%" || page[0].Type != api.EventThresholdCrossed || !page[0].Used.Equal(dec("95")) || page[0].PeriodStart == nil {
		t.Fatalf("Events: %+v %q %v", page, next, err)
	}
	var rest []string
	for e, err := range c.AllEvents(ctx, next) {
		if err != nil {
			t.Fatal(err)
		}
		rest = append(rest, e.Threshold)
	}
	if strings.Join(rest, ",") != "90" {
		t.Fatalf("AllEvents after the first: %v", rest)
	}
	if _, err := c.PutLimit(ctx, "bad", client.LimitSpec{Capacity: dec("1"), Period: &client.Period{Every: api.Month}, Thresholds: []string{"300%"}}); err == nil {
		t.Fatal("a threshold of 300% was taken")
	}
}

// TestWrongShape: a 200 that is JSON but not budgetd's document (a proxy's
// {}, another service's answer, a page of empty items) is an answer not
// understood (ErrBadAnswer), not zero values: an empty bucket or a limit of
// capacity 0 would be read as budgetd's word.
func TestWrongShape(t *testing.T) {
	body := ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	}))
	defer srv.Close()
	c, _ := client.New(srv.URL)
	ctx := context.Background()
	calls := map[string]func() error{
		"Bucket":     func() error { _, err := c.Bucket(ctx, "spend", "k"); return err },
		"Fillup":     func() error { _, err := c.Fillup(ctx, "spend", "k", dec("1")); return err },
		"GetLimit":   func() error { _, err := c.GetLimit(ctx, "spend"); return err },
		"ListLimits": func() error { _, _, err := c.ListLimits(ctx, "", 0); return err },
		"Drain":      func() error { _, err := c.Drain(ctx, "spend", "k", dec("1")); return err },
	}
	for _, b := range []string{`{}`, `{"status":"ok"}`, `null`, `{"items":[{}],"next_cursor":null}`, `{"level":"1","held":"0","remaining":"9","capacity":"10"}`} {
		body = b
		for name, call := range calls {
			if err := call(); !errors.Is(err, client.ErrBadAnswer) {
				t.Errorf("%s answered %s: %v, want ErrBadAnswer", name, b, err)
			}
		}
	}
}

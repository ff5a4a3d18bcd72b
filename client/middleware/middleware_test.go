package middleware_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/budgetd/budgetd/client"
	"github.com/budgetd/budgetd/client/middleware"
	"github.com/budgetd/budgetd/client/middleware/echomw"
	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/labstack/echo/v4"
	"github.com/shopspring/decimal"
)

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

// budgetd starts an in-process budgetd (memory store, clock standing still)
// with the limits "user" (capacity 3) and "global" (capacity 5), both
// leaking 1 per second.
func budgetd(t *testing.T) *client.Client {
	t.Helper()
	clock := ledgertest.NewClock()
	srv := httptest.NewServer(budgethttp.New(ledger.NewService(memory.New(memory.WithClock(clock.Now)))))
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, client.WithRetries(2, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for name, capacity := range map[string]string{"user": "3", "global": "5"} {
		if _, err := c.PutLimit(context.Background(), name, client.LimitSpec{Capacity: dec(capacity), Leak: &client.Leak{Amount: dec("1"), Per: time.Second}}); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// perUser charges 1 to the caller's user bucket and 1 to the global one.
func perUser(r *http.Request) ([]client.Item, error) {
	u := r.Header.Get("X-User")
	if u == "" {
		return nil, middleware.BadRequest(errors.New("no X-User"))
	}
	if r.URL.Path == "/free" {
		return nil, nil
	}
	return []client.Item{{Limit: "user", Key: u, Cost: dec("1")}, {Limit: "global", Key: "all", Cost: dec("1")}}, nil
}

func get(t *testing.T, h http.Handler, path, user string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest("GET", path, nil)
	if user != "" {
		req.Header.Set("X-User", user)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "done") })

func TestNetHTTP(t *testing.T) {
	c := budgetd(t)
	var errs []error
	l := middleware.New(c, perUser, middleware.OnError(func(_ *http.Request, err error) { errs = append(errs, err) }))
	h := l.Handler(ok)
	for i := 0; i < 3; i++ {
		w := get(t, h, "/x", "ann")
		if w.Code != 200 || w.Body.String() != "done" || !strings.Contains(w.Header().Get("RateLimit"), `"user";r=`) {
			t.Fatalf("call %d: %d %q %v", i, w.Code, w.Body, w.Header())
		}
	}
	w := get(t, h, "/x", "ann") // ann's bucket is full
	if w.Code != 429 || w.Header().Get("Retry-After") != "1" || w.Header().Get("RateLimit") != `"user";r=0;t=1, "global";r=2;t=3` ||
		w.Header().Get("RateLimit-Policy") != `"user";q=3;w=3, "global";q=5;w=5` || strings.Contains(w.Body.String(), "accepted") {
		t.Fatalf("denial: %d %v %s", w.Code, w.Header(), w.Body)
	}
	get(t, h, "/x", "bob")
	get(t, h, "/x", "bob")
	if w := get(t, h, "/x", "cy"); w.Code != 429 { // the global bucket is full: nothing charged to cy
		t.Fatalf("global: %d", w.Code)
	}
	if b, _ := c.Bucket(context.Background(), "user", "cy"); !b.Level.IsZero() {
		t.Fatalf("cy was charged %s", b.Level)
	}
	if w := get(t, h, "/free", "cy"); w.Code != 200 {
		t.Fatalf("a request without items: %d", w.Code)
	}
	if w := get(t, h, "/x", ""); w.Code != 400 || strings.Contains(w.Body.String(), "X-User") {
		t.Fatalf("ItemsFunc error: %d %s", w.Code, w.Body)
	}
	want := middleware.Counts{Allowed: 5, Denied: 2, BadRequest: 1}
	if got := l.Counts(); got != want || len(errs) != 1 {
		t.Fatalf("counts %+v, want %+v; errors %v", got, want, errs)
	}
}

// budgetd's problems (here an unknown limit) reach OnError, never the end
// user.
func TestProblemsDoNotLeak(t *testing.T) {
	c := budgetd(t)
	var got error
	l := middleware.New(c, func(*http.Request) ([]client.Item, error) {
		return []client.Item{{Limit: "missing", Key: "k", Cost: dec("1")}}, nil
	}, middleware.OnError(func(_ *http.Request, err error) { got = err }))
	w := get(t, l.Handler(ok), "/", "")
	if w.Code != 503 || strings.Contains(w.Body.String(), "missing") || strings.Contains(w.Body.String(), "limit_not_found") {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if !client.IsCode(got, "limit_not_found") || l.Counts().FailedClosed != 1 {
		t.Fatalf("OnError got %v; counts %+v", got, l.Counts())
	}
}

// A budgetd that hangs gives the fail mode within the configured timeout.
func TestHungBudgetd(t *testing.T) {
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hung.Close)
	t.Cleanup(func() { close(release) })
	c, _ := client.New(hung.URL)
	items := func(*http.Request) ([]client.Item, error) {
		return []client.Item{{Limit: "user", Key: "k", Cost: dec("1")}}, nil
	}
	const timeout = 200 * time.Millisecond
	for _, mode := range []string{"closed", "open"} {
		opts := []middleware.Option{middleware.Timeout(timeout)}
		if mode == "open" {
			opts = append(opts, middleware.FailOpen())
		}
		l := middleware.New(c, items, opts...)
		start := time.Now()
		w := get(t, l.Handler(ok), "/", "")
		took := time.Since(start)
		want := map[string]int{"closed": 503, "open": 200}[mode]
		if w.Code != want || took < timeout || took > timeout+5*time.Second {
			t.Fatalf("fail %s: %d after %s", mode, w.Code, took)
		}
		n := l.Counts()
		if (mode == "closed" && n.FailedClosed != 1) || (mode == "open" && n.FailedOpen != 1) {
			t.Fatalf("fail %s: counts %+v", mode, n)
		}
	}
}

func TestEcho(t *testing.T) {
	c := budgetd(t)
	l := middleware.New(c, perUser)
	e := echo.New()
	e.GET("/x", func(c echo.Context) error { return c.String(200, "done") }, echomw.Charge(l))
	for i, want := range []int{200, 200, 200, 429} {
		if w := get(t, e, "/x", "ann"); w.Code != want {
			t.Fatalf("call %d: %d", i, w.Code)
		}
	}
	if w := get(t, e, "/x", "ann"); w.Header().Get("Retry-After") != "1" || w.Header().Get("RateLimit") == "" {
		t.Fatalf("echo denial headers: %v", w.Header())
	}
}

// The response-cost variant commits what the handler reports and releases
// the hold when the handler fails or panics.
func TestReserve(t *testing.T) {
	c := budgetd(t)
	ctx := context.Background()
	l := middleware.New(c, func(r *http.Request) ([]client.Item, error) {
		return []client.Item{{Limit: "user", Key: r.Header.Get("X-User"), Cost: dec("2")}}, nil
	}, middleware.HoldTTL(time.Minute))
	var mu sync.Mutex
	var held decimal.Decimal
	h := l.ReserveHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := c.Bucket(ctx, "user", r.Header.Get("X-User"))
		mu.Lock()
		held = b.Held
		mu.Unlock()
		switch r.URL.Path {
		case "/cost":
			middleware.ReportCost(r.Context(), dec("0.37"))
		case "/fail":
			w.WriteHeader(500)
		case "/panic":
			panic("handler broke")
		}
	}))
	if w := get(t, h, "/cost", "ann"); w.Code != 200 || !held.Equal(dec("2")) {
		t.Fatalf("reserve: %d, held during the handler %s", w.Code, held)
	}
	if b, _ := c.Bucket(ctx, "user", "ann"); !b.Level.Equal(dec("0.37")) || !b.Held.IsZero() {
		t.Fatalf("after commit: level %s held %s", b.Level, b.Held)
	}
	get(t, h, "/estimate", "bob") // no report: the estimate is committed
	if b, _ := c.Bucket(ctx, "user", "bob"); !b.Level.Equal(dec("2")) {
		t.Fatalf("estimate: level %s", b.Level)
	}
	get(t, h, "/fail", "cy")
	func() {
		defer func() { recover() }()
		get(t, h, "/panic", "cy")
	}()
	if b, _ := c.Bucket(ctx, "user", "cy"); !b.Level.IsZero() || !b.Held.IsZero() {
		t.Fatalf("after failures: level %s held %s", b.Level, b.Held)
	}
	get(t, h, "/estimate", "dan")
	if w := get(t, h, "/estimate", "dan"); w.Code != 429 || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("reserve denial: %d %v", w.Code, w.Header())
	}

	e := echo.New()
	e.GET("/err", func(echo.Context) error { return errors.New("broken") }, echomw.Reserve(l))
	get(t, e, "/err", "eve")
	if b, _ := c.Bucket(ctx, "user", "eve"); !b.Held.IsZero() || !b.Level.IsZero() {
		t.Fatalf("echo error: level %s held %s", b.Level, b.Held)
	}
	if n := l.Counts(); n.Allowed != 6 || n.Denied != 1 || n.CommitFailed != 0 {
		t.Fatalf("counts %+v", n)
	}
}

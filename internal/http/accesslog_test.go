package http_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
)

// slogLine is the line slog wrote for a request before the access log
// formatted its own: the attributes observe passed to LogAttrs, through
// the process's handler.
func slogLine(t testing.TB, format budgethttp.AccessFormat, at time.Time, method, route string, status int, d time.Duration, requestID any, key, path string, withPath bool) string {
	var buf bytes.Buffer
	var h slog.Handler = slog.NewTextHandler(&buf, nil)
	if format == budgethttp.AccessJSON {
		// As budgetd's loggers write a duration: with its unit.
		h = slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Value.Kind() == slog.KindDuration {
				return slog.String(a.Key, a.Value.Duration().String())
			}
			return a
		}})
	}
	r := slog.NewRecord(at, slog.LevelInfo, "request", 0)
	r.AddAttrs(slog.String("method", method), slog.String("route", route), slog.Int("status", status),
		slog.Duration("duration", d), slog.Any("request_id", requestID), slog.String("key", key))
	if withPath {
		r.AddAttrs(slog.String("path", path))
	}
	if err := h.Handle(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// accessLine is the line the access log writes for the same fields.
func accessLine(t testing.TB, format budgethttp.AccessFormat, at time.Time, method, route string, status int, d time.Duration, requestID any, key, path string, withPath bool) string {
	var buf bytes.Buffer
	a := budgethttp.NewAccessLog(&buf, format)
	a.Log(budgethttp.NewAccessLine(at, method, route, status, d, requestID, key, path, withPath))
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

var accessFormats = []struct {
	name   string
	format budgethttp.AccessFormat
}{{"text", budgethttp.AccessText}, {"json", budgethttp.AccessJSON}}

// TestAccessLineIsSlogs: a line is byte for byte what slog's text and JSON
// handlers wrote for the same request, quoting and escaping included.
func TestAccessLineIsSlogs(t *testing.T) {
	berlin := time.FixedZone("CET", 3600)
	times := []time.Time{
		time.Date(2026, 11, 25, 16, 9, 52, 123456789, time.UTC),
		time.Date(2026, 11, 25, 16, 9, 52, 0, berlin),
		time.Date(2026, 1, 2, 3, 4, 5, 100000, berlin),
		time.Date(2026, 1, 2, 3, 4, 5, 999999999, time.Local),
	}
	strs := []string{"", "-", "ops", "team svc", "a=b", `say "hi"`, `back\slash`, "tab\there", "nl\nx", "\x00\x1f\x7f",
		"ünïcödé", "GETGETGETGETGETG…", "line\u2028sep\u2029", "bad\xffutf8", "<script>&", "\u00a0nbsp", "/v1/limits/:name/buckets/:key/fillup"}
	durations := []time.Duration{0, 1, 999, 1500, 1234567, 2*time.Second + 3*time.Millisecond, 90 * time.Minute}
	for _, f := range accessFormats {
		t.Run(f.name, func(t *testing.T) {
			n := 0
			check := func(at time.Time, method, route string, status int, d time.Duration, id any, key, path string, withPath bool) {
				t.Helper()
				want := slogLine(t, f.format, at, method, route, status, d, id, key, path, withPath)
				if got := accessLine(t, f.format, at, method, route, status, d, id, key, path, withPath); got != want {
					t.Errorf("line\n got %q\nwant %q", got, want)
				}
				n++
			}
			for i, s := range strs {
				at, d := times[i%len(times)], durations[i%len(durations)]
				check(at, s, "/v1/limits/:name", 200, d, "abc", "ops", "", false)
				check(at, "POST", s, 404, d, "abc", "ops", "", false)
				check(at, "GET", "other", 503, d, s, "ops", "", false)
				check(at, "GET", "other", 100+i, d, "0123456789abcdef01234567", s, "", false)
				check(at, "GET", "other", 599, d, "id", "-", s, true)
			}
			for _, at := range times {
				for _, d := range durations {
					check(at, "HEAD", "/healthz", 200, d, nil, "-", "/healthz", true)
				}
			}
			if n == 0 {
				t.Fatal("nothing compared")
			}
		})
	}
}

// TestAccessLogTimeAcrossSeconds: one access log keeps the text time of
// the latest second; lines in the same second, in the next one, back in an
// earlier one, in another location, across a daylight-saving change and
// before 1970 are still slog's, also when goroutines log them at once.
func TestAccessLogTimeAcrossSeconds(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	cet := time.FixedZone("CET", 3600)
	base := time.Date(2026, 11, 25, 16, 9, 52, 0, time.UTC)
	dst := time.Date(2026, 10, 25, 0, 59, 59, 998_000_000, time.UTC) // Berlin goes from +02:00 to +01:00 at 01:00 UTC
	var times []time.Time
	for _, d := range []time.Duration{0, 1, 999_999, time.Millisecond, 123_456_789, 999_999_999, time.Second, time.Second + 5*time.Millisecond, 0, 61 * time.Second} {
		times = append(times, base.Add(d))
	}
	times = append(times, base.In(cet), base.Add(time.Millisecond).In(cet), base.Add(2*time.Millisecond), base.In(time.Local), base.In(berlin))
	for d := time.Duration(0); d < 4*time.Millisecond; d += time.Millisecond / 2 {
		times = append(times, dst.Add(d).In(berlin))
	}
	times = append(times, time.Date(1969, 12, 31, 23, 59, 59, 500_000_000, time.UTC), time.Date(1969, 12, 31, 23, 59, 59, 999_000_000, time.UTC),
		time.Date(1960, 1, 1, 0, 0, 0, 7_000_000, cet))

	var want strings.Builder
	for _, at := range times {
		want.WriteString(slogLine(t, budgethttp.AccessText, at, "POST", "/v1/fillup", 200, time.Millisecond, "id", "-", "", false))
	}
	var buf bytes.Buffer
	a := budgethttp.NewAccessLog(&buf, budgethttp.AccessText)
	for _, at := range times {
		a.Log(budgethttp.NewAccessLine(at, "POST", "/v1/fillup", 200, time.Millisecond, "id", "-", "", false))
	}
	a.Flush()
	if buf.String() != want.String() {
		t.Fatalf("lines\n got %s\nwant %s", buf.String(), want.String())
	}

	// Concurrently: every line is slog's for its own time, whichever
	// second the shared stamp holds when it is written.
	buf.Reset()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				at := base.Add(time.Duration(g*200+i) * 7 * time.Millisecond)
				if i%3 == 0 {
					at = at.In(cet)
				}
				a.Log(budgethttp.NewAccessLine(at, "GET", "/healthz", 200, 0, nil, "-", "", false))
			}
		}()
	}
	wg.Wait()
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	wantSet := map[string]bool{}
	for g := range 4 {
		for i := range 200 {
			at := base.Add(time.Duration(g*200+i) * 7 * time.Millisecond)
			if i%3 == 0 {
				at = at.In(cet)
			}
			wantSet[strings.TrimSuffix(slogLine(t, budgethttp.AccessText, at, "GET", "/healthz", 200, 0, nil, "-", "", false), "\n")] = true
		}
	}
	if len(got) != 800 {
		t.Fatalf("%d lines, want 800", len(got))
	}
	for _, l := range got {
		if !wantSet[l] {
			t.Errorf("line %q is not slog's for any time logged", l)
		}
	}
}

// FuzzAccessLine compares the access log's text and JSON lines with slog's
// for any strings.
func FuzzAccessLine(f *testing.F) {
	f.Add("POST", "/v1/fillup", "req-1", "ops", "/v1/fillup", int64(1234567))
	f.Add("", "a b", "x=\"y\"", "\u2028", "\xff", int64(-5))
	f.Fuzz(func(t *testing.T, method, route, id, key, path string, d int64) {
		at := time.Date(2026, 11, 25, 16, 9, 52, 123456789, time.UTC)
		for _, fm := range accessFormats {
			want := slogLine(t, fm.format, at, method, route, 200, time.Duration(d), id, key, path, true)
			if got := accessLine(t, fm.format, at, method, route, 200, time.Duration(d), id, key, path, true); got != want {
				t.Errorf("%s line\n got %q\nwant %q", fm.name, got, want)
			}
		}
	})
}

// stuckWriter blocks every Write until released, and says when the first
// Write has begun.
type stuckWriter struct {
	entered chan struct{} // closed at the first Write
	release chan struct{} // close to let writes through
	once    sync.Once
	mu      sync.Mutex
	b       bytes.Buffer
}

func newStuckWriter() *stuckWriter {
	return &stuckWriter{entered: make(chan struct{}), release: make(chan struct{})}
}

func (w *stuckWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.entered) })
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *stuckWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// waitFor fails t unless ch is closed within d.
func waitFor(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s did not happen within %v", what, d)
	}
}

// TestAccessLogNeverBlocksRequests: while stderr does not return, requests
// are still answered, the lines that do not fit are dropped and counted in
// budgetd_access_log_dropped_total, and those that fit are written once
// the writer moves again.
func TestAccessLogNeverBlocksRequests(t *testing.T) {
	w := newStuckWriter()
	access := budgethttp.NewAccessLogLimit(w, budgethttp.AccessText, 4096)
	h := budgethttp.New(ledger.NewService(memory.New()), quiet, budgethttp.WithAccessLog(access))
	if rec := serveReq(h, "GET", "/healthz", ""); rec.Code != 200 {
		t.Fatalf("healthz: %d", rec.Code)
	}
	waitFor(t, w.entered, 10*time.Second, "the first write")

	const n = 200 // about 30 lines fit in 4096 bytes
	served := make(chan struct{})
	go func() {
		defer close(served)
		for i := range n {
			if rec := serveReq(h, "GET", "/healthz", ""); rec.Code != 200 {
				t.Errorf("healthz %d: %d", i, rec.Code)
				return
			}
		}
	}()
	waitFor(t, served, 20*time.Second, strconv.Itoa(n)+" requests while stderr is stuck")
	dropped := access.Dropped()
	if dropped < n/2 || dropped > n {
		t.Fatalf("dropped %v lines of %d with room for about 30", dropped, n)
	}
	metrics := serveReq(h, "GET", "/metrics", "").Body.String()
	if want := "budgetd_access_log_dropped_total " + strconv.FormatFloat(dropped, 'g', -1, 64); !strings.Contains(metrics, want) {
		t.Errorf("no %q in /metrics", want)
	}

	close(w.release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := access.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The first line and the lines that fit, the /metrics request's
	// included if it did.
	dropped = access.Dropped()
	if got, want := strings.Count(w.String(), "msg=request"), 1+n+1-int(dropped); got != want {
		t.Errorf("%d lines written, want %d (%v dropped)", got, want, dropped)
	}
}

// TestAccessLogCloseWritesEveryLine: lines still queued when budgetd shuts
// down are written by Close, in order, once the writer moves.
func TestAccessLogCloseWritesEveryLine(t *testing.T) {
	w := newStuckWriter()
	access := budgethttp.NewAccessLog(w, budgethttp.AccessJSON)
	at := time.Date(2026, 11, 25, 16, 9, 52, 0, time.UTC)
	logLine := func(i int) {
		access.Log(budgethttp.NewAccessLine(at, "POST", "/v1/fillup", 200, time.Millisecond, "req-"+strconv.Itoa(i), "ops", "", false))
	}
	logLine(0)
	waitFor(t, w.entered, 10*time.Second, "the first write")
	const n = 1000
	for i := 1; i < n; i++ {
		logLine(i)
	}
	// A Close that cannot wait reports the lines left, and stops the log.
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if err := access.Close(gone); err == nil {
		t.Fatal("Close returned nil while the writer was stuck")
	}
	close(w.release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := access.Close(ctx); err != nil {
		t.Fatal(err)
	}
	out := w.String()
	if got := strings.Count(out, "\n"); got != n {
		t.Fatalf("%d lines written, want %d", got, n)
	}
	last := -1
	for line := range strings.Lines(out) {
		at := strings.Index(line, `"request_id":"req-`) + len(`"request_id":"req-`)
		i, err := strconv.Atoi(line[at : at+strings.IndexByte(line[at:], '"')])
		if err != nil || i != last+1 {
			t.Fatalf("line %d after %d: %s", i, last, line)
		}
		last = i
	}
	if access.Dropped() != 0 {
		t.Errorf("dropped %v lines", access.Dropped())
	}
}

// TestAccessLogAllocatesNothing: a line costs no allocation in either
// format, and a Fillup with the access log on allocates no more than one
// with it off.
func TestAccessLogAllocatesNothing(t *testing.T) {
	at := time.Now()
	for _, f := range accessFormats {
		access := budgethttp.NewAccessLog(io.Discard, f.format)
		line := budgethttp.NewAccessLine(at, "POST", "/v1/limits/:name/buckets/:key/fillup", 200, 1234567*time.Nanosecond, "0123456789abcdef01234567", "team-svc", "/v1/limits/bench/buckets/k1/fillup", true)
		if n := testing.AllocsPerRun(1000, func() { access.Log(line) }); n != 0 {
			t.Errorf("%s: %v allocations per line", f.name, n)
		}
		if err := access.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	fillup := func(opts ...budgethttp.Option) float64 {
		h := budgethttp.New(ledger.NewService(memory.New()), append([]budgethttp.Option{quiet}, opts...)...)
		if rec := serveReq(h, "PUT", "/v1/limits/bench", `{"capacity":"1000000000000","leak":{"amount":"1","per":"87600h"},"history":false}`); rec.Code != 200 {
			t.Fatalf("PUT: %d %s", rec.Code, rec.Body)
		}
		call := newBenchCall("POST", keyPaths[1]+"/fillup", `{"cost":"1"}`)
		var w benchWriter
		w.h = http.Header{}
		return testing.AllocsPerRun(500, func() {
			clear(w.h)
			w.code = 0
			w.body.Reset()
			call.body.Reset(call.text)
			call.req.Body = &call.body
			h.ServeHTTP(&w, call.req)
			if w.code != http.StatusOK {
				t.Fatalf("Fillup: %d %s", w.code, w.body.String())
			}
		})
	}
	access := budgethttp.NewAccessLog(io.Discard, budgethttp.AccessText)
	defer access.Close(context.Background())
	off, on := fillup(), fillup(budgethttp.WithAccessLog(access))
	if on > off {
		t.Errorf("a Fillup allocates %v times with the access log on, %v with it off", on, off)
	}
}

// BenchmarkAccessLog is the cost of one line in the request's goroutine:
// formatting and queueing it (the writer drains to io.Discard).
func BenchmarkAccessLog(b *testing.B) {
	at := time.Now()
	for _, f := range accessFormats {
		b.Run(f.name, func(b *testing.B) {
			access := budgethttp.NewAccessLog(io.Discard, f.format)
			defer access.Close(context.Background())
			line := budgethttp.NewAccessLine(at, "POST", "/v1/limits/:name/buckets/:key/fillup", 200, 1234567*time.Nanosecond, "0123456789abcdef01234567", "team-svc", "", false)
			b.ReportAllocs()
			for b.Loop() {
				access.Log(line)
			}
		})
	}
}

package tracing_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/budgetd/budgetd/internal/tracing"
	"github.com/budgetd/budgetd/internal/tracing/otlptest"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      map[string]string
		endpoint string // "" is off
		err      string // a part of the error, "" for none
	}{
		{name: "nothing set is off", env: nil},
		{name: "an unrelated variable is off", env: map[string]string{"OTEL_SERVICE_NAME": "x"}},
		{name: "base endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
			endpoint: "http://collector:4318/v1/traces"},
		{name: "base endpoint with a path and a slash", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c.example/otlp/"},
			endpoint: "https://c.example/otlp/v1/traces"},
		{name: "traces endpoint as given, over the base", env: map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://base:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:9/in"},
			endpoint: "http://t:9/in"},
		{name: "exporter otlp alone: the default endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"},
			endpoint: "http://localhost:4318/v1/traces"},
		{name: "exporter none wins over an endpoint", env: map[string]string{
			"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}},
		{name: "SDK disabled wins", env: map[string]string{
			"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}},
		{name: "SDK disabled false is no switch", env: map[string]string{
			"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, endpoint: "http://c:4318/v1/traces"},
		{name: "another exporter is refused", env: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, err: "OTEL_TRACES_EXPORTER"},
		{name: "a list of exporters is refused", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp,console"}, err: "OTEL_TRACES_EXPORTER"},
		{name: "gRPC protocol is refused", env: map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, err: "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{name: "the traces protocol wins over the general one", env: map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, endpoint: "http://c:4318/v1/traces"},
		{name: "JSON is refused", env: map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, err: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{name: "an endpoint without a scheme is refused", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "collector:4318"},
			err: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tracing.FromEnv(func(k string) string { return tc.env[k] })
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one naming %s", err, tc.err)
			case tc.err == "" && err != nil:
				t.Fatal(err)
			case cfg.Endpoint != tc.endpoint || cfg.On() != (tc.endpoint != ""):
				t.Fatalf("endpoint %q (on %v), want %q", cfg.Endpoint, cfg.On(), tc.endpoint)
			}
		})
	}
}

// The ids of the caller's traceparent in the tests.
const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
	secretKey   = "alice@example.com"
)

// traced is budgetd's API over a memory store with tracing on, sending to
// a receiver in the test, and an access log in a buffer.
type traced struct {
	recv   *otlptest.Receiver
	tr     *tracing.Tracing
	h      http.Handler
	access *budgethttp.AccessLog
	log    *bytes.Buffer
}

func newTraced(t *testing.T, logKeys bool) *traced {
	t.Helper()
	recv := otlptest.NewReceiver(t)
	tr, err := tracing.Start(t.Context(), tracing.Config{Endpoint: recv.Endpoint()}, "v0.0.0-test", logKeys)
	if err != nil {
		t.Fatal(err)
	}
	svc := ledger.NewService(tr.Store(memory.New()), ledger.WithTracer(tr))
	var log bytes.Buffer
	access := budgethttp.NewAccessLog(&log, budgethttp.AccessText)
	h := budgethttp.New(svc, budgethttp.WithLogger(slog.New(slog.DiscardHandler)), budgethttp.WithAccessLog(access),
		budgethttp.WithLogKeys(logKeys), budgethttp.WithTracing(tr.TracerProvider(), tr.Propagator()))
	return &traced{recv: recv, tr: tr, h: h, access: access, log: &log}
}

func (x *traced) do(t *testing.T, method, target, body string, header http.Header) int {
	t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	x.h.ServeHTTP(rec, req)
	return rec.Code
}

// flush sends every span and writes every access-log line.
func (x *traced) flush(t *testing.T) []*tracepb.Span {
	t.Helper()
	if err := x.tr.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := x.access.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	return x.recv.Spans()
}

// one returns the one span named name.
func one(t *testing.T, spans []*tracepb.Span, name string) *tracepb.Span {
	t.Helper()
	s := otlptest.Named(spans, name)
	if len(s) != 1 {
		var names []string
		for _, sp := range spans {
			names = append(names, sp.Name)
		}
		t.Fatalf("%d spans named %q, want 1; spans: %q", len(s), name, names)
	}
	return s[0]
}

func wantAttr(t *testing.T, span *tracepb.Span, key, want string) {
	t.Helper()
	if got, ok := otlptest.Attr(span, key); !ok || got != want {
		t.Errorf("span %s: %s = %q (set %v), want %q", span.Name, key, got, ok, want)
	}
}

func wantChild(t *testing.T, child, parent *tracepb.Span) {
	t.Helper()
	if !bytes.Equal(child.TraceId, parent.TraceId) || !bytes.Equal(child.ParentSpanId, parent.SpanId) {
		t.Errorf("span %s (trace %s, parent %s) is not a child of %s (trace %s, span %s)", child.Name,
			otlptest.ID(child.TraceId), otlptest.ID(child.ParentSpanId), parent.Name, otlptest.ID(parent.TraceId), otlptest.ID(parent.SpanId))
	}
}

const fillupSpan = "POST /v1/limits/{name}/buckets/{key}/fillup"

func TestSpansOfAFillup(t *testing.T) {
	x := newTraced(t, false)
	if code := x.do(t, "PUT", "/v1/limits/team", `{"capacity":"2","leak":{"amount":"1","per":"1h"}}`, nil); code != 200 {
		t.Fatalf("PUT limit %d", code)
	}
	parent := http.Header{"Traceparent": {"00-" + callerTrace + "-" + callerSpan + "-01"}}
	if code := x.do(t, "POST", "/v1/limits/team/buckets/"+secretKey+"/fillup", `{"cost":"2"}`, parent); code != 200 {
		t.Fatalf("fillup %d", code)
	}
	if code := x.do(t, "POST", "/v1/limits/team/buckets/"+secretKey+"/fillup", `{"cost":"1"}`, nil); code != 429 {
		t.Fatalf("second fillup %d, want 429", code)
	}
	spans := x.flush(t)

	// The caller's trace, its span as the server span's parent, then
	// HTTP → decision → store.
	var accepted, denied []*tracepb.Span
	for _, s := range otlptest.Named(spans, fillupSpan) {
		if otlptest.ID(s.TraceId) == callerTrace {
			accepted = append(accepted, s)
		} else {
			denied = append(denied, s)
		}
	}
	if len(accepted) != 1 || len(denied) != 1 {
		t.Fatalf("%d fillup spans in the caller's trace and %d outside, want 1 and 1", len(accepted), len(denied))
	}
	server := accepted[0]
	if got := otlptest.ID(server.ParentSpanId); got != callerSpan {
		t.Errorf("server span's parent %s, want the caller's %s", got, callerSpan)
	}
	if server.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("server span kind %v", server.Kind)
	}
	wantAttr(t, server, "http.route", "/v1/limits/{name}/buckets/{key}/fillup")
	wantAttr(t, server, "http.request.method", "POST")
	wantAttr(t, server, "http.response.status_code", "200")
	wantAttr(t, server, "budgetd.limit", "team")
	if _, ok := otlptest.Attr(server, "url.path"); ok {
		t.Error("url.path on the server span without --log-keys")
	}

	decisions := inTrace(otlptest.Named(spans, "ledger.fillup"), server.TraceId)
	stores := inTrace(otlptest.Named(spans, "store.fillup"), server.TraceId)
	if len(decisions) != 1 || len(stores) != 1 {
		t.Fatalf("%d decision and %d store spans in the trace, want 1 and 1", len(decisions), len(stores))
	}
	wantChild(t, decisions[0], server)
	wantChild(t, stores[0], decisions[0])
	for _, s := range []*tracepb.Span{decisions[0], stores[0]} {
		wantAttr(t, s, "budgetd.limit", "team")
		wantAttr(t, s, "budgetd.operation", "fillup")
		wantAttr(t, s, "budgetd.result", "accepted")
	}

	// The denied call: its own trace, denied at both levels.
	wantAttr(t, denied[0], "http.response.status_code", "429")
	for _, name := range []string{"ledger.fillup", "store.fillup"} {
		s := inTrace(otlptest.Named(spans, name), denied[0].TraceId)
		if len(s) != 1 {
			t.Fatalf("%d %s spans in the denied call's trace", len(s), name)
		}
		wantAttr(t, s[0], "budgetd.result", "denied")
	}

	// The key is nowhere: not in a name, not in an attribute.
	for _, s := range spans {
		if strings.Contains(s.String(), secretKey) || strings.Contains(s.String(), "alice") {
			t.Errorf("span %s carries the bucket key: %v", s.Name, s)
		}
	}
	if res := x.recv.Resources(); !contains(res, "service.name=budgetd") || !contains(res, "service.version=v0.0.0-test") {
		t.Errorf("resource %q lacks service.name=budgetd and the version", res)
	}

	// The access-log line of the traced call names its trace.
	lines := strings.Split(strings.TrimSpace(x.log.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("access log: %q", lines)
	}
	if !strings.Contains(lines[1], " trace_id="+callerTrace) {
		t.Errorf("access-log line %q does not carry trace_id=%s", lines[1], callerTrace)
	}
	if want := " trace_id=" + otlptest.ID(denied[0].TraceId); !strings.HasSuffix(lines[2], want) {
		t.Errorf("access-log line %q does not end with%s", lines[2], want)
	}
}

func TestSpansCarryKeysWithLogKeys(t *testing.T) {
	x := newTraced(t, true)
	x.do(t, "PUT", "/v1/limits/team", `{"capacity":"2","leak":{"amount":"1","per":"1h"}}`, nil)
	if code := x.do(t, "POST", "/v1/limits/team/buckets/"+secretKey+"/fillup", `{"cost":"1"}`, nil); code != 200 {
		t.Fatalf("fillup %d", code)
	}
	spans := x.flush(t)
	server := one(t, spans, fillupSpan)
	wantAttr(t, server, "url.path", "/v1/limits/team/buckets/"+secretKey+"/fillup")
	wantAttr(t, one(t, spans, "ledger.fillup"), "budgetd.key", secretKey)
	wantAttr(t, one(t, spans, "store.fillup"), "budgetd.key", secretKey)
}

func TestHoldSpansNameTheirBucket(t *testing.T) {
	x := newTraced(t, false)
	x.do(t, "PUT", "/v1/limits/team", `{"capacity":"2","leak":{"amount":"1","per":"1h"}}`, nil)
	req := httptest.NewRequest("POST", "/v1/limits/team/buckets/k/reservations", strings.NewReader(`{"amount":"1"}`))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	x.h.ServeHTTP(rec, req)
	if rec.Code != 201 {
		t.Fatalf("reserve %d %s", rec.Code, rec.Body)
	}
	id := between(rec.Body.String(), `"id":"`, `"`)
	if code := x.do(t, "POST", "/v1/reservations/"+id+"/commit", `{"amount":"2"}`, nil); code != 422 {
		t.Fatalf("commit above the hold %d, want 422", code)
	}
	spans := x.flush(t)
	wantAttr(t, one(t, spans, "ledger.reserve"), "budgetd.result", "accepted")
	for _, name := range []string{"ledger.commit", "store.commit"} {
		s := one(t, spans, name)
		wantAttr(t, s, "budgetd.limit", "team")
		wantAttr(t, s, "budgetd.result", string(ledger.CodeExceedsHold))
	}
}

func TestNoSpanOutsideARequest(t *testing.T) {
	recv := otlptest.NewReceiver(t)
	tr, err := tracing.Start(t.Context(), tracing.Config{Endpoint: recv.Endpoint()}, "test", false)
	if err != nil {
		t.Fatal(err)
	}
	st := tr.Store(memory.New())
	// What budgetd's own loops do (the webhook sender reading events):
	// no trace around them, no span.
	if _, _, err := st.Events(context.Background(), "", 10); err != nil {
		t.Fatal(err)
	}
	if err := st.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := tr.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := recv.Posts(); n != 0 {
		t.Fatalf("%d exports of store calls made outside any trace: %v", n, recv.Spans())
	}
}

func inTrace(spans []*tracepb.Span, trace []byte) []*tracepb.Span {
	var out []*tracepb.Span
	for _, s := range spans {
		if bytes.Equal(s.TraceId, trace) {
			out = append(out, s)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func between(s, from, to string) string {
	_, rest, ok := strings.Cut(s, from)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, to)
	return v
}

// TestSpansOfTheListings: the calls of "who is near the cap" reach the
// store through its optional interfaces (a count, a scan ranking by use,
// the index of marks) and each makes a store span in the request's trace.
func TestSpansOfTheListings(t *testing.T) {
	x := newTraced(t, false)
	if code := x.do(t, "PUT", "/v1/limits/team", `{"capacity":"10","leak":{"amount":"1","per":"1h"},"thresholds":["50%"]}`, nil); code != 200 {
		t.Fatalf("PUT limit %d", code)
	}
	for _, k := range []string{"a", "b"} {
		if code := x.do(t, "POST", "/v1/limits/team/buckets/"+k+"/fillup", `{"cost":"6"}`, nil); code != 200 {
			t.Fatalf("fillup %s %d", k, code)
		}
	}
	for _, target := range []string{"/v1/limits/team/counts", "/v1/limits/team/buckets?order=used", "/v1/limits/team/buckets?above=50%25"} {
		if code := x.do(t, "GET", target, "", nil); code != 200 {
			t.Fatalf("GET %s %d", target, code)
		}
	}
	spans := x.flush(t)
	for _, name := range []string{"store.count_buckets", "store.scan_buckets", "store.list_marked"} {
		s := one(t, spans, name)
		wantAttr(t, s, "budgetd.limit", "team")
		wantAttr(t, s, "budgetd.result", ledger.ResultDone)
	}
}

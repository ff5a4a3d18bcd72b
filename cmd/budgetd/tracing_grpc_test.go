package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/budgetd/budgetd/internal/tracing/otlptest"
)

// callerHeaders are a caller's trace context and baggage, sent as HTTP
// headers and as gRPC metadata.
var callerHeaders = map[string]string{"traceparent": "00-" + e2eTrace + "-" + e2eSpan + "-01", "baggage": "tenant=t1"}

// tracedCalls runs budgetd with vars and an Envoy limit rls, sends a
// fillup on rls over HTTP and a ShouldRateLimit call over gRPC, both with
// callerHeaders, stops it and returns what it wrote.
func tracedCalls(t *testing.T, vars map[string]string) string {
	t.Helper()
	limits := filepath.Join(t.TempDir(), "limits.yaml")
	os.WriteFile(limits, []byte(`{"limits":[{"name":"rls","capacity":"10","leak":{"amount":"1","per":"1h"}}],
"envoy":[{"domain":"api","descriptors":[{"entries":[{"key":"tenant"}],"limit":"rls","bucket":"{tenant}"}]}]}`), 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &started{stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan error, 1), cancel: cancel}
	go func() {
		s.done <- run(ctx, []string{"--addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--limits-file", limits},
			env(vars), s.stdout, s.stderr)
	}()
	s.url = waitURL(t, s.stdout, s.done)
	req, _ := http.NewRequest("POST", s.url+"/v1/limits/rls/buckets/t2/fillup", strings.NewReader(`{"cost":"1"}`))
	for k, v := range callerHeaders {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("fillup %d", res.StatusCode)
	}
	conn, err := grpc.NewClient(s.waitGRPC(t), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(metadata.NewOutgoingContext(ctx, metadata.New(callerHeaders)), 10*time.Second)
	defer ccancel()
	rreq := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "t1"}}}}}
	if resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(cctx, rreq); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit: %v %v", resp, err)
	}
	stopRun(t, cancel, s.done)
	return s.stdout.String() + s.stderr.String()
}

// The names of the server spans of tracedCalls's fillup and call.
const (
	fillupSpan = "POST /v1/limits/{name}/buckets/{key}/fillup"
	rlsSpan    = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
)

// TestGRPCSendsTraces: a ShouldRateLimit call on --grpc-addr is a server
// span in the caller's trace (its traceparent metadata), with the
// decision and the store call beneath it.
func TestGRPCSendsTraces(t *testing.T) {
	recv := otlptest.NewReceiver(t)
	log := tracedCalls(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": recv.URL})
	// The call's access-log line names its trace, as an HTTP request's does.
	var logged bool
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "method=GRPC") && strings.Contains(line, "ShouldRateLimit") {
			if !strings.Contains(line, " trace_id="+e2eTrace) {
				t.Errorf("the call's access-log line without its trace id %s: %s", e2eTrace, line)
			}
			logged = true
		}
	}
	if !logged {
		t.Errorf("no access-log line of the ShouldRateLimit call in %q", log)
	}

	spans := recv.Spans()
	server := otlptest.Named(spans, rlsSpan)
	if len(server) != 1 {
		t.Fatalf("%d ShouldRateLimit spans in %d", len(server), len(spans))
	}
	if otlptest.ID(server[0].TraceId) != e2eTrace || otlptest.ID(server[0].ParentSpanId) != e2eSpan {
		t.Errorf("server span in trace %s under %s, want the caller's %s under %s",
			otlptest.ID(server[0].TraceId), otlptest.ID(server[0].ParentSpanId), e2eTrace, e2eSpan)
	}
	var under int
	for _, sp := range spans {
		if len(sp.Name) > len("ledger.") && sp.Name[:len("ledger.")] == "ledger." && string(sp.ParentSpanId) == string(server[0].SpanId) {
			under++
		}
	}
	if under == 0 {
		t.Errorf("no decision span under the ShouldRateLimit span: %d spans", len(spans))
	}
}

// TestRunPropagators: OTEL_PROPAGATORS decides, for an HTTP request and a
// gRPC call alike, whether budgetd continues the caller's trace: with
// tracecontext listed (the default lists it) the server spans are the
// caller's span's children, without it they start traces of their own.
func TestRunPropagators(t *testing.T) {
	for _, tc := range []struct {
		value, logged string
		follows       bool
	}{
		{value: "", logged: "tracecontext,baggage", follows: true},
		{value: "tracecontext", logged: "tracecontext", follows: true},
		{value: " Baggage , TRACECONTEXT", logged: "baggage,tracecontext", follows: true},
		{value: "baggage", logged: "baggage", follows: false},
		{value: "none", logged: "none", follows: false},
	} {
		t.Run(tc.logged, func(t *testing.T) {
			recv := otlptest.NewReceiver(t)
			log := tracedCalls(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": recv.URL, "OTEL_PROPAGATORS": tc.value})
			if !strings.Contains(log, "propagators="+tc.logged) {
				t.Errorf("no propagators=%s on the start-up line: %q", tc.logged, log)
			}
			spans := recv.Spans()
			for _, name := range []string{fillupSpan, rlsSpan} {
				server := otlptest.Named(spans, name)
				if len(server) != 1 {
					t.Fatalf("%d spans %s in %d", len(server), name, len(spans))
				}
				trace, parent := otlptest.ID(server[0].TraceId), otlptest.ID(server[0].ParentSpanId)
				switch {
				case tc.follows && (trace != e2eTrace || parent != e2eSpan):
					t.Errorf("%s: in trace %s under %q, want the caller's %s under %s", name, trace, parent, e2eTrace, e2eSpan)
				case !tc.follows && (trace == e2eTrace || parent != ""):
					t.Errorf("%s: in trace %s under %q, want a trace of its own", name, trace, parent)
				}
			}
		})
	}
}

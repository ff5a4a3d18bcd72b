package main

import (
	"context"
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

// TestGRPCSendsTraces: a ShouldRateLimit call on --grpc-addr is a server
// span in the caller's trace (its traceparent metadata), with the
// decision and the store call beneath it.
func TestGRPCSendsTraces(t *testing.T) {
	recv := otlptest.NewReceiver(t)
	limits := filepath.Join(t.TempDir(), "limits.yaml")
	os.WriteFile(limits, []byte(`{"limits":[{"name":"rls","capacity":"10","leak":{"amount":"1","per":"1h"}}],
"envoy":[{"domain":"api","descriptors":[{"entries":[{"key":"tenant"}],"limit":"rls","bucket":"{tenant}"}]}]}`), 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	s := &started{stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan error, 1), cancel: cancel}
	go func() {
		s.done <- run(ctx, []string{"--addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--limits-file", limits},
			env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": recv.URL}), s.stdout, s.stderr)
	}()
	s.url = waitURL(t, s.stdout, s.done)
	conn, err := grpc.NewClient(s.waitGRPC(t), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+e2eTrace+"-"+e2eSpan+"-01"), 10*time.Second)
	defer ccancel()
	req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "t1"}}}}}
	if resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(cctx, req); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit: %v %v", resp, err)
	}
	stopRun(t, cancel, s.done)
	// The call's access-log line names its trace, as an HTTP request's does.
	var logged bool
	for _, line := range strings.Split(s.stdout.String()+s.stderr.String(), "\n") {
		if strings.Contains(line, "method=GRPC") && strings.Contains(line, "ShouldRateLimit") {
			if !strings.Contains(line, " trace_id="+e2eTrace) {
				t.Errorf("the call's access-log line without its trace id %s: %s", e2eTrace, line)
			}
			logged = true
		}
	}
	if !logged {
		t.Errorf("no access-log line of the ShouldRateLimit call in %q", s.stdout.String())
	}

	spans := recv.Spans()
	server := otlptest.Named(spans, "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
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

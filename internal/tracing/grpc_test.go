package tracing_test

import (
	"context"
	"testing"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/budgetd/budgetd/internal/tracing"
	"github.com/budgetd/budgetd/internal/tracing/otlptest"
	"github.com/shopspring/decimal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestUnaryServerInterceptor(t *testing.T) {
	recv := otlptest.NewReceiver(t)
	tr, err := tracing.Start(t.Context(), tracing.Config{Endpoint: recv.Endpoint()}, "test", false)
	if err != nil {
		t.Fatal(err)
	}
	svc := ledger.NewService(tr.Store(memory.New()), ledger.WithTracer(tr))
	if _, err := svc.PutLimit(t.Context(), "rls", ledger.LimitSpec{Capacity: decimal.NewFromInt(1), LeakAmount: decimal.NewFromInt(1), LeakPer: 3600e9}); err != nil {
		t.Fatal(err)
	}
	intercept := tr.UnaryServerInterceptor()
	const method = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	call := func(fullMethod string, handler grpc.UnaryHandler) error {
		md := metadata.Pairs("traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
		ctx := metadata.NewIncomingContext(context.Background(), md)
		_, err := intercept(ctx, nil, &grpc.UnaryServerInfo{FullMethod: fullMethod}, handler)
		return err
	}
	check := func(ctx context.Context, _ any) (any, error) {
		return svc.Check(ctx, ledger.BucketRef{Limit: "rls", Key: secretKey}, decimal.NewFromInt(2))
	}
	if err := call(method, check); err != nil {
		t.Fatal(err)
	}
	unavailable := func(context.Context, any) (any, error) { return nil, status.Error(codes.Unavailable, "store down") }
	if err := call(method, unavailable); status.Code(err) != codes.Unavailable {
		t.Fatalf("the handler's error was not passed on: %v", err)
	}
	if err := tr.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	spans := recv.Spans()
	servers := otlptest.Named(spans, method[1:])
	if len(servers) != 2 {
		t.Fatalf("%d server spans, want 2", len(servers))
	}
	server := servers[0]
	if v, _ := otlptest.Attr(server, "rpc.response.status_code"); v != "OK" {
		servers[0], servers[1] = servers[1], servers[0]
		server = servers[0]
	}
	if otlptest.ID(server.TraceId) != callerTrace || otlptest.ID(server.ParentSpanId) != callerSpan {
		t.Errorf("server span in trace %s under %s, want the caller's %s under %s",
			otlptest.ID(server.TraceId), otlptest.ID(server.ParentSpanId), callerTrace, callerSpan)
	}
	wantAttr(t, server, "rpc.system.name", "grpc")
	wantAttr(t, server, "rpc.method", method[1:])
	wantAttr(t, server, "rpc.response.status_code", "OK")
	wantAttr(t, servers[1], "rpc.response.status_code", "Unavailable")
	if servers[1].Status.GetCode() != 2 { // STATUS_CODE_ERROR
		t.Errorf("an Unavailable call's span has status %v, want error", servers[1].Status)
	}
	// The decision is the server span's child.
	decisions := otlptest.Named(spans, "ledger.check")
	if len(decisions) != 1 {
		t.Fatalf("%d decision spans, want 1", len(decisions))
	}
	wantChild(t, decisions[0], server)
	wantAttr(t, decisions[0], "budgetd.result", "denied")
	wantAttr(t, decisions[0], "budgetd.limit", "rls")
}

package tracing_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/budgetd/budgetd/internal/tracing"
	"github.com/budgetd/budgetd/internal/tracing/otlptest"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

func TestFromEnvPropagators(t *testing.T) {
	both := []string{"tracecontext", "baggage"}
	for _, tc := range []struct {
		value string
		want  []string // nil: refused
		err   string   // a part of the error besides OTEL_PROPAGATORS
	}{
		{value: "", want: both},
		{value: "  ", want: both},
		{value: "tracecontext", want: []string{"tracecontext"}},
		{value: "baggage", want: []string{"baggage"}},
		{value: " Baggage , TRACECONTEXT,baggage ", want: []string{"baggage", "tracecontext"}},
		{value: "None", want: []string{"none"}},
		{value: "b3", err: `"b3"`},
		{value: "b3multi", err: `"b3multi"`},
		{value: "jaeger", err: `"jaeger"`},
		{value: "xray", err: `"xray"`},
		{value: "ottrace", err: `"ottrace"`},
		{value: "w3c", err: `"w3c"`},
		{value: "tracecontext,b3", err: `"b3"`},
		{value: "tracecontext,", err: `empty name in "tracecontext,"`},
		{value: "none,baggage", err: "none must stand alone"},
		{value: "tracecontext,none", err: "none must stand alone"},
	} {
		t.Run(tc.value, func(t *testing.T) {
			env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_PROPAGATORS": tc.value}
			cfg, err := tracing.FromEnv(func(k string) string { return env[k] })
			switch {
			case tc.want == nil && (err == nil || !strings.Contains(err.Error(), "OTEL_PROPAGATORS") || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one naming OTEL_PROPAGATORS and %s", err, tc.err)
			case tc.want != nil && err != nil:
				t.Fatal(err)
			case tc.want != nil && !slices.Equal(cfg.Propagators, tc.want):
				t.Fatalf("propagators %q, want %q", cfg.Propagators, tc.want)
			}
		})
	}
	// Off, nothing reads a caller's headers: the variable is not read.
	env := map[string]string{"OTEL_PROPAGATORS": "b3"}
	if cfg, err := tracing.FromEnv(func(k string) string { return env[k] }); err != nil || cfg.On() {
		t.Fatalf("tracing off with OTEL_PROPAGATORS=b3: %+v, %v", cfg, err)
	}
}

// TestPropagators: a gRPC call's metadata and a request's headers are read
// in the formats Config.Propagators names, and in no other: with
// tracecontext the server span continues the caller's trace, with baggage
// the caller's baggage is in the call's context.
func TestPropagators(t *testing.T) {
	for _, tc := range []struct {
		props          []string
		trace, baggage bool
	}{
		{props: nil, trace: true, baggage: true}, // the default
		{props: []string{"tracecontext", "baggage"}, trace: true, baggage: true},
		{props: []string{"tracecontext"}, trace: true},
		{props: []string{"baggage"}, baggage: true},
		{props: []string{"none"}},
	} {
		t.Run(strings.Join(tc.props, ","), func(t *testing.T) {
			recv := otlptest.NewReceiver(t)
			tr, err := tracing.Start(t.Context(), tracing.Config{Endpoint: recv.Endpoint(), Propagators: tc.props}, "test", false)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Shutdown(context.Background())
			traceparent := "00-" + callerTrace + "-" + callerSpan + "-01"
			check := func(via string, ctx context.Context) {
				t.Helper()
				if got := trace.SpanContextFromContext(ctx).TraceID().String() == callerTrace; got != tc.trace {
					t.Errorf("%s: in the caller's trace %v, want %v", via, got, tc.trace)
				}
				if got := baggage.FromContext(ctx).Member("tenant").Value() == "t1"; got != tc.baggage {
					t.Errorf("%s: the caller's baggage read %v, want %v", via, got, tc.baggage)
				}
			}

			md := metadata.Pairs("traceparent", traceparent, "baggage", "tenant=t1")
			var inCall context.Context
			handler := func(ctx context.Context, _ any) (any, error) { inCall = ctx; return nil, nil }
			info := &grpc.UnaryServerInfo{FullMethod: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}
			if _, err := tr.UnaryServerInterceptor()(metadata.NewIncomingContext(context.Background(), md), nil, info, handler); err != nil {
				t.Fatal(err)
			}
			check("gRPC call", inCall)

			header := http.Header{"Traceparent": {traceparent}, "Baggage": {"tenant=t1"}}
			check("HTTP request", tr.Propagator().Extract(context.Background(), propagation.HeaderCarrier(header)))
		})
	}
}

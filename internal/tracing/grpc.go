package tracing

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// UnaryServerInterceptor makes a server span of every unary gRPC call
// (health checks too, as /healthz has one), a child of the span the
// caller's metadata names in the formats of Propagator (OTEL_PROPAGATORS),
// named by the full method without its leading slash
// ("envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit") with
// rpc.system.name, rpc.method and rpc.response.status_code; the decisions
// of the call are its children.
func (t *Tracing) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		ctx = t.Propagator().Extract(ctx, metadataCarrier(md))
		name := strings.TrimPrefix(info.FullMethod, "/")
		ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(semconv.RPCSystemNameKey.String("grpc"), semconv.RPCMethod(name)))
		defer span.End()
		resp, err := handler(ctx, req)
		code := status.Code(err)
		span.SetAttributes(semconv.RPCResponseStatusCode(code.String()))
		if serverFault(code) {
			span.SetStatus(codes.Error, code.String())
		}
		return resp, err
	}
}

// serverFault reports whether a call that ended with code failed on
// budgetd's side, as the semantic conventions mark a gRPC server span.
func serverFault(code grpccodes.Code) bool {
	switch code {
	case grpccodes.Unknown, grpccodes.DeadlineExceeded, grpccodes.Unimplemented, grpccodes.Internal,
		grpccodes.Unavailable, grpccodes.DataLoss:
		return true
	}
	return false
}

// metadataCarrier reads the propagation headers from gRPC metadata (keys
// are lower case there, as the propagator asks for them).
type metadataCarrier metadata.MD

func (m metadataCarrier) Get(key string) string {
	if v := metadata.MD(m).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (m metadataCarrier) Set(key, value string) { metadata.MD(m).Set(key, value) }

func (m metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

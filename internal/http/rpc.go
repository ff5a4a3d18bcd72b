package http

import (
	"context"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"
	"go.opentelemetry.io/otel/trace"
)

// RPC counts and logs the calls of budgetd's other listener, the Envoy
// rate-limit service over gRPC (an envoy.Observer), in the handler's
// /metrics and access log, so that one place shows every call: decisions,
// charges, shadow denials and authentication failures in the same series
// as HTTP requests, durations in budgetd_grpc_request_duration_seconds.
// WithRPC makes it; its methods are safe for concurrent use.
type RPC struct{ s *server }

// WithRPC makes *r the handler's RPC observer.
func WithRPC(r **RPC) Option { return func(s *server) { *r = &RPC{s: s} } }

// RequestID is a gRPC call's request id: given (its x-request-id
// metadata) when it is one an HTTP request's X-Request-Id would be kept
// as, else a new one from the same source as HTTP requests' ids.
func (r *RPC) RequestID(given string) string {
	if validRequestID(given) {
		return given
	}
	return newRequestID()
}

// Call observes one finished gRPC call. Its access-log line has the method
// GRPC, the full method as route, the HTTP status of the gRPC code (as
// gRPC's HTTP mapping gives it: OK 200, InvalidArgument 400, …; 500 for
// the others), the call's request id, and the trace id of its span when
// it is traced.
func (r *RPC) Call(ctx context.Context, method, code string, elapsed time.Duration, key, requestID string) {
	s := r.s
	s.m.grpcRequests.WithLabelValues(method, code).Observe(elapsed.Seconds())
	if s.access == nil {
		return
	}
	st, ok := grpcStatus[code]
	if !ok {
		st = 500
	}
	s.access.log(&accessLine{time: time.Now(), method: "GRPC", route: method, status: st, duration: elapsed,
		requestID: requestID, hasID: requestID != "", key: key, traceID: trace.SpanContextFromContext(ctx).TraceID()})
}

// grpcStatus is the HTTP status of each gRPC code a call may end with.
var grpcStatus = map[string]int{
	"OK": 200, "InvalidArgument": 400, "FailedPrecondition": 400, "OutOfRange": 400,
	"Unauthenticated": 401, "PermissionDenied": 403, "NotFound": 404, "AlreadyExists": 409, "Aborted": 409,
	"ResourceExhausted": 429, "Canceled": 499, "Unimplemented": 501, "Unavailable": 503, "DeadlineExceeded": 504,
}

// Decided counts a decision as a request's decision is counted.
func (r *RPC) Decided(limit, op string, d bucket.Decision, cost decimal.Decimal, charged bool) {
	r.s.m.decided(limit, op, d, cost, charged)
}

// AuthFailed counts a call refused by authentication, by reason.
func (r *RPC) AuthFailed(reason string) { r.s.m.authFailures.WithLabelValues(reason).Inc() }

func newGRPCRequests() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "budgetd_grpc_request_duration_seconds",
		Help:    "Time to answer a gRPC call (the Envoy rate-limit service, health, reflection), by full method and gRPC status code.",
		Buckets: requestBuckets,
	}, []string{"method", "code"})
}

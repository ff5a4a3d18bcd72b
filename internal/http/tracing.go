package http

import (
	"net/http"
	"strings"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// WithTracing makes a server span of every request with tp, a child of
// the span that the caller's headers name through p (W3C traceparent), and
// writes the trace id on the request's access-log line. The span is named
// by the method and the route template ("POST
// /v1/limits/{name}/buckets/{key}/fillup") and carries the route, the
// status, the request id and the limit's name; the path, bucket keys
// included, only with WithLogKeys. The ledger's and the store's spans
// (package tracing) are its children. Without it no span is made and
// nothing is read from the headers.
func WithTracing(tp trace.TracerProvider, p propagation.TextMapPropagator) Option {
	return func(s *server) {
		s.tracer, s.propagator = tp.Tracer("github.com/budgetd/budgetd/internal/http"), p
	}
}

// Attributes of a request's span beside the semantic conventions' own.
const (
	attrRequestID = attribute.Key("budgetd.request_id")
	attrLimit     = attribute.Key("budgetd.limit")
)

// spanRoute is the route template as OpenAPI writes it: {name} for :name.
func spanRoute(route string) string {
	parts := strings.Split(route, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, ":") {
			parts[i] = "{" + p[1:] + "}"
		}
	}
	return strings.Join(parts, "/")
}

// spanName is the name and http.route of a route's spans.
type spanName struct{ name, route string }

// spanNames maps each method and route of e to its spans' name, made once.
func spanNames(e *echo.Echo) map[[2]string]spanName {
	names := map[[2]string]spanName{}
	for _, r := range e.Routes() {
		route := spanRoute(r.Path)
		names[[2]string{r.Method, r.Path}] = spanName{r.Method + " " + route, route}
	}
	return names
}

// traceRequest is the tracing middleware: it sits outside observe, which
// reads the span's trace id for the access log.
func (s *server) traceRequest(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		ctx := s.propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		method, route := requestMethod(r), c.Path()
		sn, known := s.spanNames[[2]string{r.Method, route}]
		switch {
		case !known || !s.routeSet[route]:
			sn = spanName{name: method} // no route: the span is named by the method alone
		case method != r.Method: // HEAD served as GET
			sn.name = method + " " + sn.route
		}
		attrs := make([]attribute.KeyValue, 0, 6)
		attrs = append(attrs, semconv.HTTPRequestMethodKey.String(method), attrRequestID.String(requestIDText(c)))
		if sn.route != "" {
			attrs = append(attrs, semconv.HTTPRoute(sn.route))
		}
		if n := c.Param("name"); n != "" && strings.HasPrefix(route, "/v1/limits/") && ledger.ValidateName(n) == nil {
			attrs = append(attrs, attrLimit.String(n))
		}
		if s.logKeys {
			attrs = append(attrs, semconv.URLPath(r.URL.Path))
		}
		ctx, span := s.tracer.Start(ctx, sn.name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		defer span.End()
		c.SetRequest(r.WithContext(ctx))
		err := next(c)
		status := c.Response().Status
		span.SetAttributes(semconv.HTTPResponseStatusCode(status))
		if status >= http.StatusInternalServerError {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
		return err
	}
}

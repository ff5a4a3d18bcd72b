// Package tracing sends OpenTelemetry traces of budgetd's work when the
// standard OTEL_* variables ask for it (FromEnv): a span per decision of
// the ledger (the service's Tracer) and per store call (Store, a decorator
// of any ledger.Store), beneath the request's span that internal/http and
// the gRPC listener make. Spans go over OTLP/HTTP (protobuf) through a
// batch processor, off the decision's path; Shutdown sends what is left.
//
// Bucket keys are often user ids or addresses: a span names the limit, the
// operation and the result, and carries the key only when the operator
// asked for keys in the logs (budgetd --log-keys), as the access log does.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/storemetrics"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Name is the instrumentation scope of budgetd's spans.
const Name = "github.com/budgetd/budgetd"

// The attributes budgetd puts on its spans, beside the semantic
// conventions' own (http.route, rpc.method, …).
const (
	AttrLimit     = attribute.Key("budgetd.limit")     // the limit's name
	AttrOperation = attribute.Key("budgetd.operation") // fillup, check, reserve, … (store calls: the store's operation)
	AttrResult    = attribute.Key("budgetd.result")    // accepted, denied, done, or an error code
	AttrKey       = attribute.Key("budgetd.key")       // the bucket key: with --log-keys only
	AttrItems     = attribute.Key("budgetd.items")     // the items of a multi-bucket Fillup, when more than one
)

// defaultEndpoint is where OTLP/HTTP sends traces when no endpoint
// variable names another place (the OTLP exporter specification's
// default).
const defaultEndpoint = "http://localhost:4318/v1/traces"

// Config is what the OTEL_* variables ask of budgetd's tracing.
type Config struct {
	// Endpoint is the URL spans are posted to; "" is tracing off.
	Endpoint string
	// Propagators are the formats in which a caller's context is read from
	// a request's headers or a call's metadata (OTEL_PROPAGATORS), in their
	// order: "tracecontext" (W3C traceparent, tracestate), "baggage" (W3C
	// baggage), or "none" alone, which reads nothing. Empty is the
	// specification's default, tracecontext and baggage.
	Propagators []string
}

// On reports whether spans are sent.
func (c Config) On() bool { return c.Endpoint != "" }

// FromEnv reads the variables of the OpenTelemetry specification that
// decide whether budgetd sends traces, and where. Tracing is off unless
// one of them asks for it:
//
//   - OTEL_SDK_DISABLED=true turns it off, whatever else is set;
//   - OTEL_TRACES_EXPORTER=otlp turns it on, =none off; any other exporter
//     (console, zipkin, a list) is refused, as budgetd ships OTLP only;
//   - with OTEL_TRACES_EXPORTER unset, setting OTEL_EXPORTER_OTLP_ENDPOINT
//     or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT turns it on.
//
// The endpoint is OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as given, else
// OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces appended, else
// http://localhost:4318/v1/traces. OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL
// may only be http/protobuf. A value budgetd cannot honour is an error
// naming the variable, so that a typo does not silently lose the traces.
func FromEnv(getenv func(string) string) (Config, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return Config{}, nil
	}
	tracesEndpoint := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
	baseEndpoint := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	switch exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); exp {
	case "none":
		return Config{}, nil
	case "":
		if tracesEndpoint == "" && baseEndpoint == "" {
			return Config{}, nil
		}
	case "otlp":
	default:
		return Config{}, fmt.Errorf("OTEL_TRACES_EXPORTER must be otlp or none, not %q: budgetd sends traces over OTLP only", exp)
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(v)); p != "" {
			if p != "http/protobuf" {
				return Config{}, fmt.Errorf("%s must be http/protobuf, not %q: budgetd sends traces over OTLP/HTTP only", v, p)
			}
			break // the signal's own variable wins
		}
	}
	endpoint, from := defaultEndpoint, ""
	switch {
	case tracesEndpoint != "":
		endpoint, from = tracesEndpoint, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	case baseEndpoint != "":
		endpoint, from = strings.TrimRight(baseEndpoint, "/")+"/v1/traces", "OTEL_EXPORTER_OTLP_ENDPOINT"
	}
	if u, err := url.Parse(endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Config{}, fmt.Errorf("%s must be an http:// or https:// URL with a host, not %q", from, endpoint)
	}
	props, err := propagators(getenv("OTEL_PROPAGATORS"))
	if err != nil {
		return Config{}, err
	}
	return Config{Endpoint: endpoint, Propagators: props}, nil
}

// defaultPropagators are what OTEL_PROPAGATORS is when unset or empty.
var defaultPropagators = []string{"tracecontext", "baggage"}

// propagators reads OTEL_PROPAGATORS as the specification defines it: a
// comma-separated list, in any case, each propagator once; none alone.
func propagators(v string) ([]string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return slices.Clone(defaultPropagators), nil
	}
	var names []string
	for _, name := range strings.Split(v, ",") {
		switch name = strings.ToLower(strings.TrimSpace(name)); name {
		case "tracecontext", "baggage":
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		case "none":
			if !strings.EqualFold(v, "none") {
				return nil, fmt.Errorf("OTEL_PROPAGATORS lists none with other propagators in %q: none must stand alone", v)
			}
			return []string{"none"}, nil
		case "":
			return nil, fmt.Errorf("OTEL_PROPAGATORS has an empty name in %q", v)
		default:
			return nil, fmt.Errorf("OTEL_PROPAGATORS may list tracecontext and baggage, or be none, not %q: "+
				"budgetd reads a caller's trace context in the W3C headers only", name)
		}
	}
	return names, nil
}

// propagator reads the caller's context in the formats names lists
// (Config.Propagators), in their order.
func propagator(names []string) propagation.TextMapPropagator {
	if len(names) == 0 {
		names = defaultPropagators
	}
	var ps []propagation.TextMapPropagator
	for _, name := range names {
		switch name {
		case "tracecontext":
			ps = append(ps, propagation.TraceContext{})
		case "baggage":
			ps = append(ps, propagation.Baggage{})
		}
	}
	return propagation.NewCompositeTextMapPropagator(ps...)
}

// Tracing makes budgetd's spans. Its methods are safe for concurrent use.
type Tracing struct {
	provider   trace.TracerProvider
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	logKeys    bool
	shutdown   func(context.Context) error
}

// Start sends spans to cfg.Endpoint over OTLP/HTTP in batches. The
// exporter reads the rest of its settings (OTEL_EXPORTER_OTLP_HEADERS,
// _TIMEOUT, _COMPRESSION, _CERTIFICATE, …) from the process's environment,
// the SDK its sampler (OTEL_TRACES_SAMPLER, default parentbased_always_on)
// and batching (OTEL_BSP_*), and the resource OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES over service.name=budgetd and service.version.
// The caller's context is read as cfg.Propagators says. logKeys puts
// bucket keys on spans. Shutdown sends what is buffered.
func Start(ctx context.Context, cfg Config, version string, logKeys bool) (*Tracing, error) {
	if !cfg.On() {
		return nil, errors.New("tracing: no endpoint")
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(cfg.Endpoint))
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("budgetd"), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("tracing: OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	t := New(tp, logKeys)
	t.propagator = propagator(cfg.Propagators)
	t.shutdown = tp.Shutdown
	return t, nil
}

// New makes spans with tp (a test's, a benchmark's) and reads the
// caller's context in the default formats (tracecontext, baggage); logKeys
// puts bucket keys on them. Shutdown is then tp's owner's business.
func New(tp trace.TracerProvider, logKeys bool) *Tracing {
	return &Tracing{provider: tp, tracer: tp.Tracer(Name), propagator: propagator(nil), logKeys: logKeys}
}

// TracerProvider is where the request spans of the HTTP and gRPC
// listeners come from.
func (t *Tracing) TracerProvider() trace.TracerProvider { return t.provider }

// Propagator reads the caller's context from a request's headers or a
// call's metadata (and writes it), in the formats OTEL_PROPAGATORS names:
// the HTTP middleware and the gRPC interceptor both use it.
func (t *Tracing) Propagator() propagation.TextMapPropagator { return t.propagator }

// Shutdown sends the spans still buffered and stops, or gives up when ctx
// ends. It does nothing for a Tracing made by New.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t.shutdown == nil {
		return nil
	}
	return t.shutdown(ctx)
}

var _ ledger.Tracer = (*Tracing)(nil)

// Decision starts the span of a ledger decision, "ledger.OP", beneath the
// request's span (ledger.Tracer).
func (t *Tracing) Decision(ctx context.Context, op string, ref ledger.BucketRef, items int) (context.Context, func(ledger.BucketRef, string, error)) {
	ctx, span := t.tracer.Start(ctx, "ledger."+op, trace.WithAttributes(AttrOperation.String(op)))
	if items > 1 {
		span.SetAttributes(AttrItems.Int(items))
	}
	return ctx, func(ref ledger.BucketRef, result string, err error) {
		t.bucket(span, ref)
		end(span, result, err)
	}
}

// bucket puts ref's limit on span, and its key with logKeys.
func (t *Tracing) bucket(span trace.Span, ref ledger.BucketRef) {
	if ref.Limit == "" {
		return
	}
	span.SetAttributes(AttrLimit.String(ref.Limit))
	if t.logKeys {
		span.SetAttributes(AttrKey.String(ref.Key))
	}
}

// end sets span's result, an error status for a failure of budgetd or its
// store (not for a caller's mistake), and ends it.
func end(span trace.Span, result string, err error) {
	if err != nil {
		result = ErrorCode(err)
		switch result {
		case "unavailable", "canceled", "error":
			span.SetStatus(codes.Error, result)
		}
	}
	span.SetAttributes(AttrResult.String(result))
	span.End()
}

// ErrorCode is the result of an operation that ended in err: the code of
// a refused hold or of invalid input (as the API answers it), else how
// storemetrics names the error (not_found, unavailable, …). The error's
// text is never put on a span: a store may quote a bucket key in it.
func ErrorCode(err error) string {
	var ref *ledger.Refusal
	if errors.As(err, &ref) {
		return ref.Code
	}
	var inv *ledger.InvalidError
	if errors.As(err, &inv) {
		return string(inv.Code)
	}
	return storemetrics.Outcome(err)
}

package http_test

import (
	"context"
	"io"
	"net/http"
	"testing"

	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/budgetd/budgetd/internal/tracing"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// BenchmarkFillupTracing is BenchmarkFillup with the access log on (to
// io.Discard), three ways (docs/tracing.md has the figures):
//
//   - off: no OTEL_* variable, as budgetd runs by default: no middleware,
//     no store decorator, no ledger tracer;
//   - noop: all three installed over OpenTelemetry's no-op provider, what
//     the instrumentation itself costs when nothing records;
//   - on: the SDK's provider, every span sampled and batched to an exporter
//     that drops them (the OTLP encoding and the network are not budgetd's).
func BenchmarkFillupTracing(b *testing.B) {
	for _, mode := range []string{"off", "noop", "on"} {
		b.Run(mode, func(b *testing.B) {
			access := budgethttp.NewAccessLog(io.Discard, budgethttp.AccessText)
			b.Cleanup(func() { _ = access.Close(context.Background()) })
			opts := []budgethttp.Option{quiet, budgethttp.WithAccessLog(access)}
			var st ledger.Store = memory.New()
			var svcOpts []ledger.Option
			var tp trace.TracerProvider
			switch mode {
			case "noop":
				tp = noop.NewTracerProvider()
			case "on":
				sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(dropSpans{}))
				b.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
				tp = sdk
			}
			if tp != nil {
				tr := tracing.New(tp, false)
				st = tr.Store(st)
				svcOpts = append(svcOpts, ledger.WithTracer(tr))
				opts = append(opts, budgethttp.WithTracing(tp, tr.Propagator()))
			}
			h := budgethttp.New(ledger.NewService(st, svcOpts...), opts...)
			body := `{"capacity":"1000000000000","leak":{"amount":"1","per":"87600h"},"history":false}`
			expect(b, benchServe(h, "PUT", "/v1/limits/bench", body), http.StatusOK)
			benchFillups(b, h)
		})
	}
}

// dropSpans is an exporter that drops every span.
type dropSpans struct{}

func (dropSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (dropSpans) Shutdown(context.Context) error                             { return nil }

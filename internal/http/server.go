// Package http serves budgetd's REST API with echo: limits, buckets
// (CanAccept, Fillup, Drain, history), multi-bucket Fillup and holds, plus
// /healthz, /readyz, /metrics and /openapi.json. Every error is RFC 9457
// problem+json with a stable code (problem.go); amounts travel as decimal
// strings and JSON numbers are read from their text, never through float64.
package http

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/budgetd/budgetd/docs"
	"github.com/budgetd/budgetd/internal/auth"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/series"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// OpenAPI is the API description served at /openapi.json: docs.OpenAPI,
// the repository's one docs/openapi.json.
var OpenAPI = docs.OpenAPI

// readyTimeout bounds the store ping behind /readyz.
const readyTimeout = 2 * time.Second

// Option configures the handler.
type Option func(*server)

// WithLogger sets where failures are logged (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(s *server) { s.log = l } }

// WithAccessLog writes one line per request to a (method, route, status,
// duration, request id, key name) and adds its dropped-lines counter to
// /metrics. Without it there is no access log.
func WithAccessLog(a *AccessLog) Option { return func(s *server) { s.access = a } }

// WithLogKeys puts the request's path, bucket keys included, on the
// access-log line and on the log line of a failed request. Without it they
// carry the route template only, since keys are often user ids or
// addresses.
func WithLogKeys(on bool) Option { return func(s *server) { s.logKeys = on } }

// WithMaxTTL sets the longest hold accepted; it must match the service's
// (ledger.WithMaxTTL). Default 24h.
func WithMaxTTL(d time.Duration) Option { return func(s *server) { s.maxTTL = d } }

// WithCollectors registers further metrics (a store's, for example) on the
// handler's /metrics.
func WithCollectors(cs ...prometheus.Collector) Option {
	return func(s *server) { s.extra = append(s.extra, cs...) }
}

// WithAuth turns authentication on: keys returns the API keys in force for
// each request (so that a reload takes effect at once). Without it the API
// is open.
func WithAuth(keys func() *auth.Keys) Option { return func(s *server) { s.keys = keys } }

// WithDraining makes /readyz answer 503 once draining is closed, so that a
// load balancer stops sending new work while in-flight requests finish.
func WithDraining(draining <-chan struct{}) Option { return func(s *server) { s.draining = draining } }

type server struct {
	svc      *ledger.Service
	log      *slog.Logger
	access   *AccessLog
	maxTTL   time.Duration
	extra    []prometheus.Collector
	keys     func() *auth.Keys
	draining <-chan struct{}
	logKeys  bool

	tracer     trace.Tracer // WithTracing; nil without
	propagator propagation.TextMapPropagator
	spanNames  map[[2]string]spanName

	registry *prometheus.Registry
	m        *metrics
	metricsH http.Handler
	routeSet map[string]bool

	observers series.Cache[observerKey, prometheus.Observer] // requestObserver's series
}

// New returns the API handler over svc.
func New(svc *ledger.Service, opts ...Option) http.Handler {
	s := &server{svc: svc, log: slog.Default(), maxTTL: 24 * time.Hour}
	for _, o := range opts {
		o(s)
	}
	s.m = newMetrics()
	s.registry = prometheus.NewRegistry()
	s.registry.MustRegister(s.m.collectors()...)
	s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.registry.MustRegister(s.extra...)
	if s.access != nil {
		s.registry.MustRegister(s.access.dropped)
	}
	s.metricsH = promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{})

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.errorHandler
	e.Use(requestID)
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisableStackAll: true, LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
		s.log.Error("panic", "route", c.Path(), "request_id", requestIDOf(c), "err", err, "stack", string(stack))
		return err
	}}))
	if s.tracer != nil {
		e.Use(s.traceRequest)
	}
	e.Use(s.observe)
	e.Use(s.authenticate())
	s.routes(e)
	s.routeSet = map[string]bool{}
	for _, r := range e.Routes() {
		s.routeSet[r.Path] = true
	}
	s.spanNames = spanNames(e)
	return headAsGet(e)
}

func (s *server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// errDraining is /readyz once shutdown has begun.
var errDraining = &echo.HTTPError{Code: http.StatusServiceUnavailable, Message: "shutting down"}

func (s *server) readyz(c echo.Context) error {
	select {
	case <-s.draining:
		return errDraining
	default:
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), readyTimeout)
	defer cancel()
	if err := s.svc.Ping(ctx); err != nil {
		s.log.Warn("store not ready", "err", err)
		return ledger.ErrUnavailable
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
}

func (s *server) openapi(c echo.Context) error {
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, OpenAPI)
}

func (s *server) metrics(c echo.Context) error {
	s.metricsH.ServeHTTP(c.Response(), c.Request())
	return nil
}

// Package http serves budgetd's REST API with echo: limits, buckets
// (CanAccept, Fillup, Drain, history), multi-bucket Fillup and holds, plus
// /healthz, /readyz, /metrics and /openapi.json. Every error is RFC 9457
// problem+json with a stable code (problem.go); amounts travel as decimal
// strings and JSON numbers are read from their text, never through float64.
package http

import (
	"context"
	_ "embed"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// OpenAPI is the API description served at /openapi.json; docs/openapi.json
// is the same file.
//
//go:embed openapi.json
var OpenAPI []byte

// readyTimeout bounds the store ping behind /readyz.
const readyTimeout = 2 * time.Second

// Option configures the handler.
type Option func(*server)

// WithLogger sets where failures are logged (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(s *server) { s.log = l } }

// WithMaxTTL sets the longest hold accepted; it must match the service's
// (ledger.WithMaxTTL). Default 24h.
func WithMaxTTL(d time.Duration) Option { return func(s *server) { s.maxTTL = d } }

// WithCollectors registers further metrics (a store's, for example) on the
// handler's /metrics.
func WithCollectors(cs ...prometheus.Collector) Option {
	return func(s *server) { s.extra = append(s.extra, cs...) }
}

type server struct {
	svc    *ledger.Service
	log    *slog.Logger
	maxTTL time.Duration
	extra  []prometheus.Collector

	registry *prometheus.Registry
	requests *prometheus.HistogramVec
	metricsH http.Handler
}

// New returns the API handler over svc.
func New(svc *ledger.Service, opts ...Option) http.Handler {
	s := &server{svc: svc, log: slog.Default(), maxTTL: 24 * time.Hour}
	for _, o := range opts {
		o(s)
	}
	s.registry = prometheus.NewRegistry()
	s.requests = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "budgetd_http_request_duration_seconds",
		Help:    "Time to answer an API request, by route and status code.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"method", "route", "code"})
	s.registry.MustRegister(s.requests, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.registry.MustRegister(s.extra...)
	s.metricsH = promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{})

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = errorHandler(s.log)
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisableStackAll: true, LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
		s.log.Error("panic", "path", c.Request().URL.Path, "err", err, "stack", string(stack))
		return err
	}}))
	e.Use(s.observe)
	s.routes(e)
	return e
}

// observe records the duration of each request by route.
func (s *server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		s.requests.WithLabelValues(c.Request().Method, c.Path(), strconv.Itoa(c.Response().Status)).Observe(time.Since(start).Seconds())
		return nil
	}
}

func (s *server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

func (s *server) readyz(c echo.Context) error {
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

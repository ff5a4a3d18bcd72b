package http

import (
	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/series"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"
)

// metrics are the handler's own series. Every label value comes from a
// fixed set or is the name of a limit that exists (recorded only after the
// store answered), never a bucket key, a path or a token.
type metrics struct {
	requests     *prometheus.HistogramVec
	decisions    *prometheus.CounterVec
	charged      *prometheus.CounterVec
	holds        *prometheus.CounterVec
	replays      *prometheus.CounterVec
	inFlight     prometheus.Counter
	authFailures *prometheus.CounterVec
	shadowDenied *prometheus.CounterVec
	grpcRequests *prometheus.HistogramVec // RPC
	// The series decided counts in, by labels (package series).
	decisionSeries series.Cache[[3]string, prometheus.Counter]
	chargedSeries  series.Cache[string, prometheus.Counter]
}

// authReasons are the reasons a request is refused by authentication.
var authReasons = []string{"missing", "malformed", "unknown", "query", "scope", "limit"}

// requestBuckets are the bounds of the request duration histograms.
var requestBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}

func newMetrics() *metrics {
	m := &metrics{
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "budgetd_http_request_duration_seconds",
			Help:    "Time to answer an API request, by method, route template and status code (unknown methods and paths are \"other\").",
			Buckets: requestBuckets,
		}, []string{"method", "route", "code"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "budgetd_decisions_total",
			Help: "Decisions made, by limit, operation (fillup, multi_fillup, reserve, check; envoy for a charged descriptor of the Envoy rate-limit service) and result (accepted, denied, never_fits); a multi-bucket item counts by whether its bucket could take it. Replays are not counted again.",
		}, []string{"limit", "op", "result"}),
		charged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "budgetd_charged_total",
			Help: "Amount charged by accepted Fillups and multi-bucket Fillups, by limit (a float approximation of exact decimal sums; commits of holds are in budgetd_hold_events_total).",
		}, []string{"limit"}),
		holds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "budgetd_hold_events_total",
			Help: "Hold events by kind: reserved, reserve_denied, committed, released, and refusals (exceeds_hold, reservation_expired, reservation_closed).",
		}, []string{"kind"}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "budgetd_idempotent_replays_total",
			Help: "Answers replayed from an Idempotency-Key record, by operation.",
		}, []string{"op"}),
		inFlight: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "budgetd_idempotency_in_flight_total",
			Help: "Requests answered 409 idempotency_in_flight: a duplicate Idempotency-Key while the first call was still running.",
		}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "budgetd_auth_failures_total",
			Help: "Requests refused by authentication, by reason: missing, malformed, unknown (401); scope, limit (403); query (a token in the URL).",
		}, []string{"reason"}),
		shadowDenied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "budgetd_shadow_denied_total",
			Help: "Costs a limit in shadow mode accepted and charged that enforce mode would have denied, by limit and operation (fillup, multi_fillup, reserve, envoy).",
		}, []string{"limit", "op"}),
	}
	m.grpcRequests = newGRPCRequests()
	for _, r := range authReasons {
		m.authFailures.WithLabelValues(r)
	}
	return m
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.decisions, m.charged, m.holds, m.replays, m.inFlight, m.authFailures, m.shadowDenied, m.grpcRequests}
}

// decided counts one decision on a limit; an accepted charge also counts
// its cost.
func (m *metrics) decided(limit, op string, d bucket.Decision, cost decimal.Decimal, charges bool) {
	result := "accepted"
	switch {
	case d.NeverFits:
		result = "never_fits"
	case !d.Accepted:
		result = "denied"
	}
	m.decisionSeries.Get([3]string{limit, op, result}, func() prometheus.Counter {
		return m.decisions.WithLabelValues(limit, op, result)
	}).Inc()
	if charges && d.ShadowDenied {
		m.shadowDenied.WithLabelValues(limit, op).Inc()
	}
	if charges && d.Accepted && cost.IsPositive() {
		m.chargedSeries.Get(limit, func() prometheus.Counter { return m.charged.WithLabelValues(limit) }).Add(cost.InexactFloat64())
	}
}

// forget drops a deleted limit's series.
func (m *metrics) forget(limit string) {
	m.decisions.DeletePartialMatch(prometheus.Labels{"limit": limit})
	m.charged.DeletePartialMatch(prometheus.Labels{"limit": limit})
	m.shadowDenied.DeletePartialMatch(prometheus.Labels{"limit": limit})
	// After the deletion (series.Cache.Reset): a limit of the same name
	// counts in new series.
	m.decisionSeries.Reset()
	m.chargedSeries.Reset()
}

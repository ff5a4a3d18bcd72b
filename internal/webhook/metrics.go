package webhook

import (
	"github.com/budgetd/budgetd/api"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the deliverer's series (docs/alerts.md, "Push").
type metrics struct {
	events     *prometheus.CounterVec
	deliveries *prometheus.CounterVec
	lag        prometheus.Histogram
}

func newMetrics() *metrics {
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "budgetd_events_total",
			Help: "Events read from the outbox by the instance that holds the webhook lease, by type (threshold.crossed, threshold.recovered); an event read again after a takeover counts again.",
		}, []string{"type"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "budgetd_webhook_deliveries_total",
			Help: "Webhook requests by outcome: delivered (a 2xx), failed (anything else; retried), gave_up (an event still failing after the retry period).",
		}, []string{"outcome"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "budgetd_webhook_delivery_lag_seconds",
			Help:    "Time from an event (the store's clock at the write) to the 2xx that delivered it.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600, 21600, 86400},
		}),
	}
	for _, t := range []string{api.EventThresholdCrossed, api.EventThresholdRecovered} {
		m.events.WithLabelValues(t)
	}
	for _, o := range []string{"delivered", "failed", "gave_up"} {
		m.deliveries.WithLabelValues(o)
	}
	return m
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.events, m.deliveries, m.lag}
}

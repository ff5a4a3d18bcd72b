package redis

import "github.com/prometheus/client_golang/prometheus"

var clockStepsDesc = prometheus.NewDesc("budgetd_redis_clock_steps_total",
	"Calls that found a bucket's stored time more than a minute ahead of the Redis clock (a clock stepped back) and took it as now.", nil, nil)

// Stats are the store's counters.
type Stats struct {
	// ClockSteps counts the calls that found a bucket's stored time more
	// than ledger.ClockStep ahead of the Redis clock (taken as now).
	ClockSteps uint64
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats { return Stats{ClockSteps: s.clockSteps.Load()} }

// Collector returns a Prometheus collector of the store's counters, for the
// caller to register.
func (s *Store) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Store }

func (c collector) Describe(ch chan<- *prometheus.Desc) { ch <- clockStepsDesc }

func (c collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(clockStepsDesc, prometheus.CounterValue, float64(c.s.Stats().ClockSteps))
}

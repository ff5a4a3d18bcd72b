package memory

import "github.com/prometheus/client_golang/prometheus"

var (
	clockStepsDesc = prometheus.NewDesc("budgetd_memory_clock_steps_total",
		"Steps of the wall clock the memory store detected (its own clock advances monotonically through them).", nil, nil)
	idemRecordsDesc = prometheus.NewDesc("budgetd_memory_idempotency_records",
		"Idempotency-Key records the memory store keeps.", nil, nil)
	idemBytesDesc = prometheus.NewDesc("budgetd_memory_idempotency_bytes",
		"Estimated heap bytes of the memory store's idempotency records.", nil, nil)
	idemRefusedDesc = prometheus.NewDesc("budgetd_memory_idempotency_refused_total",
		"Calls with a new Idempotency-Key refused because the records, or the caller's share of them, were full (503 idempotency_store_full).", nil, nil)
)

// Collector returns a Prometheus collector of the store's clock-step counter
// and idempotency-record gauges, for the caller to register.
func (s *Store) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Store }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{clockStepsDesc, idemRecordsDesc, idemBytesDesc, idemRefusedDesc} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	t := &c.s.idem
	t.mu.Lock()
	records, bytes, refused := len(t.records), t.bytes, t.refused
	t.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(clockStepsDesc, prometheus.CounterValue, float64(c.s.clk.steps.Load()))
	ch <- prometheus.MustNewConstMetric(idemRecordsDesc, prometheus.GaugeValue, float64(records))
	ch <- prometheus.MustNewConstMetric(idemBytesDesc, prometheus.GaugeValue, float64(bytes))
	ch <- prometheus.MustNewConstMetric(idemRefusedDesc, prometheus.CounterValue, float64(refused))
}

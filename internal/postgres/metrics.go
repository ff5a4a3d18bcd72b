package postgres

import "github.com/prometheus/client_golang/prometheus"

var (
	retriesDesc = prometheus.NewDesc("budgetd_postgres_retries_total",
		"Statements that PostgreSQL failed with a retryable error, by reason (serialization, deadlock, idempotency).",
		[]string{"reason"}, nil)
	gaveUpDesc = prometheus.NewDesc("budgetd_postgres_gave_up_total",
		"Calls that still failed with a retryable error after the last attempt.", nil, nil)
	unavailableDesc = prometheus.NewDesc("budgetd_postgres_unavailable_total",
		"Calls that failed because the database was unreachable, overloaded or too slow.", nil, nil)
	connsDesc = prometheus.NewDesc("budgetd_postgres_pool_connections",
		"Connections of the pool, by state (acquired, idle, constructing).", []string{"state"}, nil)
	maxConnsDesc = prometheus.NewDesc("budgetd_postgres_pool_max_connections",
		"The pool's maximum size.", nil, nil)
	periodTablesDesc = prometheus.NewDesc("budgetd_postgres_period_tables_total",
		"Tables of period starts recomputed because the database clock had left a periodic limit's table.", nil, nil)
	clockStepsDesc = prometheus.NewDesc("budgetd_postgres_clock_steps_total",
		"Buckets found with a stored time more than a minute ahead of the database clock (a clock stepped back), taken as now.", nil, nil)
)

// Collector returns a Prometheus collector of the store's retry counters and
// pool gauges, for the caller to register.
func (s *Store) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Store }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{retriesDesc, gaveUpDesc, unavailableDesc, connsDesc, maxConnsDesc, clockStepsDesc, periodTablesDesc} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	ch <- prometheus.MustNewConstMetric(retriesDesc, prometheus.CounterValue, float64(st.SerializationRetries), "serialization")
	ch <- prometheus.MustNewConstMetric(retriesDesc, prometheus.CounterValue, float64(st.DeadlockRetries), "deadlock")
	ch <- prometheus.MustNewConstMetric(retriesDesc, prometheus.CounterValue, float64(st.IdempotencyRetries), "idempotency")
	ch <- prometheus.MustNewConstMetric(gaveUpDesc, prometheus.CounterValue, float64(st.GaveUp))
	ch <- prometheus.MustNewConstMetric(unavailableDesc, prometheus.CounterValue, float64(st.Unavailable))
	ch <- prometheus.MustNewConstMetric(clockStepsDesc, prometheus.CounterValue, float64(st.ClockSteps))
	ch <- prometheus.MustNewConstMetric(periodTablesDesc, prometheus.CounterValue, float64(st.PeriodTables))
	ps := c.s.pool.Stat()
	ch <- prometheus.MustNewConstMetric(connsDesc, prometheus.GaugeValue, float64(ps.AcquiredConns()), "acquired")
	ch <- prometheus.MustNewConstMetric(connsDesc, prometheus.GaugeValue, float64(ps.IdleConns()), "idle")
	ch <- prometheus.MustNewConstMetric(connsDesc, prometheus.GaugeValue, float64(ps.ConstructingConns()), "constructing")
	ch <- prometheus.MustNewConstMetric(maxConnsDesc, prometheus.GaugeValue, float64(ps.MaxConns()))
}

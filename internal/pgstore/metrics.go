package pgstore

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// op is a store operation, the op label of the query metrics.
type op int

const (
	opLookup op = iota
	opLookupMany
	opPut
	opDelete
	opQuery
	opLoad
	opTransaction
	opFold
	numOps
)

func (o op) String() string {
	switch o {
	case opLookup:
		return "lookup"
	case opLookupMany:
		return "lookup_many"
	case opPut:
		return "put"
	case opQuery:
		return "query"
	case opLoad:
		return "load"
	case opTransaction:
		return "transaction"
	case opFold:
		return "fold"
	default:
		return "delete"
	}
}

// metrics are the store's query metrics.
type metrics struct {
	queries  *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics() *metrics {
	return &metrics{
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmcache_sql_queries_total",
			Help: "Warehouse operations by namespace, op (lookup, lookup_many, put, delete, transaction, fold: independent writes in one transaction, query, load) and result: ok, including answers " +
				"about the request such as a failed If-Match, or error when the warehouse failed.",
		}, []string{"namespace", "op", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmcache_sql_query_duration_seconds",
			Help:    "Time of warehouse operations by namespace and op, including waiting for a pooled connection.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 13), // 0.5ms to about 2s
		}, []string{"namespace", "op"}),
	}
}

// opMetrics are the metrics of one op of one namespace, resolved once so
// that the query path does not look up label values.
type opMetrics struct {
	ok, failed prometheus.Counter
	duration   prometheus.Observer
}

// forNamespace resolves the metrics of every op of namespace name.
func (m *metrics) forNamespace(name string) [numOps]opMetrics {
	var out [numOps]opMetrics
	for o := range numOps {
		out[o] = opMetrics{
			ok:       m.queries.WithLabelValues(name, o.String(), "ok"),
			failed:   m.queries.WithLabelValues(name, o.String(), "error"),
			duration: m.duration.WithLabelValues(name, o.String()),
		}
	}
	return out
}

// observe records one operation that started at start. A nil error or an
// error about the request counts as ok.
func (m opMetrics) observe(start time.Time, err error) {
	m.duration.Observe(time.Since(start).Seconds())
	if err == nil || isRequestError(err) {
		m.ok.Inc()
		return
	}
	m.failed.Inc()
}

// poolCollector exports the statistics of the store's pools (the shared
// one and the segment lanes', summed), read when Prometheus scrapes.
type poolCollector struct {
	pools       func() []*pgxpool.Pool
	conns       *prometheus.Desc
	maxConns    *prometheus.Desc
	acquires    *prometheus.Desc
	emptyAcqs   *prometheus.Desc
	acquireWait *prometheus.Desc
}

func newPoolCollector(pools func() []*pgxpool.Pool) *poolCollector {
	return &poolCollector{
		pools: pools,
		conns: prometheus.NewDesc("warmcache_sql_pool_connections",
			"Connections in the warehouse pool by state: idle, acquired (in use) or constructing.", []string{"state"}, nil),
		maxConns: prometheus.NewDesc("warmcache_sql_pool_max_connections",
			"The size limit of the warehouse pool.", nil, nil),
		acquires: prometheus.NewDesc("warmcache_sql_pool_acquires_total",
			"Successful acquisitions of a connection from the warehouse pool.", nil, nil),
		emptyAcqs: prometheus.NewDesc("warmcache_sql_pool_empty_acquires_total",
			"Acquisitions that had to wait for a connection because the warehouse pool had no idle one.", nil, nil),
		acquireWait: prometheus.NewDesc("warmcache_sql_pool_acquire_wait_seconds_total",
			"Total time spent acquiring connections from the warehouse pool.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.conns, c.maxConns, c.acquires, c.emptyAcqs, c.acquireWait} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	var idle, acquired, constructing, maxConns, acquires, empty float64
	var wait time.Duration
	for _, p := range c.pools() {
		s := p.Stat()
		idle += float64(s.IdleConns())
		acquired += float64(s.AcquiredConns())
		constructing += float64(s.ConstructingConns())
		maxConns += float64(s.MaxConns())
		acquires += float64(s.AcquireCount())
		empty += float64(s.EmptyAcquireCount())
		wait += s.AcquireDuration()
	}
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, idle, "idle")
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, acquired, "acquired")
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, constructing, "constructing")
	ch <- prometheus.MustNewConstMetric(c.maxConns, prometheus.GaugeValue, maxConns)
	ch <- prometheus.MustNewConstMetric(c.acquires, prometheus.CounterValue, acquires)
	ch <- prometheus.MustNewConstMetric(c.emptyAcqs, prometheus.CounterValue, empty)
	ch <- prometheus.MustNewConstMetric(c.acquireWait, prometheus.CounterValue, wait.Seconds())
}

package httpapi

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/cowmap"
	"github.com/warmcache/warmcache/internal/promreg"
)

type metrics struct {
	duration *prometheus.HistogramVec
	// inflight counts the requests being served, which a GaugeFunc
	// reports: one atomic add per request and end, where a Gauge's
	// Inc and Dec each retry a compare-and-swap while the cores contend.
	inflight atomic.Int64
	routes   routeLabels
}

// The method and status labels of warmcache_http_request_duration_seconds:
// a request's method and status class index these arrays.
var (
	methodLabels = [...]string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete,
		http.MethodPatch, http.MethodOptions, "other"}
	statusLabels = [...]string{"1xx", "2xx", "3xx", "4xx", "5xx", "other"}
)

// routeSeries holds the duration observers of one route pattern, one per
// method and status class, each taken from the histogram once, when the
// first request with those labels ends: a request then records its
// duration without looking its labels up.
type routeSeries struct {
	pattern string
	series  [len(methodLabels)][len(statusLabels)]atomic.Pointer[observer]
}

type observer struct{ prometheus.Observer }

// observer returns the observer of the route's series for a method and
// status class index.
func (s *routeSeries) observer(vec *prometheus.HistogramVec, method, status int) prometheus.Observer {
	cell := &s.series[method][status]
	if o := cell.Load(); o != nil {
		return o.Observer
	}
	// Two first requests may both look the series up: they get the same
	// child of the vector.
	o := &observer{vec.WithLabelValues(s.pattern, methodLabels[method], statusLabels[status])}
	cell.Store(o)
	return o.Observer
}

// routeLabels caches the series of each chi route, so that labelling a
// request does not join its patterns anew: the patterns of one route are
// the same strings every time, keyed here by the first and the last. A
// request reads them without a lock.
type routeLabels struct {
	unmatched routeSeries
	known     cowmap.Map[[2]string, *routeSeries]
}

// series returns the series of a request's route pattern, or of
// "unmatched".
func (l *routeLabels) series(rc *chi.Context) *routeSeries {
	if rc == nil || len(rc.RoutePatterns) == 0 {
		return &l.unmatched
	}
	k := [2]string{rc.RoutePatterns[0], rc.RoutePatterns[len(rc.RoutePatterns)-1]}
	if s, ok := l.known.Load(k); ok {
		return s
	}
	p := rc.RoutePattern()
	if p == "" {
		return &l.unmatched
	}
	return l.known.LoadOrAdd(k, func() *routeSeries { return &routeSeries{pattern: p} })
}

// statusIndex returns the index in statusLabels of a status: "2xx" for 200
// and so on.
func statusIndex(status int) int {
	if c := status / 100; c >= 1 && c <= 5 {
		return c - 1
	}
	return len(statusLabels) - 1
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmcache_http_request_duration_seconds",
			Help:    "REST request duration by route pattern, method and status class (2xx, 4xx, 5xx).",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
		}, []string{"route", "method", "status"}),
	}
	inflight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "warmcache_http_requests_in_flight",
		Help: "REST requests being served.",
	}, func() float64 { return float64(m.inflight.Load()) })
	m.routes.unmatched.pattern = "unmatched"
	if err := promreg.Register(reg, "httpapi", m.duration, inflight); err != nil {
		return nil, err
	}
	return m, nil
}

// middleware records each request's duration under its route pattern, so
// that the label stays bounded whatever the keys are.
func (m *metrics) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		m.inflight.Add(1)
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			m.inflight.Add(-1)
			m.routes.series(chi.RouteContext(r.Context())).observer(m.duration, methodIndex(r.Method), statusIndex(sw.status)).
				Observe(time.Since(start).Seconds())
		}()
		next.ServeHTTP(sw, r)
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(status int) {
	if !w.wrote {
		w.status, w.wrote = status, true
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// methodIndex returns the index in methodLabels of a method, keeping the
// label bounded: unknown methods are "other".
func methodIndex(m string) int {
	switch m {
	case http.MethodGet:
		return 0
	case http.MethodHead:
		return 1
	case http.MethodPost:
		return 2
	case http.MethodPut:
		return 3
	case http.MethodDelete:
		return 4
	case http.MethodPatch:
		return 5
	case http.MethodOptions:
		return 6
	default:
		return len(methodLabels) - 1
	}
}

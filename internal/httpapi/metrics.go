package httpapi

import (
	"net/http"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	duration *prometheus.HistogramVec
	inflight prometheus.Gauge
	routes   routeLabels
}

// routeLabels caches the route pattern of each chi route, so that labelling
// a request does not join its patterns anew: the patterns of one route are
// the same strings every time, keyed here by the first and the last.
type routeLabels struct {
	mu    sync.RWMutex
	known map[[2]string]string
}

// label returns the route pattern of a request, or "unmatched".
func (l *routeLabels) label(rc *chi.Context) string {
	if rc == nil || len(rc.RoutePatterns) == 0 {
		return "unmatched"
	}
	k := [2]string{rc.RoutePatterns[0], rc.RoutePatterns[len(rc.RoutePatterns)-1]}
	l.mu.RLock()
	p, ok := l.known[k]
	l.mu.RUnlock()
	if ok {
		return p
	}
	if p = rc.RoutePattern(); p == "" {
		p = "unmatched"
	}
	l.mu.Lock()
	if l.known == nil {
		l.known = make(map[[2]string]string)
	}
	l.known[k] = p
	l.mu.Unlock()
	return p
}

var statusClasses = [...]string{"1xx", "1xx", "2xx", "3xx", "4xx", "5xx"}

// statusClass returns "2xx" for 200 and so on.
func statusClass(status int) string {
	if c := status / 100; c >= 1 && c <= 5 {
		return statusClasses[c]
	}
	return "other"
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmcache_http_request_duration_seconds",
			Help:    "REST request duration by route pattern, method and status class (2xx, 4xx, 5xx).",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
		}, []string{"route", "method", "status"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "warmcache_http_requests_in_flight",
			Help: "REST requests being served.",
		}),
	}
	for _, c := range []prometheus.Collector{m.duration, m.inflight} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// middleware records each request's duration under its route pattern, so
// that the label stays bounded whatever the keys are.
func (m *metrics) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		m.inflight.Inc()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			m.inflight.Dec()
			m.duration.WithLabelValues(m.routes.label(chi.RouteContext(r.Context())), methodLabel(r.Method), statusClass(sw.status)).
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

// methodLabel keeps the method label bounded: unknown methods are "other".
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions:
		return m
	default:
		return "other"
	}
}

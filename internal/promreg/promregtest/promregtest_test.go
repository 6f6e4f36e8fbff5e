package promregtest_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warmcache/warmcache/internal/promreg/promregtest"
)

func TestValue(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "h"}, []string{"op", "result"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "h"})
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "h_seconds", Help: "h"}, []string{"op"})
	reg.MustRegister(c, g, h)
	c.WithLabelValues("get", "ok").Add(2)
	c.WithLabelValues("get", "error").Add(3)
	c.WithLabelValues("set", "ok").Add(5)
	g.Set(7)
	h.WithLabelValues("get").Observe(0.5)
	h.WithLabelValues("get").Observe(1.5)
	h.WithLabelValues("set").Observe(4)

	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
		ok     bool
	}{
		{"c_total", []string{"op", "get", "result", "ok"}, 2, true},
		{"c_total", []string{"op", "get"}, 5, true},
		{"c_total", nil, 10, true},
		{"c_total", []string{"op", "delete"}, 0, false},
		{"c_total", []string{"zone", "a"}, 0, false},
		{"g", nil, 7, true},
		{"h_seconds", []string{"op", "get"}, 2, true},
		{"missing", nil, 0, false},
	} {
		got, ok := promregtest.Lookup(t, reg, tc.name, tc.labels...)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Lookup(%s, %q) = %v, %v; want %v, %v", tc.name, tc.labels, got, ok, tc.want, tc.ok)
		}
		if got := promregtest.Value(t, reg, tc.name, tc.labels...); got != tc.want {
			t.Errorf("Value(%s, %q) = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	if n, sum := promregtest.Histogram(t, reg, "h_seconds", "op", "get"); n != 2 || sum != 2 {
		t.Errorf("Histogram = %d, %v; want 2, 2", n, sum)
	}
	// The one series of a collector the test holds is testutil's to read.
	if got := testutil.ToFloat64(c.WithLabelValues("set", "ok")); got != promregtest.Value(t, reg, "c_total", "op", "set") {
		t.Errorf("testutil reads %v, promregtest another", got)
	}
}

// Package promregtest reads what a test's Prometheus registry gathers: the
// value of the series of one metric picked by their labels, the one reader
// of every package's tests. It stands beside client_golang's own test kit
// (prometheus/testutil), which counts a metric's series (GatherAndCount),
// lints the names (GatherAndLint) and reads a collector the test holds
// (ToFloat64), but has no reader of one labeled series of a registry.
package promregtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Value returns the sum of the series of the metric name whose labels
// include labels, given as name, value pairs: a counter's or gauge's value,
// a histogram's or summary's count of observations. It is zero when no
// series matches, as a vector's series is before its first use.
func Value(tb testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	tb.Helper()
	v, _ := Lookup(tb, g, name, labels...)
	return v
}

// Lookup is Value, and whether a series matched.
func Lookup(tb testing.TB, g prometheus.Gatherer, name string, labels ...string) (float64, bool) {
	tb.Helper()
	if len(labels)%2 != 0 {
		tb.Fatalf("promregtest: labels %q are not name, value pairs", labels)
	}
	families, err := g.Gather()
	if err != nil {
		tb.Fatalf("promregtest: gather: %v", err)
	}
	var sum float64
	found := false
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if has(m, labels) {
				sum += value(m)
				found = true
			}
		}
	}
	return sum, found
}

// Histogram returns the count and the sum of the observations of the
// histogram name's series whose labels include labels.
func Histogram(tb testing.TB, g prometheus.Gatherer, name string, labels ...string) (count uint64, sum float64) {
	tb.Helper()
	families, err := g.Gather()
	if err != nil {
		tb.Fatalf("promregtest: gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if h := m.GetHistogram(); h != nil && has(m, labels) {
				count += h.GetSampleCount()
				sum += h.GetSampleSum()
			}
		}
	}
	return count, sum
}

func has(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == labels[i] {
				found = l.GetValue() == labels[i+1]
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	case m.Summary != nil:
		return float64(m.Summary.GetSampleCount())
	}
	return 0
}

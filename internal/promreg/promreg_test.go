package promreg_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/promreg"
)

func counter(name string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: "A test counter."})
}

// registered returns the names of the metrics reg gathers.
func registered(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	return names
}

func TestRegister(t *testing.T) {
	t.Run("all", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		if err := promreg.Register(reg, "test", counter("a_total"), counter("b_total")); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(registered(t, reg), ","); got != "a_total,b_total" {
			t.Errorf("registered %s, want a_total,b_total", got)
		}
	})
	t.Run("none when one fails", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		taken := counter("taken_total")
		if err := reg.Register(taken); err != nil {
			t.Fatal(err)
		}
		err := promreg.Register(reg, "test", counter("a_total"), counter("taken_total"), counter("b_total"))
		var already prometheus.AlreadyRegisteredError
		if !errors.As(err, &already) || !strings.HasPrefix(err.Error(), "test: register metrics: ") {
			t.Fatalf("err = %v, want an AlreadyRegisteredError prefixed with the component", err)
		}
		if got := strings.Join(registered(t, reg), ","); got != "taken_total" {
			t.Errorf("registered %s after the failure, want only the collector that was there (taken_total)", got)
		}
	})
	t.Run("the same collector twice", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		c := counter("a_total")
		if err := promreg.Register(reg, "test", c); err != nil {
			t.Fatal(err)
		}
		if err := promreg.Register(reg, "test", c); err != nil {
			t.Errorf("registering the same collector again: %v, want nil", err)
		}
		if err := promreg.Register(reg, "test", counter("b_total"), c, counter("a_total")); err == nil {
			t.Fatal("another collector of a registered metric was registered")
		}
		if got := strings.Join(registered(t, reg), ","); got != "a_total" {
			t.Errorf("registered %s after the failure, want a_total kept and b_total rolled back", got)
		}
	})
	t.Run("nil registerer", func(t *testing.T) {
		if err := promreg.Register(nil, "test", counter("a_total")); err != nil {
			t.Errorf("Register(nil) = %v, want nil", err)
		}
	})
}

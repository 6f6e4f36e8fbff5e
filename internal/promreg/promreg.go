// Package promreg registers a component's Prometheus collectors, the one
// way every package of the service does it: all of them or none, with an
// error that names the component.
package promreg

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers cs on reg, all or none: when one cannot be
// registered, those it registered before are unregistered again, and the
// error, prefixed with component (such as "rediscache"), wraps
// prometheus's. A collector that reg already holds (the same collector,
// registered twice) counts as registered and is left in place on failure;
// another collector with the same metric is an error, since two
// components would then write one series. A nil reg registers nothing.
func Register(reg prometheus.Registerer, component string, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	var done []prometheus.Collector
	for _, c := range cs {
		err := reg.Register(c)
		var already prometheus.AlreadyRegisteredError
		switch {
		case err == nil:
			done = append(done, c)
		case errors.As(err, &already) && already.ExistingCollector == c:
		default:
			for _, d := range done {
				reg.Unregister(d)
			}
			return fmt.Errorf("%s: register metrics: %w", component, err)
		}
	}
	return nil
}

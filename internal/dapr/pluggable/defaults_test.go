package pluggable

import (
	"testing"

	"github.com/warmcache/warmcache/internal/config"
)

// A zero Options means what the service's flags default to.
func TestZeroOptionsAreTheFlagDefaults(t *testing.T) {
	if defaultMaxValueBytes != config.DefaultDaprMaxValueBytes {
		t.Errorf("a zero MaxValueBytes means %d, --dapr-max-value-bytes defaults to %d", defaultMaxValueBytes, config.DefaultDaprMaxValueBytes)
	}
}

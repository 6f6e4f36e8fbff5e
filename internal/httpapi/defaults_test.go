package httpapi

import (
	"testing"

	"github.com/warmcache/warmcache/internal/config"
)

// A zero Options means what the service's flags default to.
func TestZeroOptionsAreTheFlagDefaults(t *testing.T) {
	if defaultMaxInflight != config.DefaultMaxInflight {
		t.Errorf("a zero MaxInflight means %d, --max-inflight defaults to %d", defaultMaxInflight, config.DefaultMaxInflight)
	}
}

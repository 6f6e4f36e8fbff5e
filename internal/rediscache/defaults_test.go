package rediscache

import (
	"slices"
	"testing"

	"github.com/warmcache/warmcache/internal/config"
)

// A zero Options means what the service's flags default to.
func TestZeroOptionsAreTheFlagDefaults(t *testing.T) {
	o := Options{}.withDefaults()
	if want := []string{config.DefaultRedisAddr}; !slices.Equal(o.Addrs, want) {
		t.Errorf("empty Addrs mean %v, --redis-addrs defaults to %v", o.Addrs, want)
	}
	if o.Prefix != config.DefaultRedisPrefix {
		t.Errorf("an empty Prefix means %q, --redis-prefix defaults to %q", o.Prefix, config.DefaultRedisPrefix)
	}
	if o.DialTimeout != config.DefaultRedisDialTimeout {
		t.Errorf("a zero DialTimeout means %v, --redis-dial-timeout defaults to %v", o.DialTimeout, config.DefaultRedisDialTimeout)
	}
}

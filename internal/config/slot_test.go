package config_test

import (
	"io"
	"regexp"
	"testing"

	"github.com/warmcache/warmcache/internal/config"
)

// TestReplicationSlotPerDeployment: without --replication-slot, the
// instances of one deployment (the same database, Redis and prefix, however
// they reach them) share a slot, and two deployments on one PostgreSQL
// server never do.
func TestReplicationSlotPerDeployment(t *testing.T) {
	slot := func(t *testing.T, env map[string]string, args ...string) string {
		t.Helper()
		c, err := config.Load(config.ServeCommand, args, func(k string) string { return env[k] }, io.Discard)
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		return c.Capture.ReplicationSlot
	}
	base := map[string]string{
		"WARMCACHE_POSTGRES_DSN": "postgres://app@10.0.0.1:6432/orders?sslmode=disable",
		"WARMCACHE_PG_POOLER":    "pgbouncer",
		"WARMCACHE_REDIS_ADDRS":  "10.0.0.5:6379,10.0.0.6:6379",
	}
	with := func(k, v string) map[string]string {
		env := map[string]string{}
		for key, val := range base {
			env[key] = val
		}
		env[k] = v
		return env
	}
	first := slot(t, base)
	if !regexp.MustCompile(`^warmcache_[0-9a-f]{16}$`).MatchString(first) {
		t.Fatalf("default slot %q; want warmcache_ and 16 hex digits", first)
	}
	// Another instance of the same deployment: another route to the same
	// database, the Redis addresses in another order.
	for name, env := range map[string]map[string]string{
		"another host":    with("WARMCACHE_POSTGRES_DSN", "host=pgbouncer.svc port=6432 user=app dbname=orders"),
		"addresses order": with("WARMCACHE_REDIS_ADDRS", "10.0.0.6:6379,10.0.0.5:6379"),
	} {
		if got := slot(t, env); got != first {
			t.Errorf("%s: slot %q; want the deployment's %q", name, got, first)
		}
	}
	// Other deployments on the same PostgreSQL server.
	for name, env := range map[string]map[string]string{
		"another database":     with("WARMCACHE_POSTGRES_DSN", "postgres://app@10.0.0.1:6432/billing?sslmode=disable"),
		"another Redis prefix": with("WARMCACHE_REDIS_PREFIX", "billing:"),
		"another Redis":        with("WARMCACHE_REDIS_ADDRS", "10.0.0.7:6379"),
		"another Redis db":     with("WARMCACHE_REDIS_DB", "2"),
	} {
		if got := slot(t, env); got == first {
			t.Errorf("%s: slot %q, the same as another deployment's", name, got)
		}
	}
	if got := slot(t, base, "--replication-slot", "orders_cache"); got != "orders_cache" {
		t.Errorf("--replication-slot orders_cache: slot %q", got)
	}
	if _, err := config.Load(config.ServeCommand, []string{"--replication-slot", "Bad-Name"}, func(k string) string { return base[k] }, io.Discard); err == nil {
		t.Error("--replication-slot Bad-Name loaded; want the naming rule's error")
	}
}

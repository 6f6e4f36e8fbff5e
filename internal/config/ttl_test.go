package config_test

import (
	"io"
	"testing"
	"time"

	"github.com/warmcache/warmcache/internal/config"
)

// TestExpiryColumn: a managed namespace has the expiry column its
// migrations add, expires_at, and the built-in ones too; a table made
// elsewhere has one only when it names it.
func TestExpiryColumn(t *testing.T) {
	doc := `namespaces:
  - name: managed
    managed: true
  - name: elsewhere
  - name: named
    expires_column: valid_until
`
	nss, _, err := config.ParseNamespaces([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"expires_at", "", "valid_until"} {
		if got := nss[i].ExpiresColumn; got != want {
			t.Errorf("namespace %s: expiry column %q, want %q", nss[i].Name, got, want)
		}
	}
	c, err := config.Load(config.ServeCommand, nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range c.Namespaces {
		if ns.ExpiresColumn != "expires_at" {
			t.Errorf("built-in namespace %s: expiry column %q, want expires_at", ns.Name, ns.ExpiresColumn)
		}
	}
	if c.Tiers.SweepInterval != time.Second || c.Tiers.SweepBatch != 500 {
		t.Errorf("sweeper = every %v, %d rows; want every 1s, 500 rows", c.Tiers.SweepInterval, c.Tiers.SweepBatch)
	}
	c, err = config.Load(config.ServeCommand, []string{"--sweep-batch", "50"}, env(map[string]string{"WARMCACHE_SWEEP_INTERVAL": "5s"}), io.Discard)
	if err != nil || c.Tiers.SweepInterval != 5*time.Second || c.Tiers.SweepBatch != 50 {
		t.Errorf("sweeper settings = %v, %d, %v; want 5s and 50", c.Tiers.SweepInterval, c.Tiers.SweepBatch, err)
	}
}

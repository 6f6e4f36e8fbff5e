package main

import (
	"strings"
	"testing"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/dialect"
)

// Without a server to ask, migrate plan says why it fell back to
// PostgreSQL: a DSN that does not parse, or a server that does not answer.
func TestPlanDialectFallsBack(t *testing.T) {
	for _, tc := range []struct {
		dsn, want string
	}{
		{"postgres://127.0.0.1:1/none?sslmode=disable&connect_timeout=2", "the default: the server of the DSN did not answer"},
		{"postgres://%zz", "the default: the DSN does not parse"},
	} {
		var cfg config.Config
		cfg.Postgres.DSN = tc.dsn
		d, how := planDialect(t.Context(), cfg)
		if d != dialect.Postgres || !strings.HasPrefix(how, tc.want) {
			t.Errorf("planDialect(%q) = %v, %q; want postgres, %q", tc.dsn, d, how, tc.want)
		}
	}
}

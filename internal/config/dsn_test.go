package config_test

import (
	"io"
	"testing"

	"github.com/warmcache/warmcache/internal/config"
)

// TestApplicationName: Load names the warehouse sessions warmcache, in
// both DSN forms and in the replication DSN, unless the DSN or PGAPPNAME
// names them already.
func TestApplicationName(t *testing.T) {
	tests := []struct {
		name, dsn, pgappname, want string
	}{
		{"URL with a query", "postgres://u@h:5432/db?sslmode=disable", "", "postgres://u@h:5432/db?sslmode=disable&application_name=warmcache"},
		{"URL without a query", "postgres://u@h/db", "", "postgres://u@h/db?application_name=warmcache"},
		{"keyword/value", "host=h dbname=db", "", "host=h dbname=db application_name=warmcache"},
		{"named in the URL", "postgres://u@h/db?application_name=app", "", "postgres://u@h/db?application_name=app"},
		{"named in keyword/value", "host=h application_name=app", "", "host=h application_name=app"},
		{"named by PGAPPNAME", "postgres://u@h/db", "app", "postgres://u@h/db"},
		{"does not parse", "postgres://%zz", "", "postgres://%zz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Load(config.ServeCommand, []string{"--postgres-dsn", tt.dsn}, env(map[string]string{"PGAPPNAME": tt.pgappname}), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if c.Postgres.DSN != tt.want {
				t.Errorf("DSN = %q, want %q", c.Postgres.DSN, tt.want)
			}
			if c.Capture.ReplicationDSN != tt.want { // pooler none: capture takes the warehouse DSN
				t.Errorf("replication DSN = %q, want %q", c.Capture.ReplicationDSN, tt.want)
			}
		})
	}
	c, err := config.Load(config.ServeCommand, []string{"--pg-pooler", "pgbouncer", "--replication-dsn", "postgres://u@h/db"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := "postgres://u@h/db?application_name=warmcache"; c.Capture.ReplicationDSN != want {
		t.Errorf("replication DSN = %q, want %q", c.Capture.ReplicationDSN, want)
	}
}

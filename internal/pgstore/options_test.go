package pgstore_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/pgstore"
)

func TestChooseExecModes(t *testing.T) {
	tests := []struct {
		name      string
		dialect   dialect.Dialect
		opts      pgstore.Options
		wantRead  pgx.QueryExecMode
		wantWrite pgx.QueryExecMode
	}{
		{"postgres direct auto", dialect.Postgres, pgstore.Options{},
			pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheStatement},
		{"postgres pgbouncer auto", dialect.Postgres, pgstore.Options{Pooler: "pgbouncer"},
			pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeCacheDescribe},
		{"greenplum direct auto", dialect.Greenplum, pgstore.Options{ExecMode: "auto"},
			pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement},
		{"greenplum pgbouncer auto", dialect.Greenplum, pgstore.Options{Pooler: "pgbouncer"},
			pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheDescribe},
		{"explicit overrides greenplum", dialect.Greenplum, pgstore.Options{ExecMode: "exec"},
			pgx.QueryExecModeExec, pgx.QueryExecModeExec},
		{"explicit overrides postgres", dialect.Postgres, pgstore.Options{ExecMode: "simple_protocol", Pooler: "none"},
			pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeSimpleProtocol},
		{"describe exec through pgbouncer", dialect.Postgres, pgstore.Options{ExecMode: "describe_exec", Pooler: "pgbouncer"},
			pgx.QueryExecModeDescribeExec, pgx.QueryExecModeDescribeExec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := pgstore.ChooseExecModes(tt.dialect, tt.opts)
			if err != nil {
				t.Fatalf("ChooseExecModes: %v", err)
			}
			if got.Read != tt.wantRead || got.Write != tt.wantWrite {
				t.Errorf("ChooseExecModes = read %v, write %v; want read %v, write %v", got.Read, got.Write, tt.wantRead, tt.wantWrite)
			}
		})
	}
}

func TestExecModeName(t *testing.T) {
	for _, name := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
		modes, err := pgstore.ChooseExecModes(dialect.Postgres, pgstore.Options{ExecMode: pgstore.ExecMode(name)})
		if err != nil {
			t.Fatalf("ChooseExecModes(%q): %v", name, err)
		}
		if got := pgstore.ExecModeName(modes.Read); got != name {
			t.Errorf("ExecModeName(ChooseExecModes(%q)) = %q", name, got)
		}
	}
}

// TestOpenRefusesOptions checks the options Open refuses before it
// connects; the DSN points at a port nothing listens on.
func TestOpenRefusesOptions(t *testing.T) {
	const dsn = "postgres://nobody@127.0.0.1:1/none?sslmode=disable"
	tests := []struct {
		name string
		opts pgstore.Options
		want string
	}{
		{"cache_statement through pgbouncer", pgstore.Options{DSN: dsn, ExecMode: "cache_statement", Pooler: "pgbouncer"}, "cannot be used through PgBouncer"},
		{"unknown exec mode", pgstore.Options{DSN: dsn, ExecMode: "prepared"}, `exec mode "prepared"`},
		{"unknown pooler", pgstore.Options{DSN: dsn, Pooler: "pgpool"}, `pooler "pgpool"`},
		{"bad statement_mem", pgstore.Options{DSN: dsn, StatementMem: "10MB'; DROP TABLE x; --"}, "statement_mem"},
		{"statement_mem unit", pgstore.Options{DSN: dsn, StatementMem: "10TB"}, "statement_mem"},
		{"min above max", pgstore.Options{DSN: dsn, MaxConns: 2, MinConns: 3}, "MinConns"},
		{"no dsn", pgstore.Options{}, "no DSN"},
		{"bad dsn", pgstore.Options{DSN: "postgres://%zz"}, "parse DSN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := pgstore.Open(context.Background(), tt.opts, nil, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestStatementMemAccepted(t *testing.T) {
	for _, mem := range []string{"10MB", "512kB", "1GB", "2048", "16 MB"} {
		if _, err := pgstore.ChooseExecModes(dialect.Greenplum, pgstore.Options{StatementMem: mem}); err != nil {
			t.Errorf("StatementMem %q refused: %v", mem, err)
		}
	}
}

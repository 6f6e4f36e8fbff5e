package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/schema"
)

// Migrate applies (up), reverts (down) or lists (status) the migrations
// of cfg's warehouse and namespaces, and prints what it did to stdout.
func Migrate(ctx context.Context, cfg config.Config, action string, stdout io.Writer, log *slog.Logger) error {
	if action != "up" && action != "down" && action != "status" {
		return fmt.Errorf("migrate: unknown action %q (want up, down, status or plan)", action)
	}
	connectCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(connectCtx, cfg.Postgres.DSN)
	if err != nil {
		return fmt.Errorf("migrate: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	m, err := schema.OpenMigrator(ctx, conn, cfg.Tables, log)
	if err != nil {
		return err
	}
	switch action {
	case "up":
		steps, err := m.Up(ctx)
		for _, s := range steps {
			fmt.Fprintf(stdout, "applied  %s\n", s.Label())
		}
		if err == nil && len(steps) == 0 {
			fmt.Fprintf(stdout, "up to date (%s)\n", m.Dialect())
		}
		return err
	case "down":
		steps, err := m.Down(ctx)
		for _, s := range steps {
			fmt.Fprintf(stdout, "reverted %s\n", s.Label())
		}
		if err == nil && len(steps) == 0 {
			fmt.Fprintln(stdout, "nothing to revert")
		}
		return err
	default:
		states, err := m.Status(ctx)
		if err != nil {
			return err
		}
		for _, s := range states {
			when := "pending"
			if s.Applied {
				when = "applied " + s.AppliedAt.Format(time.RFC3339)
			}
			fmt.Fprintf(stdout, "%-40s %s\n", s.Label(), when)
		}
		return nil
	}
}

// PlanMigrations prints the DDL for a dialect to stdout: the one of
// cfg.Postgres.Dialect, or else the one the server of the DSN speaks when it
// answers within a few seconds, or else PostgreSQL. With a dialect set it
// connects to nothing.
func PlanMigrations(ctx context.Context, cfg config.Config, stdout io.Writer) error {
	var err error
	d, how := dialect.Postgres, "the --dialect flag"
	if cfg.Postgres.Dialect != "" {
		if d, err = dialect.Parse(cfg.Postgres.Dialect); err != nil {
			return err
		}
	} else {
		d, how = planDialect(ctx, cfg.Postgres.DSN)
	}
	steps, err := schema.Plan(d, cfg.Tables)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "-- warmcache migrations for %s (dialect from %s)\n%s", d, how, schema.Render(steps))
	return nil
}

// planDialect detects the dialect of the server at dsn for migrate plan,
// and says where the answer came from: the server, or the default
// (PostgreSQL) when it does not answer within 3 seconds.
func planDialect(ctx context.Context, dsn string) (dialect.Dialect, string) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return dialect.Postgres, fmt.Sprintf("the default: the DSN does not parse (%v)", err)
	}
	// The simple protocol prepares nothing, so detection works through
	// PgBouncer in transaction pooling too.
	cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return dialect.Postgres, "the default: the server of the DSN did not answer; pass --dialect to choose"
	}
	defer conn.Close(context.WithoutCancel(ctx))
	d, err := dialect.Detect(ctx, conn)
	if err != nil {
		return dialect.Postgres, "the default: the server of the DSN could not be asked; pass --dialect to choose"
	}
	return d, "the server of the DSN"
}

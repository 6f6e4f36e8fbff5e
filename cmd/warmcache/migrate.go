package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/gateway"
	"github.com/warmcache/warmcache/internal/schema"
)

// planDetectTimeout bounds asking the server of the DSN for its dialect in
// `migrate plan`.
const planDetectTimeout = 3 * time.Second

// migrateUsage is what `warmcache migrate -h` prints before the flags.
const migrateUsage = `usage: warmcache migrate up|down|status|plan [flags]

  up       apply the pending migrations
  down     revert the most recent migration version
  status   list the migrations and whether they are applied
  plan     print the DDL without connecting to anything (--dialect postgres|greenplum)

Run 'warmcache migrate plan -h' for the flags of plan. The flags of up, down and status:
`

// migrate runs `warmcache migrate up|down|status|plan`: it applies (up),
// reverts (down) or lists (status) the migrations of the configuration's
// warehouse and namespaces, or prints their DDL (plan), and says what it
// did on stdout.
func migrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("migrate: want one of up, down, status, plan")
	}
	if isHelp(args[0]) {
		return actionHelp(config.MigrateCommand, migrateUsage, getenv, stderr)
	}
	action, args := args[0], args[1:]
	if action != "up" && action != "down" && action != "status" && action != "plan" {
		return fmt.Errorf("migrate: unknown action %q (want up, down, status or plan)", action)
	}
	cmd := config.MigrateCommand
	if action == "plan" {
		cmd = config.PlanCommand
	}
	cfg, err := config.Load(cmd, args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if action == "plan" {
		return planMigrations(ctx, cfg, stdout)
	}
	m, err := gateway.OpenMigrator(ctx, cfg, gateway.NewLogger(stderr, cfg.LogLevel))
	if err != nil {
		return err
	}
	defer m.Close(ctx)
	switch action {
	case "up":
		steps, err := m.Up(ctx)
		printSteps(stdout, "applied ", steps)
		if err == nil && len(steps) == 0 {
			fmt.Fprintf(stdout, "up to date (%s)\n", m.Dialect())
		}
		return err
	case "down":
		steps, err := m.Down(ctx)
		printSteps(stdout, "reverted", steps)
		if err == nil && len(steps) == 0 {
			fmt.Fprintln(stdout, "nothing to revert")
		}
		return err
	default:
		return printStatus(ctx, m, stdout)
	}
}

// printSteps prints one line per step, after verb.
func printSteps(stdout io.Writer, verb string, steps []schema.Step) {
	for _, s := range steps {
		fmt.Fprintf(stdout, "%s %s\n", verb, s.Label())
	}
}

// printStatus prints each migration and when it was applied, or pending.
func printStatus(ctx context.Context, m *gateway.Migrator, stdout io.Writer) error {
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

// planMigrations prints the DDL for a dialect to stdout: the one of
// cfg.Postgres.Dialect, or else the one the server of the DSN speaks when it
// answers within planDetectTimeout, or else PostgreSQL. With a dialect set
// it connects to nothing.
func planMigrations(ctx context.Context, cfg config.Config, stdout io.Writer) error {
	var err error
	d, how := dialect.Postgres, "the --dialect flag"
	if cfg.Postgres.Dialect != "" {
		if d, err = dialect.Parse(cfg.Postgres.Dialect); err != nil {
			return err
		}
	} else {
		d, how = planDialect(ctx, cfg)
	}
	steps, err := schema.Plan(d, cfg.Tables)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "-- warmcache migrations for %s (dialect from %s)\n%s", d, how, schema.Render(steps))
	return nil
}

// planDialect detects the dialect of the server of cfg's DSN for migrate
// plan, and says where the answer came from: the server, or the default
// (PostgreSQL) when it does not answer within planDetectTimeout.
func planDialect(ctx context.Context, cfg config.Config) (dialect.Dialect, string) {
	ctx, cancel := context.WithTimeout(ctx, planDetectTimeout)
	defer cancel()
	d, err := gateway.DetectDialect(ctx, cfg)
	var parseErr *pgconn.ParseConfigError
	var connectErr *pgconn.ConnectError
	switch {
	case err == nil:
		return d, "the server of the DSN"
	case errors.As(err, &parseErr):
		return dialect.Postgres, fmt.Sprintf("the default: the DSN does not parse (%v)", err)
	case errors.As(err, &connectErr):
		return dialect.Postgres, "the default: the server of the DSN did not answer; pass --dialect to choose"
	default:
		return dialect.Postgres, "the default: the server of the DSN could not be asked; pass --dialect to choose"
	}
}

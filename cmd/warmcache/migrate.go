package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/schema"
)

// migrate runs `warmcache migrate up|down|status|plan`.
func migrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("migrate: want one of up, down, status, plan")
	}
	action, args := args[0], args[1:]
	if action == "plan" {
		return migratePlan(args, getenv, stdout, stderr)
	}
	if action != "up" && action != "down" && action != "status" {
		return fmt.Errorf("migrate: unknown action %q (want up, down, status or plan)", action)
	}
	cfg, err := config.Load("warmcache migrate "+action, args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log := newLogger(stderr, cfg.LogLevel)
	connectCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(connectCtx, cfg.PostgresDSN)
	if err != nil {
		return fmt.Errorf("migrate: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	m, err := schema.OpenMigrator(ctx, conn, cfg.Namespaces, log)
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

// migratePlan prints the DDL for a dialect without connecting to anything.
func migratePlan(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := config.Load("warmcache migrate plan", args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	d := pgstore.Postgres
	if cfg.Dialect != "" {
		if d, err = pgstore.ParseDialect(cfg.Dialect); err != nil {
			return err
		}
	}
	steps, err := schema.Plan(d, cfg.Namespaces)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "-- warmcache migrations for %s\n%s", d, schema.Render(steps))
	return nil
}

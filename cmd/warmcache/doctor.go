package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/gateway"
	pgdoctor "github.com/warmcache/warmcache/internal/pgstore/doctor"
)

// doctorTimeout bounds the whole of `warmcache doctor`.
const doctorTimeout = 2 * time.Minute

// doctor runs `warmcache doctor [--plans]`: it checks that each tier
// answers, then shows on stdout, for each namespace, how its key lookup is
// really executed (see doctor.Diagnose) in plain words, and the
// warehouse's connection budget (doctor.CheckConnections), and the
// lookup plans that have a warning, or every plan with --plans. It fails
// when a tier is down or a namespace has a warning, so that it can gate a
// deployment.
func doctor(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("warmcache doctor", flag.ContinueOnError)
	plans := fs.Bool("plans", false, "print every lookup plan, not only those with a warning")
	cfg, help, err := subcommandConfig(config.DoctorCommand, "warmcache doctor [flags]", fs, args, getenv, stderr)
	if help || err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	log := gateway.NewLogger(stderr, "warn")

	problems, err := checkRedis(ctx, cfg, stdout, log)
	if err != nil {
		return err
	}
	store, err := gateway.OpenWarehouse(ctx, cfg, cfg.Namespaces, log)
	if err != nil {
		fmt.Fprintf(stdout, "%-10s %-5s %v\n", "warehouse", "FAIL", err)
		return fmt.Errorf("doctor: the warehouse cannot serve the namespaces")
	}
	defer store.Close()
	fmt.Fprintf(stdout, "%-10s %-5s %s, pooler %s, reads %s, writes %s\n", "warehouse", "ok",
		store.Dialect(), cfg.Postgres.Pooler, store.ExecMode(), store.WriteExecMode())

	conns, err := pgdoctor.CheckConnections(ctx, store, gateway.ConnectionOptions(cfg, store))
	if err != nil {
		return err
	}
	for _, f := range conns.Findings() {
		fmt.Fprintf(stdout, "  %s\n", f)
		if f.Severity == pgdoctor.SeverityWarn {
			problems++
		}
	}

	diags, err := pgdoctor.Diagnose(ctx, store)
	for _, d := range diags {
		if !printDiagnosis(stdout, d, *plans) {
			problems++
		}
	}
	if err != nil {
		return err
	}
	if problems > 0 {
		return fmt.Errorf("doctor: %d problem(s); see the warnings above", problems)
	}
	fmt.Fprintln(stdout, "\nno problems found")
	return nil
}

// checkRedis pings Redis and prints the outcome; problems is 1 when it did
// not answer. The error is the client's that could not be built.
func checkRedis(ctx context.Context, cfg config.Config, stdout io.Writer, log *slog.Logger) (problems int, err error) {
	cache, err := gateway.OpenRedis(cfg, log)
	if err != nil {
		return 0, err
	}
	defer cache.Close()
	start := time.Now()
	addrs := strings.Join(cfg.Redis.Addrs, ",")
	if err := cache.Ping(ctx); err != nil {
		fmt.Fprintf(stdout, "%-10s %-5s %s: %v\n", "redis", "FAIL", addrs, err)
		return 1, nil
	}
	fmt.Fprintf(stdout, "%-10s %-5s %s answered PING in %s\n", "redis", "ok", addrs, roundDuration(time.Since(start)))
	return 0, nil
}

// printDiagnosis prints a namespace's findings, and its plans when it has
// a warning or allPlans is set. It reports whether the namespace is OK.
func printDiagnosis(stdout io.Writer, d pgdoctor.Diagnosis, allPlans bool) bool {
	fmt.Fprintf(stdout, "\nnamespace %s (%s)\n", d.Namespace, describeTable(d.Check))
	for _, f := range d.Findings {
		fmt.Fprintf(stdout, "  %s\n", f)
	}
	if allPlans || !d.OK() {
		fmt.Fprintf(stdout, "  plan of the 6th execution:\n%s\n", indent(d.Check.Plan, "    "))
		if d.Check.GenericPlan != "" {
			fmt.Fprintf(stdout, "  plan under force_generic_plan:\n%s\n", indent(d.Check.GenericPlan, "    "))
		}
		for _, p := range d.Check.WritePlans {
			fmt.Fprintf(stdout, "  plan of a write's %s:\n%s\n", p.Name, indent(p.Plan, "    "))
		}
	}
	return d.OK()
}

// describeTable says where a namespace's rows live.
func describeTable(c pgdoctor.PlanCheck) string {
	switch {
	case c.Dialect == dialect.Greenplum:
		return fmt.Sprintf("table %s on %d segments", c.Table, c.Segments)
	case c.Partitions > 1:
		return fmt.Sprintf("table %s, %d hash partitions", c.Table, c.Partitions)
	default:
		return "table " + c.Table
	}
}

// indent puts prefix before every line of text.
func indent(text, prefix string) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}

// roundDuration rounds d for display: to 10ms above a second, to 10µs
// above a millisecond, and to 1µs below.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d > time.Second:
		return d.Round(10 * time.Millisecond)
	case d > time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}

package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/rediscache"
)

// DoctorOptions say what Doctor shows.
type DoctorOptions struct {
	// Plans shows every lookup plan, not only those with a warning.
	Plans bool
}

// Doctor checks that each tier of cfg answers, then shows on stdout, for
// each namespace, how its key lookup is really executed (see
// pgstore.Store.Doctor) in plain words, and the lookup plans that have a
// warning, or every plan when o.Plans is set. It fails when a tier is
// down or a namespace has a warning, so that it can gate a deployment.
func Doctor(ctx context.Context, cfg config.Config, o DoctorOptions, stdout io.Writer, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	problems := 0
	cache, err := newCache(cfg, func(*rediscache.Options) {}, nil, log)
	if err != nil {
		return err
	}
	defer cache.Close()
	start := time.Now()
	if err := cache.Ping(ctx); err != nil {
		problems++
		fmt.Fprintf(stdout, "%-10s %-5s %s: %v\n", "redis", "FAIL", strings.Join(cfg.Redis.Addrs, ","), err)
	} else {
		fmt.Fprintf(stdout, "%-10s %-5s %s answered PING in %s\n", "redis", "ok", strings.Join(cfg.Redis.Addrs, ","), roundDuration(time.Since(start)))
	}

	store, err := openStore(ctx, cfg, cfg.Namespaces, log)
	if err != nil {
		fmt.Fprintf(stdout, "%-10s %-5s %v\n", "warehouse", "FAIL", err)
		return fmt.Errorf("doctor: the warehouse cannot serve the namespaces")
	}
	defer store.Close()
	fmt.Fprintf(stdout, "%-10s %-5s %s, pooler %s, reads %s, writes %s\n", "warehouse", "ok",
		store.Dialect(), cfg.Postgres.Pooler, store.ExecMode(), store.WriteExecMode())

	diags, err := store.Doctor(ctx)
	for _, d := range diags {
		fmt.Fprintf(stdout, "\nnamespace %s (%s)\n", d.Namespace, describeTable(d.Check))
		for _, f := range d.Findings {
			fmt.Fprintf(stdout, "  %s\n", f)
		}
		if !d.OK() {
			problems++
		}
		if o.Plans || !d.OK() {
			fmt.Fprintf(stdout, "  plan of the 6th execution:\n%s\n", indent(d.Check.Plan, "    "))
			if d.Check.GenericPlan != "" {
				fmt.Fprintf(stdout, "  plan under force_generic_plan:\n%s\n", indent(d.Check.GenericPlan, "    "))
			}
			if d.Check.WritePlan != "" {
				fmt.Fprintf(stdout, "  plan of a write:\n%s\n", indent(d.Check.WritePlan, "    "))
			}
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

// logDoctor runs the doctor on the warehouse at start and logs each
// finding: warnings at Warn, the rest at Info. A doctor that cannot run is
// logged and does not stop the service.
func logDoctor(ctx context.Context, store *pgstore.Store, log *slog.Logger) {
	diags, err := store.Doctor(ctx)
	for _, d := range diags {
		for _, f := range d.Findings {
			level := slog.LevelInfo
			if f.Severity == pgstore.SeverityWarn {
				level = slog.LevelWarn
			}
			log.LogAttrs(ctx, level, "doctor: "+f.Text, slog.String("namespace", d.Namespace), slog.String("severity", string(f.Severity)))
		}
		if !d.OK() {
			log.LogAttrs(ctx, slog.LevelWarn, "doctor: lookup plan with a warning", slog.String("namespace", d.Namespace), slog.String("plan", d.Check.Plan))
		}
	}
	if err != nil {
		log.Warn("doctor could not check the lookups", "err", err)
	}
}

// describeTable says where a namespace's rows live.
func describeTable(c pgstore.PlanCheck) string {
	switch {
	case c.Dialect == dialect.Greenplum:
		return fmt.Sprintf("table %s on %d segments", c.Table, c.Segments)
	case c.Partitions > 1:
		return fmt.Sprintf("table %s, %d hash partitions", c.Table, c.Partitions)
	default:
		return "table " + c.Table
	}
}

func indent(text, prefix string) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}

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

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/rediscache"
)

// doctor runs `warmcache doctor`: it checks that each tier answers, then
// shows for each namespace how its key lookup is really executed (see
// pgstore.Store.Doctor) in plain words. It fails when a tier is down or a
// namespace has a warning, so that it can gate a deployment.
func doctor(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("warmcache doctor", flag.ContinueOnError)
	plans := fs.Bool("plans", false, "print every lookup plan, not only those with a warning")
	cfg, help, err := subcommandConfig("warmcache doctor", "warmcache doctor [flags]", fs, args, getenv, stderr)
	if help || err != nil {
		return err
	}
	log := newLogger(stderr, "warn")
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	problems := 0
	cache, err := rediscache.New(redisOptions(cfg), nil, log)
	if err != nil {
		return err
	}
	defer cache.Close()
	start := time.Now()
	if err := cache.Ping(ctx); err != nil {
		problems++
		fmt.Fprintf(stdout, "%-10s %-5s %s: %v\n", "redis", "FAIL", strings.Join(cfg.RedisAddrs, ","), err)
	} else {
		fmt.Fprintf(stdout, "%-10s %-5s %s answered PING in %s\n", "redis", "ok", strings.Join(cfg.RedisAddrs, ","), roundDuration(time.Since(start)))
	}

	store, err := pgstore.Open(ctx, storeOptions(cfg, 2), cfg.Namespaces, prometheus.NewRegistry(), log)
	if err != nil {
		fmt.Fprintf(stdout, "%-10s %-5s %v\n", "warehouse", "FAIL", err)
		return fmt.Errorf("doctor: the warehouse cannot serve the namespaces")
	}
	defer store.Close()
	fmt.Fprintf(stdout, "%-10s %-5s %s, pooler %s, reads %s, writes %s\n", "warehouse", "ok",
		store.Dialect(), cfg.PGPooler, store.ExecMode(), store.WriteExecMode())

	diags, err := store.Doctor(ctx)
	for _, d := range diags {
		fmt.Fprintf(stdout, "\nnamespace %s (%s)\n", d.Namespace, describeTable(d.Check))
		for _, f := range d.Findings {
			fmt.Fprintf(stdout, "  %s\n", f)
		}
		if !d.OK() {
			problems++
		}
		if *plans || !d.OK() {
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

// splitFlags takes the flags that fs defines out of args, wherever they
// are, parses them into fs, and returns the other arguments for the
// configuration's flag set: its flags first, then the positional arguments,
// so that "advise widgets --namespaces f" reads like "advise --namespaces f
// widgets". A flag of fs is "-name value", "-name=value"
// or, for a boolean, "-name", with one or two dashes.
func splitFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var own, rest, positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		switch {
		case !strings.HasPrefix(a, "-") || a == "-":
			positional = append(positional, a)
			continue
		case a == "--":
			positional = append(positional, args[i:]...)
			i = len(args)
			continue
		case f == nil:
			// A configuration flag: every one of them takes a value.
			rest = append(rest, a)
			if !hasValue && i+1 < len(args) {
				i++
				rest = append(rest, args[i])
			}
			continue
		}
		own = append(own, a)
		isBool := false
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			isBool = true
		}
		if !hasValue && !isBool && i+1 < len(args) {
			i++
			own = append(own, args[i])
		}
	}
	if err := fs.Parse(own); err != nil {
		return nil, err
	}
	// The configuration's flags come first, so that its parser sees them
	// all; the positional arguments follow, in their order.
	return append(rest, positional...), nil
}

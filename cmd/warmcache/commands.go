package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/gateway"
)

// migrate runs `warmcache migrate up|down|status|plan`.
func migrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("migrate: want one of up, down, status, plan")
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
		return gateway.PlanMigrations(ctx, cfg, stdout)
	}
	return gateway.Migrate(ctx, cfg, action, stdout, gateway.NewLogger(stderr, cfg.LogLevel))
}

// dict runs `warmcache dict train <namespace>` and `warmcache dict list`.
func dict(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("dict: want train <namespace> or list")
	}
	action, args := args[0], args[1:]
	if action != "train" && action != "list" {
		return fmt.Errorf("dict: unknown action %q (want train or list)", action)
	}
	cfg, help, err := subcommandConfig(config.DictCommand, "warmcache dict train <namespace> | warmcache dict list", nil, args, getenv, stderr)
	if help || err != nil {
		return err
	}
	log := gateway.NewLogger(stderr, cfg.LogLevel)
	if action == "list" {
		return gateway.ListDictionaries(ctx, cfg, stdout, log)
	}
	if len(cfg.Args) != 1 {
		return errors.New("dict train: want a namespace: warmcache dict train <namespace>")
	}
	return gateway.TrainDictionary(ctx, cfg, cfg.Args[0], stdout, log)
}

// doctor runs `warmcache doctor [--plans]`.
func doctor(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("warmcache doctor", flag.ContinueOnError)
	plans := fs.Bool("plans", false, "print every lookup plan, not only those with a warning")
	cfg, help, err := subcommandConfig(config.DoctorCommand, "warmcache doctor [flags]", fs, args, getenv, stderr)
	if help || err != nil {
		return err
	}
	return gateway.Doctor(ctx, cfg, gateway.DoctorOptions{Plans: *plans}, stdout, gateway.NewLogger(stderr, "warn"))
}

// load runs `warmcache load <namespace> [file]`.
func load(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("warmcache load", flag.ContinueOnError)
	format := fs.String("format", "auto", "input format: ndjson, csv, or auto (by the file's extension; ndjson for stdin)")
	progress := fs.String("progress", "auto", "progress bar on stderr: auto (when it is a terminal), on or off")
	cfg, help, err := subcommandConfig(config.LoadCommand, "warmcache load [flags] <namespace> [file.ndjson|file.csv|-]", fs, args, getenv, stderr)
	if help || err != nil {
		return err
	}
	if len(cfg.Args) < 1 || len(cfg.Args) > 2 {
		return errors.New("load: want a namespace and optionally a file (default stdin): warmcache load <namespace> [file]")
	}
	o := gateway.LoadOptions{Namespace: cfg.Args[0], Path: "-", In: os.Stdin, Format: *format, Progress: *progress, Stdout: stdout, Stderr: stderr}
	if len(cfg.Args) == 2 {
		o.Path = cfg.Args[1]
	}
	return gateway.Load(ctx, cfg, o, gateway.NewLogger(stderr, "warn"))
}

// invalidate runs `warmcache invalidate [--all] <namespace> [key ...]`.
func invalidate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("warmcache invalidate", flag.ContinueOnError)
	all := fs.Bool("all", false, "retire every cached entry of the namespace (a new generation) instead of listed keys")
	cfg, help, err := subcommandConfig(config.InvalidateCommand, "warmcache invalidate [--all] <namespace> [key ...]", fs, args, getenv, stderr)
	if help || err != nil {
		return err
	}
	if len(cfg.Args) < 1 || *all == (len(cfg.Args) > 1) {
		return errors.New("invalidate: want a namespace and either keys or --all: warmcache invalidate [--all] <namespace> [key ...]")
	}
	return gateway.Invalidate(ctx, cfg, gateway.InvalidateOptions{Namespace: cfg.Args[0], Keys: cfg.Args[1:], All: *all},
		stdout, gateway.NewLogger(stderr, "info"))
}

// adviseCmd runs `warmcache advise <namespace>`.
func adviseCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("warmcache advise", flag.ContinueOnError)
	sample := fs.Int("sample", 20_000, "rows of the namespace to copy into each candidate; more is slower and closer to the real table")
	lookups := fs.Int("lookups", 2_000, "timed point lookups per candidate")
	jsonOut := fs.String("json", "", "also write the report as JSON to this file")
	cfg, help, err := subcommandConfig(config.AdviseCommand, "warmcache advise [flags] <namespace>", fs, args, getenv, stderr)
	if help || err != nil {
		return err
	}
	if len(cfg.Args) != 1 {
		return errors.New("advise: want one namespace: warmcache advise <namespace>")
	}
	return gateway.Advise(ctx, cfg, gateway.AdviseOptions{Namespace: cfg.Args[0], SampleRows: *sample, Lookups: *lookups, JSONFile: *jsonOut},
		stdout, stderr, gateway.NewLogger(stderr, "warn"))
}

// subcommandConfig parses a subcommand's own flags (fs, which may be nil)
// and the configuration, from args in any order. help is true when -h was
// asked for: the usage line and the subcommand's flags have been printed.
func subcommandConfig(cmd config.Command, usage string, fs *flag.FlagSet, args []string, getenv func(string) string, stderr io.Writer) (cfg config.Config, help bool, err error) {
	if fs == nil {
		fs = flag.NewFlagSet("warmcache "+string(cmd), flag.ContinueOnError)
	}
	fs.SetOutput(stderr)
	rest, err := splitFlags(fs, args)
	if err != nil {
		return config.Config{}, false, err
	}
	cfg, err = config.Load(cmd, rest, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stderr, "usage: "+usage)
		fs.PrintDefaults()
		return config.Config{}, true, nil
	}
	return cfg, false, err
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

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/warmcache/warmcache/internal/advise"
	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/gateway"
)

// adviseCmd runs `warmcache advise <namespace>`: it measures the candidate
// storages of the namespace on a sample of its rows (see package advise)
// and prints the table, the recommendation and the migration to stdout,
// and its progress to stderr; with --json, it also writes the report to a
// file.
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
	t, err := table(cfg, cfg.Args[0])
	if err != nil {
		return fmt.Errorf("advise: %w", err)
	}
	fmt.Fprintf(stderr, "advise: measuring the storage of %s on %d sampled rows...\n", t.Namespace.Name, *sample)
	report, err := advise.Run(ctx, t, advise.Options{
		Store:      gateway.StoreOptions(cfg),
		SampleRows: *sample,
		Lookups:    *lookups,
	}, gateway.NewLogger(stderr, "warn"))
	if err != nil {
		return err
	}
	if err := report.WriteTable(stdout); err != nil {
		return err
	}
	if *jsonOut == "" {
		return nil
	}
	b, err := report.JSON()
	if err != nil {
		return err
	}
	if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("advise: %w", err)
	}
	return nil
}

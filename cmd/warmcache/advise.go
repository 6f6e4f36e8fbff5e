package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/warmcache/warmcache/internal/advise"
)

// adviseCmd runs `warmcache advise <namespace>`: it measures the candidate
// storages of the namespace on a sample of its rows (see package advise)
// and prints the table, the recommendation and the migration.
func adviseCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("warmcache advise", flag.ContinueOnError)
	sample := fs.Int("sample", 20_000, "rows of the namespace to copy into each candidate; more is slower and closer to the real table")
	lookups := fs.Int("lookups", 2_000, "timed point lookups per candidate")
	jsonOut := fs.String("json", "", "also write the report as JSON to this file")
	cfg, help, err := subcommandConfig("warmcache advise", "warmcache advise [flags] <namespace>", fs, args, getenv, stderr)
	if help || err != nil {
		return err
	}
	if len(cfg.Args) != 1 {
		return errors.New("advise: want one namespace: warmcache advise <namespace>")
	}
	ns, err := namespace(cfg, cfg.Args[0])
	if err != nil {
		return fmt.Errorf("advise: %w", err)
	}
	log := newLogger(stderr, "warn")
	fmt.Fprintf(stderr, "advise: measuring the storage of %s on %d sampled rows...\n", ns.Name, *sample)
	report, err := advise.Run(ctx, ns, advise.Options{
		Store:      storeOptions(cfg, 0),
		SampleRows: *sample,
		Lookups:    *lookups,
	}, log)
	if err != nil {
		return err
	}
	if err := report.WriteTable(stdout); err != nil {
		return err
	}
	if *jsonOut != "" {
		b, err := report.JSON()
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("advise: %w", err)
		}
	}
	return nil
}

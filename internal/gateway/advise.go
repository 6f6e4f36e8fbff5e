package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/warmcache/warmcache/internal/advise"
	"github.com/warmcache/warmcache/internal/config"
)

// AdviseOptions are the arguments of Advise.
type AdviseOptions struct {
	// Namespace is the namespace whose storage is measured.
	Namespace string
	// SampleRows are the rows copied into each candidate; Lookups the
	// timed point lookups per candidate (see advise.Options).
	SampleRows int
	Lookups    int
	// JSONFile, when set, also receives the report as JSON.
	JSONFile string
}

// Advise measures the candidate storages of a namespace of cfg on a sample
// of its rows (see package advise) and prints the table, the
// recommendation and the migration to stdout, and its progress to stderr.
func Advise(ctx context.Context, cfg config.Config, o AdviseOptions, stdout, stderr io.Writer, log *slog.Logger) error {
	t, err := table(cfg, o.Namespace)
	if err != nil {
		return fmt.Errorf("advise: %w", err)
	}
	fmt.Fprintf(stderr, "advise: measuring the storage of %s on %d sampled rows...\n", t.Namespace.Name, o.SampleRows)
	report, err := advise.Run(ctx, t, advise.Options{
		Store:      StoreOptions(cfg),
		SampleRows: o.SampleRows,
		Lookups:    o.Lookups,
	}, log)
	if err != nil {
		return err
	}
	if err := report.WriteTable(stdout); err != nil {
		return err
	}
	if o.JSONFile == "" {
		return nil
	}
	b, err := report.JSON()
	if err != nil {
		return err
	}
	if err := os.WriteFile(o.JSONFile, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("advise: %w", err)
	}
	return nil
}

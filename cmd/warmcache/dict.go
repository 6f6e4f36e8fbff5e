package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/gateway"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/warmcache"
	"github.com/warmcache/warmcache/internal/zdict"
)

// What `dict train` samples: trainSamples values to build the dictionary
// from, and heldOutSamples others to choose it and report its ratio on.
const (
	trainSamples   = 2000
	heldOutSamples = 200
	// minSamples is the fewest values worth training on.
	minSamples = 20
)

// dictUsage is what `warmcache dict -h` prints before the flags.
const dictUsage = `usage: warmcache dict train <namespace> | warmcache dict list [flags]

  train    train a zstd dictionary on a sample of the namespace's values and store it
  list     list the stored dictionaries

The flags:
`

// dict runs `warmcache dict train <namespace>` and `warmcache dict list`.
func dict(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("dict: want train <namespace> or list")
	}
	if isHelp(args[0]) {
		return actionHelp(config.DictCommand, dictUsage, getenv, stderr)
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
		return listDictionaries(ctx, cfg, stdout, log)
	}
	if len(cfg.Args) != 1 {
		return errors.New("dict train: want a namespace: warmcache dict train <namespace>")
	}
	return trainDictionary(ctx, cfg, cfg.Args[0], stdout, log)
}

// trainDictionary samples the values of the namespace called name, trains
// a zstd dictionary on them, stores it in the warehouse as the namespace's
// newest and prints its id, its size and its ratio on held-out values to
// stdout. The error wraps warmcache.ErrUnknownNamespace when cfg has no
// such namespace.
func trainDictionary(ctx context.Context, cfg config.Config, name string, stdout io.Writer, log *slog.Logger) error {
	ns, err := namespace(cfg, name)
	if err != nil {
		return fmt.Errorf("dict train: %w", err)
	}
	store, err := gateway.OpenWarehouse(ctx, cfg, []*warmcache.Namespace{ns}, log)
	if err != nil {
		return err
	}
	defer store.Close()
	values, err := store.SampleValues(ctx, ns, trainSamples+heldOutSamples)
	if err != nil {
		return err
	}
	if len(values) < minSamples {
		return fmt.Errorf("dict train: namespace %q has %d values; want at least %d to train on", ns.Name, len(values), minSamples)
	}
	// Hold out a tenth of a small sample, heldOutSamples of a full one.
	held := min(heldOutSamples, len(values)/10)
	train, heldOut := values[held:], values[:held]
	d, err := zdict.Train(train, heldOut, zdict.Options{})
	if err != nil {
		return err
	}
	sizes, err := zdict.Measure(d, heldOut)
	if err != nil {
		return err
	}
	id, err := zdict.ID(d)
	if err != nil {
		return err
	}
	saved, err := store.SaveDictionary(ctx, pgstore.Dictionary{Namespace: ns.Name, ID: id, Data: d})
	if err != nil {
		return err
	}
	per := func(n int64) int64 { return n / int64(max(sizes.Values, 1)) }
	fmt.Fprintf(stdout, "dictionary %d for namespace %s: %d bytes, trained on %d values, stored %s\n",
		saved.ID, ns.Name, len(d), len(train), saved.CreatedAt.Format(time.RFC3339))
	fmt.Fprintf(stdout, "on %d held-out values, bytes per value: none %d, zstd %d (%.1fx), zstd-dict %d (%.1fx)\n",
		sizes.Values, per(sizes.JSON), per(sizes.Zstd), sizes.ZstdRatio(), per(sizes.Dict), sizes.DictRatio())
	if ns.Codec != warmcache.CodecZstdDict {
		fmt.Fprintf(stdout, "namespace %s has codec %q: set `codec: zstd-dict` to compress with it\n",
			ns.Name, cmp.Or(ns.Codec, warmcache.CodecNone))
	}
	fmt.Fprintln(stdout, "servers load dictionaries when they start: restart them to encode with this one")
	return nil
}

// listDictionaries prints the stored dictionaries to stdout, the newest of
// each namespace (the one that encodes) marked.
func listDictionaries(ctx context.Context, cfg config.Config, stdout io.Writer, log *slog.Logger) error {
	store, err := gateway.OpenWarehouse(ctx, cfg, nil, log)
	if err != nil {
		return err
	}
	defer store.Close()
	dicts, err := store.Dictionaries(ctx)
	if err != nil {
		return err
	}
	if len(dicts) == 0 {
		fmt.Fprintln(stdout, "no dictionaries")
		return nil
	}
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NAMESPACE\tID\tBYTES\tCREATED\t")
	for i, d := range dicts {
		mark := ""
		if i == len(dicts)-1 || dicts[i+1].Namespace != d.Namespace {
			mark = "encodes"
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\n", d.Namespace, d.ID, len(d.Data), d.CreatedAt.Format(time.RFC3339), mark)
	}
	return w.Flush()
}

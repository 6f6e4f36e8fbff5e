package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/rediscache"
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

// TrainDictionary samples the values of the namespace called name, trains
// a zstd dictionary on them, stores it in the warehouse as the namespace's
// newest and prints its id, its size and its ratio on held-out values to
// stdout. The error wraps warmcache.ErrUnknownNamespace when cfg has no
// such namespace.
func TrainDictionary(ctx context.Context, cfg config.Config, name string, stdout io.Writer, log *slog.Logger) error {
	ns, err := Namespace(cfg, name)
	if err != nil {
		return fmt.Errorf("dict train: %w", err)
	}
	store, err := openStore(ctx, cfg, []*warmcache.Namespace{ns}, log)
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
		fmt.Fprintf(stdout, "namespace %s has codec %q: set `codec: zstd-dict` to compress with it\n", ns.Name, codecName(ns.Codec))
	}
	fmt.Fprintln(stdout, "servers load dictionaries when they start: restart them to encode with this one")
	return nil
}

// ListDictionaries prints the stored dictionaries to stdout, the newest of
// each namespace (the one that encodes) marked.
func ListDictionaries(ctx context.Context, cfg config.Config, stdout io.Writer, log *slog.Logger) error {
	store, err := openStore(ctx, cfg, nil, log)
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

// loadDictionaries gives cache every stored dictionary of the served
// namespaces, oldest first, so that the newest of each encodes and all
// decode. It never stops the service: without dictionaries a zstd-dict
// namespace encodes with plain zstd, and values compressed with a
// dictionary are read again from the warehouse. It logs a warning for each
// zstd-dict namespace that has no dictionary.
func loadDictionaries(ctx context.Context, store *pgstore.Store, cache *rediscache.Cache, namespaces []*warmcache.Namespace, log *slog.Logger) {
	served := map[string]bool{}
	for _, ns := range namespaces {
		served[ns.Name] = true
	}
	dicts, err := store.Dictionaries(ctx)
	switch {
	case errors.Is(err, pgstore.ErrNoDictionaryTable):
		log.Debug("no dictionary table; apply the migrations to use codec zstd-dict", "error", err)
	case err != nil:
		log.Warn("cannot read the value dictionaries; zstd-dict namespaces encode with plain zstd", "error", err)
	}
	have := map[string]int{}
	for _, d := range dicts {
		if !served[d.Namespace] {
			continue
		}
		id, err := cache.AddDictionary(d.Namespace, d.Data)
		if err == nil && id != d.ID {
			err = fmt.Errorf("stored as id %d, but its content says %d", d.ID, id)
		}
		if err != nil {
			log.Warn("skipping a value dictionary", "namespace", d.Namespace, "dictionary_id", d.ID, "error", err)
			continue
		}
		have[d.Namespace]++
	}
	for _, ns := range namespaces {
		switch {
		case ns.Codec == warmcache.CodecZstdDict && have[ns.Name] == 0:
			log.Warn("namespace has codec zstd-dict but no dictionary; encoding with plain zstd until one is trained",
				"namespace", ns.Name, "train", "warmcache dict train "+ns.Name)
		case have[ns.Name] > 0:
			log.Info("value dictionaries loaded", "namespace", ns.Name, "codec", codecName(ns.Codec), "dictionaries", have[ns.Name])
		}
	}
}

// codecName returns the codec as configured, "none" for the empty one.
func codecName(c warmcache.Codec) string {
	if c == "" {
		return string(warmcache.CodecNone)
	}
	return string(c)
}

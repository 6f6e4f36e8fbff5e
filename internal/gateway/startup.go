package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/warmcache/warmcache/internal/capture"
	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/pgstore/doctor"
	"github.com/warmcache/warmcache/internal/rediscache"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// logDoctor runs the doctor on the warehouse at start and logs each
// finding, the connection budget's among them: warnings at Warn, the rest
// at Info. A doctor that cannot run is logged and does not stop the
// service.
func logDoctor(ctx context.Context, cfg config.Config, store *pgstore.Store, log *slog.Logger) {
	diags, err := doctor.Diagnose(ctx, store)
	for _, d := range diags {
		for _, f := range d.Findings {
			level := slog.LevelInfo
			if f.Severity == doctor.SeverityWarn {
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
	conns, err := doctor.CheckConnections(ctx, store, ConnectionOptions(cfg, store))
	if err != nil {
		log.Warn("doctor could not count the warehouse's connections", "err", err)
		return
	}
	for _, f := range conns.Findings() {
		level := slog.LevelInfo
		if f.Severity == doctor.SeverityWarn {
			level = slog.LevelWarn
		}
		log.LogAttrs(ctx, level, "doctor: "+f.Text, slog.String("severity", string(f.Severity)))
	}
}

// ConnectionOptions returns what the doctor's connection budget needs of
// cfg: the pool of `serve`, the pooler, the segment lanes, and whether change capture holds a
// plain connection to the warehouse (PostgreSQL with a replication DSN, in
// a mode that captures).
func ConnectionOptions(cfg config.Config, store *pgstore.Store) doctor.ConnectionOptions {
	mode := cfg.Capture.Mode
	return doctor.ConnectionOptions{
		PoolSize:     cfg.Postgres.MaxConns,
		Pooler:       cfg.Postgres.Pooler,
		SegmentLanes: cfg.Postgres.SegmentLanes,
		Capture: store.Dialect() == dialect.Postgres && cfg.Capture.ReplicationDSN != "" &&
			(mode == capture.Auto || mode == capture.Capture),
	}
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

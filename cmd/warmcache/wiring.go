package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/freshness"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/rediscache"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// storeOptions returns the warehouse options of cfg, with a pool of
// maxConns connections.
func storeOptions(cfg config.Config, maxConns int32) pgstore.Options {
	return pgstore.Options{DSN: cfg.PostgresDSN, ExecMode: cfg.PGExecMode, Pooler: cfg.PGPooler, MaxConns: maxConns}
}

// redisOptions returns the hot tier's options of cfg.
func redisOptions(cfg config.Config) rediscache.Options {
	return rediscache.Options{
		Addrs:      cfg.RedisAddrs,
		MasterName: cfg.RedisMasterName,
		Password:   cfg.RedisPassword,
		DB:         cfg.RedisDB,
		Prefix:     cfg.RedisPrefix,
	}
}

// subcommandConfig parses a subcommand's own flags (fs, which may be nil)
// and the configuration, from args in any order. help is true when -h was
// asked for: the usage line and the subcommand's flags have been printed.
func subcommandConfig(name, usage string, fs *flag.FlagSet, args []string, getenv func(string) string, stderr io.Writer) (cfg config.Config, help bool, err error) {
	if fs == nil {
		fs = flag.NewFlagSet(name, flag.ContinueOnError)
	}
	fs.SetOutput(stderr)
	rest, err := splitFlags(fs, args)
	if err != nil {
		return config.Config{}, false, err
	}
	cfg, err = config.Load(name, rest, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stderr, "usage: "+usage)
		fs.PrintDefaults()
		return config.Config{}, true, nil
	}
	return cfg, false, err
}

// namespace returns the configured namespace called name, or an error
// that wraps warmcache.ErrUnknownNamespace.
func namespace(cfg config.Config, name string) (*warmcache.Namespace, error) {
	for _, ns := range cfg.Namespaces {
		if ns.Name == name {
			return ns, nil
		}
	}
	return nil, fmt.Errorf("%w: %q is not in the configuration", warmcache.ErrUnknownNamespace, name)
}

// startGenerations returns the namespace generations of the warehouse,
// read once, which move the hot tier's keys and drop the near cache. A
// failed first read is logged: the generations are read again every poll
// interval.
func startGenerations(ctx context.Context, cfg config.Config, store *pgstore.Store, cache *rediscache.Cache, near nearTier, reg prometheus.Registerer, log *slog.Logger) (*freshness.Generations, error) {
	var dropNear func(string)
	if c, ok := near.near.(interface{ Clear() }); ok {
		dropNear = func(string) { c.Clear() }
	}
	gens, err := freshness.NewGenerations(store, cfg.Namespaces, cache.SetGeneration, dropNear, reg, log)
	if err != nil {
		return nil, err
	}
	if err := gens.Sync(ctx); err != nil {
		log.Warn("namespace generations not read; retrying every poll interval", slog.Any("err", err))
	}
	return gens, nil
}

// freshnessOptions returns the freshness options of cfg for the store's
// dialect.
func freshnessOptions(cfg config.Config, store *pgstore.Store) freshness.Options {
	return freshness.Options{
		Mode:           cfg.Freshness,
		PostgreSQL:     store.Dialect() == dialect.Postgres,
		ReplicationDSN: cfg.ReplicationDSN,
		Slot:           cfg.ReplicationSlot,
		PollInterval:   cfg.PollInterval,
		PollOverlap:    cfg.PollOverlap,
	}
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/user"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/rediscache"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// invalidate runs `warmcache invalidate [--all] <namespace> [key ...]`: the
// same operation as POST /v1/kv/{namespace}/_invalidate, straight on the
// warehouse and Redis, for pipelines that run next to them. The keys are
// read again from the warehouse; --all retires every cached entry of the
// namespace by moving it to a new generation, which every instance follows
// within its poll interval. Each call is written to the audit log (stderr)
// with the operating-system user.
func invalidate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("warmcache invalidate", flag.ContinueOnError)
	all := fs.Bool("all", false, "retire every cached entry of the namespace (a new generation) instead of listed keys")
	cfg, help, err := subcommandConfig("warmcache invalidate", "warmcache invalidate [--all] <namespace> [key ...]", fs, args, getenv, stderr)
	if help || err != nil {
		return err
	}
	if len(cfg.Args) < 1 || *all == (len(cfg.Args) > 1) {
		return errors.New("invalidate: want a namespace and either keys or --all: warmcache invalidate [--all] <namespace> [key ...]")
	}
	name, keys := cfg.Args[0], cfg.Args[1:]

	log := newLogger(stderr, "info")
	reg := prometheus.NewRegistry()
	store, err := pgstore.Open(ctx, storeOptions(cfg, 2), cfg.Namespaces, reg, newLogger(io.Discard, "error"))
	if err != nil {
		return err
	}
	defer store.Close()
	cache, err := rediscache.New(redisOptions(cfg), nil, newLogger(io.Discard, "error"))
	if err != nil {
		return err
	}
	defer cache.Close()
	// The keys must be written in the namespace's current generation.
	gens, err := startGenerations(ctx, cfg, store, cache, nearTier{}, reg, newLogger(io.Discard, "error"))
	if err != nil {
		return err
	}
	svc, err := warmcache.NewService(cache, store, cfg.Namespaces, reg, log, warmcache.Options{
		HotTimeout: cfg.HotTimeout, WarmTimeout: cfg.WarmTimeout, Generations: gens,
	})
	if err != nil {
		return err
	}
	n, err := svc.Invalidate(ctx, name, keys, *all)
	who := "cli"
	if u, uerr := user.Current(); uerr == nil {
		who = "cli:" + u.Username
	}
	target := strings.Join(keys, ",")
	if *all {
		target = "*"
	}
	auth.Principal{KeyID: who}.LogWrite(ctx, log, "cli", "invalidate", name, target, err)
	if err != nil {
		return fmt.Errorf("invalidate: %w", err)
	}
	if *all {
		fmt.Fprintf(stdout, "namespace %s: every cached entry retired (generation %d)\n", name, cache.Generation(name))
		return nil
	}
	fmt.Fprintf(stdout, "namespace %s: %d keys invalidated\n", name, n)
	return nil
}

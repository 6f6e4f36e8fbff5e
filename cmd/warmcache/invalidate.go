package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/user"
	"strings"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/gateway"
)

// invalidate runs `warmcache invalidate [--all] <namespace> [key ...]`: the
// same operation as POST /v1/kv/{namespace}/_invalidate, straight on the
// warehouse and Redis of the configuration, for pipelines that run next to
// them. It reads the keys again from the warehouse, or with --all retires
// every cached entry of the namespace by moving it to a new generation,
// which every instance follows within its poll interval. It prints what it
// did to stdout, and writes each call to the audit log on stderr with the
// operating-system user.
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
	name, keys := cfg.Args[0], cfg.Args[1:]
	audit := gateway.NewLogger(stderr, "info")
	g, err := gateway.Open(ctx, cfg, gateway.Options{Role: gateway.Command, Logger: audit})
	if err != nil {
		return err
	}
	defer g.Close()
	n, err := g.Service().Invalidate(ctx, name, keys, *all)
	who := "cli"
	if u, uerr := user.Current(); uerr == nil {
		who = "cli:" + u.Username
	}
	target := strings.Join(keys, ",")
	if *all {
		target = "*"
	}
	auth.Principal{KeyID: who}.LogWrite(ctx, audit, "cli", "invalidate", name, target, err)
	if err != nil {
		return fmt.Errorf("invalidate: %w", err)
	}
	if *all {
		fmt.Fprintf(stdout, "namespace %s: every cached entry retired (generation %d)\n", name, g.Cache().Generation(name))
		return nil
	}
	fmt.Fprintf(stdout, "namespace %s: %d keys invalidated\n", name, n)
	return nil
}

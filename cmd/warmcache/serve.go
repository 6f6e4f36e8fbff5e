package main

import (
	"context"
	"errors"
	"flag"
	"io"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/gateway"
	"github.com/warmcache/warmcache/internal/gctune"
)

// serve runs `warmcache serve`: the gateway of the configuration, until ctx
// is cancelled; then it stops intake, drains in-flight requests and closes
// the clients.
func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := config.Load(config.ServeCommand, args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	// GOGC is the process's: serve tunes it (when --gc-heap-floor asks),
	// not the gateway, which tests open several times in one process.
	gc := gctune.Start(cfg.Server.GCHeapFloor)
	defer gc.Stop()
	g, err := gateway.Open(ctx, cfg, gateway.Options{Logger: gateway.NewLogger(stderr, cfg.LogLevel), Stdout: stdout})
	if err != nil {
		return err
	}
	return errors.Join(g.Serve(ctx), g.Close())
}

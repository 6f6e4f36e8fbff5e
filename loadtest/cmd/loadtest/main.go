// Command loadtest is warmcache's benchmark harness. It prepares a
// database of 1,000,000 widgets on the local stack (internal/localstack;
// `make bench` starts it), starts bin/warmcache serve and a floor
// server as subprocesses on loopback ports, attacks them with vegeta
// scenario by scenario, measures pgbench and redis-benchmark baselines in
// the same run, and writes loadtest/RESULTS.md with PNG charts.
//
//	loadtest [flags]            run the benchmark (make bench)
//	loadtest floor [flags]      serve the constant-body floor (started by the harness)
//	loadtest peer [flags]       serve the hand-written cache-aside (started by the harness)
//
// Every attack has a fixed duration and targets only 127.0.0.1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/warmcache/warmcache/internal/localstack"
	"github.com/warmcache/warmcache/loadtest/peer"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

// run is the whole program; main only binds it to the process.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "floor" {
		return serveFloor(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "peer" {
		return peer.Serve(ctx, args[1:], stdout, stderr)
	}
	stack, err := localstack.FromEnv(getenv)
	if err != nil {
		return err
	}
	opts, err := parseOptions(args, stack, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	h := &harness{opts: opts, out: stdout}
	return h.run(ctx)
}

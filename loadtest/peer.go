package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/warmcache/warmcache/loadtest/peer"
)

// servePeer runs `loadtest peer -addr HOST:PORT -redis HOST:PORT -postgres
// DSN -prefix P` until ctx is cancelled: the hand-written cache-aside of
// loadtest/peer, in a process of its own so that its CPU is measured on its
// own.
func servePeer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadtest peer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:0", "listen address (loopback)")
	var c peer.Config
	fs.StringVar(&c.Redis, "redis", "127.0.0.1:6379", "Redis address")
	fs.StringVar(&c.Postgres, "postgres", "", "PostgreSQL DSN (direct)")
	fs.StringVar(&c.Prefix, "prefix", "peer:", "Redis key prefix")
	fs.IntVar(&c.Conns, "conns", 32, "PostgreSQL pool size and Redis pool size")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := requireLoopback(*addr); err != nil {
		return fmt.Errorf("peer: %w", err)
	}
	h, closePeer, err := peer.Open(ctx, c)
	if err != nil {
		return err
	}
	defer closePeer()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("peer: listen: %w", err)
	}
	srv := floorServer(h, stderr)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "peer: serving on http://%s\n", ln.Addr())
	select {
	case err := <-served:
		return fmt.Errorf("peer: %w", err)
	case <-ctx.Done():
	}
	drainCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return srv.Shutdown(drainCtx)
}

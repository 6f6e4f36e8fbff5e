package main

import (
	"context"
	"io"

	"github.com/warmcache/warmcache/loadtest/peer"
)

// servePeer runs `loadtest peer [flags]`: the hand-written cache-aside of
// loadtest/peer, in a process of its own (peer.Serve).
func servePeer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return peer.Serve(ctx, args, stdout, stderr)
}

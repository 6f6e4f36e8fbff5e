package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os/user"
	"strings"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/config"
)

// InvalidateOptions name what Invalidate retires.
type InvalidateOptions struct {
	// Namespace is the namespace whose entries are invalidated.
	Namespace string
	// Keys are read again from the warehouse; unless All is set, at least
	// one is needed.
	Keys []string
	// All retires every cached entry of the namespace by moving it to a
	// new generation, which every instance follows within its poll
	// interval. Keys must then be empty.
	All bool
}

// Invalidate runs the same operation as POST
// /v1/kv/{namespace}/_invalidate, straight on the warehouse and Redis of
// cfg, for pipelines that run next to them, and prints what it did to
// stdout. Each call is written to audit (the audit log) with the
// operating-system user.
func Invalidate(ctx context.Context, cfg config.Config, o InvalidateOptions, stdout io.Writer, audit *slog.Logger) error {
	name, keys, all := o.Namespace, o.Keys, o.All
	g, err := Open(ctx, cfg, Options{Role: Command, Logger: audit})
	if err != nil {
		return err
	}
	defer g.Close()
	svc, cache := g.Service(), g.Cache()
	n, err := svc.Invalidate(ctx, name, keys, all)
	who := "cli"
	if u, uerr := user.Current(); uerr == nil {
		who = "cli:" + u.Username
	}
	target := strings.Join(keys, ",")
	if all {
		target = "*"
	}
	auth.Principal{KeyID: who}.LogWrite(ctx, audit, "cli", "invalidate", name, target, err)
	if err != nil {
		return fmt.Errorf("invalidate: %w", err)
	}
	if all {
		fmt.Fprintf(stdout, "namespace %s: every cached entry retired (generation %d)\n", name, cache.Generation(name))
		return nil
	}
	fmt.Fprintf(stdout, "namespace %s: %d keys invalidated\n", name, n)
	return nil
}

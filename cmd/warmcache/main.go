// Command warmcache is a key-value gateway: it answers JSON values (or
// opaque bytes, per namespace) by key from Redis and falls through to a
// PostgreSQL or Greenplum warehouse.
//
//	warmcache serve                            run the gateway
//	warmcache migrate up|down|status|plan      apply, revert, list or print the schema's migrations
//	warmcache dict train <namespace>|list      train or list value dictionaries
//	warmcache doctor [--plans]                 check each tier and each namespace's key lookup
//	warmcache load <namespace> [file]          bulk-load NDJSON or CSV
//	warmcache advise <namespace>               measure candidate storages and recommend one
//	warmcache invalidate [--all] <namespace> [key ...]
//	                                           read keys again, or retire a namespace's entries
//	warmcache help                             print the usage
//
// Each subcommand lives in the file of its name (serve.go, migrate.go,
// dict.go, doctor.go, load.go, advise.go, invalidate.go): its flags, its
// flow and its output. They build the tiers through internal/gateway, the
// one assembly, or its single-tier openers; commands.go holds what they
// share.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "warmcache:", err)
		os.Exit(1)
	}
}

const usage = `usage: warmcache <command> [flags]

commands:
  serve                  run the gateway (REST on 127.0.0.1:8080 by default)
  migrate up             apply pending migrations
  migrate down           revert the most recent migration version
  migrate status         list migrations and whether they are applied
  migrate plan --dialect postgres|greenplum
                         print the DDL without connecting to anything
  dict train <namespace> train a zstd dictionary on a sample of the
                         namespace's values and store it in the warehouse
  dict list              list the stored dictionaries
  doctor [--plans]       check each tier, and how each namespace's key lookup
                         is executed (one partition or segment, by index)
  load <namespace> [file]
                         bulk-load NDJSON or CSV (COPY, merge by key, refresh Redis)
  advise <namespace>     measure candidate storages on a sample and recommend one
  invalidate [--all] <namespace> [key ...]
                         read keys again from the warehouse, or retire every
                         cached entry of the namespace (--all)
  help                   print this text

Run 'warmcache <command> -h' for the flags; every flag also reads a
WARMCACHE_* environment variable.
`

// run is the whole program; main only binds it to the process.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("no command given")
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], getenv, stdout, stderr)
	case "migrate":
		return migrate(ctx, args[1:], getenv, stdout, stderr)
	case "dict":
		return dict(ctx, args[1:], getenv, stdout, stderr)
	case "doctor":
		return doctor(ctx, args[1:], getenv, stdout, stderr)
	case "load":
		return load(ctx, args[1:], getenv, stdout, stderr)
	case "advise":
		return adviseCmd(ctx, args[1:], getenv, stdout, stderr)
	case "invalidate":
		return invalidate(ctx, args[1:], getenv, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}

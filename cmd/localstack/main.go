// Command localstack runs warmcache's local stack: its own PostgreSQL
// cluster with wal_level=logical, Redis and a PgBouncer in transaction
// pooling, on 127.0.0.1 (see internal/localstack).
//
//	localstack install     install what is missing: the servers, and the tools that building and testing need
//	localstack up          start whatever part of the stack is missing (idempotent)
//	localstack down        stop what up started
//	localstack env         print export lines for the tests (WARMCACHE_TEST_*)
//	localstack run-env     print export lines for the service, as make run serves
//	localstack seed FILE   run a SQL file on the database warmcache
//
// WARMCACHE_STACK_DIR (default /var/tmp/warmcache-stack-<user>),
// WARMCACHE_STACK_PG_PORT (55432), WARMCACHE_STACK_REDIS_PORT (6379) and
// WARMCACHE_STACK_PGBOUNCER_PORT (56432) move the stack. In the output of env
// and run-env, a variable already set keeps its value.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/warmcache/warmcache/internal/localstack"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, errUsage) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "localstack:", strings.TrimPrefix(err.Error(), "localstack: "))
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

const usage = `usage: localstack install | up | down | env | run-env | seed FILE
`

// run is the whole program; main only binds it to the process.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	cfg, err := localstack.FromEnv(getenv)
	if err != nil {
		return err
	}
	cmd, rest := args[0], args[1:]
	if cmd != "seed" && len(rest) > 0 || cmd == "seed" && len(rest) != 1 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	switch cmd {
	case "install":
		return localstack.Install(ctx, stdout, true)
	case "up":
		return localstack.Up(ctx, cfg, stdout)
	case "down":
		return localstack.Down(ctx, cfg, stdout)
	case "env":
		return localstack.WriteExports(stdout, cfg.TestEnv(), getenv)
	case "run-env":
		return localstack.WriteExports(stdout, cfg.RunEnv(), getenv)
	case "seed":
		return localstack.Seed(ctx, cfg, rest[0], stdout)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return errUsage
}

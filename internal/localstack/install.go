package localstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// debPackage is a Debian package and the program that shows it is there,
// or, for a package without one, a file it installs.
type debPackage struct {
	name    string
	program string
	file    string
	// server marks the packages of the stack's servers, which Up installs
	// when they are missing; the others are the tools that building and
	// testing need, which only Install(ctx, w, true) installs.
	server bool
}

// packages lists everything the project installs.
func packages() []debPackage {
	return []debPackage{
		{"postgresql", "initdb", "", true},
		{"redis-server", "redis-server", "", true},
		{"pgbouncer", "pgbouncer", "", true},
		{"postgresql-client", "psql", "", false},
		{"redis-tools", "redis-cli", "", false},
		{"make", "make", "", false},
		{"gcc", "gcc", "", false},                  // go test -race needs cgo
		{"protobuf-compiler", "protoc", "", false}, // the gRPC code is checked against its .proto
		// protoc's well-known types, which the .proto imports
		{"libprotobuf-dev", "", "/usr/include/google/protobuf/timestamp.proto", false},
		{"curl", "curl", "", false}, // .ci/run's smoke of make run
		{"git", "git", "", false},   // .ci/run clones
		{"npm", "npm", "", false},   // the @dapr/dapr check's packages (npm ci)
		{"wrk", "wrk", "", false},   // make bench's load generator of saturation GETs
		{"zstd", "zstd", "", false}, // the daprd kit (shared/dapr/daprd.sh) unpacks daprd with it
	}
}

// installed reports whether p's program, or its file, is there.
func (p debPackage) installed() bool {
	if p.file != "" {
		_, err := os.Stat(p.file)
		return err == nil
	}
	_, err := Program(p.program)
	return err == nil
}

// packageOf returns the Debian package that brings program.
func packageOf(program string) string {
	for _, p := range packages() {
		if p.program == program {
			return p.name
		}
	}
	return program
}

// Missing returns the packages whose program is not installed: those of
// the servers, and with tools also those that building and testing need.
func Missing(tools bool) []string {
	var missing []string
	for _, p := range packages() {
		if !p.server && !tools {
			continue
		}
		if !p.installed() {
			missing = append(missing, p.name)
		}
	}
	return missing
}

// Install installs the Missing packages with apt-get, writing its progress
// to w. It needs root, or sudo without a password; without either it fails
// with the command to run. Where installing a package starts its service
// (pgbouncer on 6432 with no databases), that service is stopped again:
// the stack runs its own.
func Install(ctx context.Context, w io.Writer, tools bool) error {
	missing := Missing(tools)
	if len(missing) == 0 {
		return nil
	}
	sudo, err := rootCommand()
	if err != nil {
		return fmt.Errorf("localstack: %s missing, and %w; install them with: sudo apt-get install %s",
			strings.Join(missing, ", "), err, strings.Join(missing, " "))
	}
	fmt.Fprintf(w, "==> installing %s with apt-get\n", strings.Join(missing, " "))
	apt := func(args ...string) error {
		argv := asRoot(sudo, args...)
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = w, w
		return cmd.Run()
	}
	install := append([]string{"apt-get", "install", "-y", "-q", "--no-install-recommends"}, missing...)
	// The package lists may be stale or empty (a fresh container): update
	// them and try again once.
	if err := apt(install...); err != nil {
		if err := apt("apt-get", "update", "-q"); err != nil {
			return fmt.Errorf("localstack: apt-get update: %w", err)
		}
		if err := apt(install...); err != nil {
			return fmt.Errorf("localstack: apt-get install %s: %w", strings.Join(missing, " "), err)
		}
	}
	if still := Missing(tools); len(still) > 0 {
		return fmt.Errorf("localstack: still missing after apt-get install: %s", strings.Join(still, ", "))
	}
	for _, p := range missing {
		if p == "pgbouncer" {
			stopPackagedPgBouncer(ctx, w, sudo)
		}
	}
	return nil
}

// rootCommand returns the prefix that runs a command as root: none for
// root, sudo -n where sudo needs no password.
func rootCommand() ([]string, error) {
	if os.Geteuid() == 0 {
		return nil, nil
	}
	if err := exec.Command("sudo", "-n", "true").Run(); err != nil {
		return nil, errors.New("installing needs root or sudo without a password")
	}
	return []string{"sudo", "-n"}, nil
}

// asRoot returns the command line that runs args with the prefix from
// rootCommand: args alone for root, which has no prefix.
func asRoot(prefix []string, args ...string) []string {
	return append(append([]string(nil), prefix...), args...)
}

// stopPackagedPgBouncer stops the PgBouncer that `apt-get install
// pgbouncer` starts where services may start: it would hold port 6432 with
// an empty [databases] section.
func stopPackagedPgBouncer(ctx context.Context, w io.Writer, sudo []string) {
	const pidfile = "/var/run/postgresql/pgbouncer.pid"
	pid, ok := pidFileAlive(pidfile, "pgbouncer")
	if !ok {
		return
	}
	fmt.Fprintf(w, "==> stopping the pgbouncer service that the package install started (pid %d)\n", pid)
	if len(sudo) == 0 {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	} else {
		argv := asRoot(sudo, "kill", "-TERM", fmt.Sprint(pid))
		_ = exec.CommandContext(ctx, argv[0], argv[1:]...).Run()
	}
	waitGone(ctx, pid, "pgbouncer", 10*time.Second)
}

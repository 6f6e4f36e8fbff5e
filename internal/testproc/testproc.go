// Package testproc runs servers of a test's own on free ports of 127.0.0.1:
// Redis, a PostgreSQL cluster initdb'd in a temporary directory (with any
// settings, such as wal_level=logical), PgBouncer, and any other program,
// so that a test can stop, kill and restart them without touching shared
// servers. The servers are those of internal/localstack, defined there
// once. Every Process is stopped when its test ends. A missing program
// skips the test, or fails it under CI=true (testenv.Unavailable).
package testproc

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/localstack"
	"github.com/warmcache/warmcache/internal/testenv"
)

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// ServiceUser returns the credential that PostgreSQL and PgBouncer run
// under (see localstack.ServiceAccount): the postgres user's when the test
// runs as root, the test's own (nil) otherwise. Without a postgres user the
// test is skipped, or fails under CI=true.
func ServiceUser(t testing.TB) *syscall.Credential {
	t.Helper()
	cred, err := localstack.ServiceAccount()
	if err != nil {
		testenv.Unavailable(t, "testproc: %v", err)
	}
	return cred
}

// OwnedDir makes a temporary directory that cred's user owns (t.TempDir's
// are private to the test's user), removed when the test ends.
func OwnedDir(t testing.TB, cred *syscall.Credential) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "warmcache-fault-")
	if err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := localstack.Chown(dir, cred); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Binary returns the path of an installed program (see
// localstack.Program), or skips the test (fails it under CI=true).
func Binary(t testing.TB, name string) string {
	t.Helper()
	p, err := localstack.Program(name)
	if err != nil {
		testenv.Unavailable(t, "testproc: %v", err)
	}
	return p
}

// PostgresBinDir returns the directory of the newest installed PostgreSQL's
// server programs (initdb, postgres), or skips the test.
func PostgresBinDir(t testing.TB) string {
	t.Helper()
	dir, err := localstack.PostgresBinDir("")
	if err != nil {
		testenv.Unavailable(t, "testproc: %v", err)
	}
	return dir
}

// Process is a server the test runs. It is killed, with its Process group,
// when the test ends, if it still runs.
type Process struct {
	Path string
	Args []string
	Env  []string // extra environment variables, NAME=value
	Dir  string   // working directory; also holds Log
	Log  string
	Cred *syscall.Credential
	Quit syscall.Signal // the signal that stops it cleanly

	cmd    *exec.Cmd
	exited chan struct{}
}

// Start runs the Process in the background; its output goes to p.Log.
func (p *Process) Start(t testing.TB) {
	t.Helper()
	if p.cmd != nil {
		t.Fatalf("%s already runs", p.Path)
	}
	out, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("log file: %v", err)
	}
	defer out.Close() // the child holds its own copy
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Dir = p.Dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.Cred, Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", p.Path, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	first := p.exited == nil
	p.cmd, p.exited = cmd, exited
	if first {
		t.Cleanup(func() { p.Stop(t, p.Quit) })
	}
}

// Stop sends sig to the Process and waits until it exits; after 15s it
// kills the Process group. Stopping a stopped Process does nothing.
func (p *Process) Stop(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	_ = p.cmd.Process.Signal(syscall.SIGCONT) // in case it was frozen
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		t.Errorf("%s did not stop within 15s of %v; killing it", p.Path, sig)
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
	p.cmd = nil
}

// Signal sends sig to the running Process.
func (p *Process) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if !p.Running() {
		t.Fatalf("%s does not run", p.Path)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to %s: %v", sig, p.Path, err)
	}
}

// Running reports whether the Process has not exited.
func (p *Process) Running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// LogTail returns the end of the Process's log.
func (p *Process) LogTail() string {
	b, _ := os.ReadFile(p.Log)
	if len(b) > 4<<10 {
		b = b[len(b)-4<<10:]
	}
	return string(b)
}

// WaitReady polls ready until it holds, failing the test if the Process
// exits or 30s pass.
func (p *Process) WaitReady(t testing.TB, ready func() bool) {
	t.Helper()
	Eventually(t, 30*time.Second, p.Path+" ready", func() bool {
		if !p.Running() {
			t.Fatalf("%s exited; log:\n%s", p.Path, p.LogTail())
		}
		return ready()
	})
}

// RunAs runs a command to its end as cred's user and fails the test with
// its output if it fails.
func RunAs(t testing.TB, cred *syscall.Credential, dir, path string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", path, strings.Join(args, " "), err, out)
	}
}

// Redis is a redis-server of the test's own, without persistence:
// a restart comes back empty, as after a crash.
type Redis struct {
	// Addr is the server's host:port.
	Addr string
	proc *Process
}

// StartRedis starts a redis-server of the test's own.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	dir := t.TempDir()
	srv := localstack.Redis{Dir: dir, Port: FreePort(t)}
	path, args := srv.Server(Binary(t, "redis-server"))
	r := &Redis{
		Addr: srv.Addr(),
		proc: &Process{Path: path, Args: args, Dir: dir, Log: filepath.Join(dir, "redis.log"), Quit: syscall.SIGTERM},
	}
	r.Start(t)
	return r
}

// Start starts the server and returns when it answers PING.
func (r *Redis) Start(t testing.TB) {
	t.Helper()
	r.proc.Start(t)
	r.proc.WaitReady(t, r.pong)
}

// Stop stops the server (SIGTERM) and returns when it has exited.
func (r *Redis) Stop(t testing.TB) { t.Helper(); r.proc.Stop(t, syscall.SIGTERM) }

// Freeze stops the server's Process (SIGSTOP) without closing anything:
// connections stay open and new ones are accepted by the kernel, but
// nothing answers, as with a Redis that hangs.
func (r *Redis) Freeze(t testing.TB) {
	t.Helper()
	r.proc.Signal(t, syscall.SIGSTOP)
}

// Thaw lets a frozen server go on (SIGCONT) and returns when it answers.
func (r *Redis) Thaw(t testing.TB) {
	t.Helper()
	r.proc.Signal(t, syscall.SIGCONT)
	r.proc.WaitReady(t, r.pong)
}

func (r *Redis) pong() bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return localstack.PingRedis(ctx, r.Addr) == nil
}

// Postgres is a PostgreSQL cluster of the test's own, with trust
// authentication for user postgres on 127.0.0.1 and fsync off.
type Postgres struct {
	srv  localstack.Postgres
	dir  string
	cred *syscall.Credential
	proc *Process
}

// StartPostgres initdb's a cluster in a temporary directory and starts
// it; settings are more "name=value" server settings, such as
// "wal_level=logical", which win over the defaults.
func StartPostgres(t testing.TB, settings ...string) *Postgres {
	t.Helper()
	cred := ServiceUser(t)
	dir := OwnedDir(t, cred)
	p := &Postgres{dir: dir, cred: cred, srv: localstack.Postgres{
		BinDir: PostgresBinDir(t), Data: filepath.Join(dir, "data"), Port: FreePort(t), SocketDir: dir,
		Settings: append([]string{"fsync=off", "full_page_writes=off", "max_connections=50",
			"shared_buffers=16MB", "log_min_messages=warning"}, settings...)}}
	initdb, args := p.srv.InitDB("C", "--no-sync")
	RunAs(t, cred, dir, initdb, args...)
	path, args := p.srv.Server()
	p.proc = &Process{Path: path, Args: args, Dir: dir, Log: filepath.Join(dir, "postgres.log"),
		Cred: cred, Quit: syscall.SIGINT} // fast shutdown
	p.Start(t)
	return p
}

// DSN returns the URL of database on the server.
func (p *Postgres) DSN(database string) string {
	return p.srv.DSN(database) + "&connect_timeout=2"
}

// Start starts the server and returns when it accepts queries.
func (p *Postgres) Start(t testing.TB) {
	t.Helper()
	p.proc.Start(t)
	p.proc.WaitReady(t, func() bool { return PingSQL(p.DSN("postgres")) })
}

// Stop shuts the server down with `pg_ctl stop -m fast` (open sessions are
// terminated, running transactions roll back) and returns when it has
// exited.
func (p *Postgres) Stop(t testing.TB) {
	t.Helper()
	p.proc.Stop(t, syscall.SIGINT)
}

// CreateDatabase creates a database on the server and returns its DSN.
func (p *Postgres) CreateDatabase(t testing.TB, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.DSN("postgres"))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create database: %v", err)
	}
	return p.DSN(name)
}

// PingSQL reports whether a connection to dsn runs a query.
func PingSQL(dsn string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return localstack.PingSQL(ctx, dsn) == nil
}

// PgBouncer is a PgBouncer of the test's own in transaction pooling, in
// front of one Postgres.
type PgBouncer struct {
	srv  localstack.PgBouncer
	proc *Process
}

// StartPgBouncer starts a PgBouncer in transaction pooling in front of pg.
func StartPgBouncer(t testing.TB, pg *Postgres) *PgBouncer {
	t.Helper()
	bin := Binary(t, "pgbouncer")
	cred := ServiceUser(t)
	dir := OwnedDir(t, cred)
	b := &PgBouncer{srv: localstack.PgBouncer{Dir: dir, Port: FreePort(t), PostgresPort: pg.Port(),
		Settings: []string{"server_login_retry = 1"}}}
	if _, err := b.srv.WriteConfig(cred); err != nil {
		t.Fatal(err)
	}
	// SIGTERM is PgBouncer 1.18's immediate shutdown: client and server
	// connections are closed at once, as in a crash of the pooler.
	path, args := b.srv.Server(bin)
	b.proc = &Process{Path: path, Args: args, Dir: dir, Log: filepath.Join(dir, "stderr.log"), Cred: cred,
		Quit: syscall.SIGTERM}
	b.Start(t)
	return b
}

// DSN returns the URL of database through the pooler.
func (b *PgBouncer) DSN(database string) string {
	return b.srv.DSN(database) + "&connect_timeout=2"
}

// Start starts the pooler and returns when a query passes through it.
func (b *PgBouncer) Start(t testing.TB) {
	t.Helper()
	b.proc.Start(t)
	b.proc.WaitReady(t, func() bool { return PingSQL(b.DSN("postgres")) })
}

// Stop shuts the pooler down at once (SIGTERM) and returns when it has
// exited.
func (b *PgBouncer) Stop(t testing.TB) { t.Helper(); b.proc.Stop(t, syscall.SIGTERM) }

// Port returns the server's TCP port.
func (p *Postgres) Port() int { return p.srv.Port }

// Package testproc runs servers of a test's own on free ports of 127.0.0.1:
// Redis, a PostgreSQL cluster initdb'd in a temporary directory (with any
// settings, such as wal_level=logical), PgBouncer, and any other program,
// so that a test can stop, kill and restart them without touching shared
// servers. Every Process is stopped when its test ends. A missing program
// skips the test, or fails it under CI=true (testenv.Unavailable).
package testproc

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
// under. Both refuse to run as root, so a test running as root runs them as
// the postgres user, and skips when there is none; otherwise they run as the
// test's own user (nil).
func ServiceUser(t testing.TB) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		testenv.Unavailable(t, "faulttest: running as root, and there is no postgres user to run PostgreSQL and PgBouncer as: %v", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		testenv.Unavailable(t, "faulttest: user postgres has ids %q/%q, not numbers", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
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
	chown(t, dir, cred)
	return dir
}

// chown gives path to cred's user; nil cred leaves it as it is.
func chown(t testing.TB, path string, cred *syscall.Credential) {
	t.Helper()
	if cred == nil {
		return
	}
	if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
		t.Fatalf("chown %s: %v", path, err)
	}
}

// Binary returns the path of a program, looked up in PATH and then in dirs,
// and skips the test when it is missing.
func Binary(t testing.TB, name string, dirs ...string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	testenv.Unavailable(t, "faulttest: %s not found in PATH or %v", name, dirs)
	return ""
}

// PostgresBinDir returns the directory of the newest installed PostgreSQL's
// server programs (initdb, postgres, pg_ctl), or skips the test.
func PostgresBinDir(t testing.TB) string {
	t.Helper()
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return va - vb
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i]
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	testenv.Unavailable(t, "faulttest: no PostgreSQL server programs (initdb) in /usr/lib/postgresql/*/bin or PATH")
	return ""
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
	waitFor(t, 30*time.Second, p.Path+" ready", func() bool {
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
	bin := Binary(t, "redis-server", "/usr/bin", "/usr/local/bin")
	dir := t.TempDir()
	port := FreePort(t)
	r := &Redis{
		Addr: fmt.Sprintf("127.0.0.1:%d", port),
		proc: &Process{Path: bin, Dir: dir, Log: filepath.Join(dir, "redis.log"), Quit: syscall.SIGTERM,
			Args: []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}},
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
	c, err := net.DialTimeout("tcp", r.Addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

// Postgres is a PostgreSQL cluster of the test's own, with trust
// authentication for user postgres on 127.0.0.1 and fsync off.
type Postgres struct {
	bin  string
	data string
	dir  string
	port int
	cred *syscall.Credential
	proc *Process
}

// StartPostgres initdb's a cluster in a temporary directory and starts
// it; settings are more "name=value" server settings, such as
// "wal_level=logical", which win over the defaults.
func StartPostgres(t testing.TB, settings ...string) *Postgres {
	t.Helper()
	bin := PostgresBinDir(t)
	cred := ServiceUser(t)
	dir := OwnedDir(t, cred)
	p := &Postgres{bin: bin, data: filepath.Join(dir, "data"), dir: dir, port: FreePort(t), cred: cred}
	RunAs(t, cred, dir, filepath.Join(bin, "initdb"), "-D", p.data, "-U", "postgres",
		"--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	p.proc = &Process{Path: filepath.Join(bin, "postgres"), Dir: dir, Log: filepath.Join(dir, "postgres.log"),
		Cred: cred, Quit: syscall.SIGINT, // fast shutdown
		Args: []string{"-D", p.data, "-p", strconv.Itoa(p.port),
			"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + dir,
			"-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=50",
			"-c", "shared_buffers=16MB", "-c", "log_min_messages=warning"}}
	for _, kv := range settings {
		p.proc.Args = append(p.proc.Args, "-c", kv)
	}
	p.Start(t)
	return p
}

// DSN returns the URL of database on the server.
func (p *Postgres) DSN(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=2", p.port, database)
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
	RunAs(t, p.cred, p.dir, filepath.Join(p.bin, "pg_ctl"), "stop", "-D", p.data, "-m", "fast", "-w", "-t", "30")
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
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return false
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx) == nil
}

// PgBouncer is a PgBouncer of the test's own in transaction pooling, in
// front of one Postgres.
type PgBouncer struct {
	port int
	proc *Process
}

// StartPgBouncer starts a PgBouncer in transaction pooling in front of pg.
func StartPgBouncer(t testing.TB, pg *Postgres) *PgBouncer {
	t.Helper()
	bin := Binary(t, "pgbouncer", "/usr/sbin", "/usr/local/bin")
	cred := ServiceUser(t)
	dir := OwnedDir(t, cred)
	b := &PgBouncer{port: FreePort(t)}
	ini := filepath.Join(dir, "pgbouncer.ini")
	users := filepath.Join(dir, "userlist.txt")
	config := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = 200
default_pool_size = 10
ignore_startup_parameters = extra_float_digits
server_login_retry = 1
logfile = %s
pidfile = %s
`, pg.port, b.port, users, filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	for path, text := range map[string]string{ini: config, users: `"postgres" ""` + "\n"} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatalf("write %s: %v", path, err)
		}
		chown(t, path, cred)
	}
	// SIGTERM is PgBouncer 1.18's immediate shutdown: client and server
	// connections are closed at once, as in a crash of the pooler.
	b.proc = &Process{Path: bin, Dir: dir, Log: filepath.Join(dir, "stderr.log"), Cred: cred,
		Quit: syscall.SIGTERM, Args: []string{ini}}
	b.Start(t)
	return b
}

// DSN returns the URL of database through the pooler.
func (b *PgBouncer) DSN(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=2", b.port, database)
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
func (p *Postgres) Port() int { return p.port }

// waitFor polls cond every 10ms until it holds, failing the test after
// limit.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		<-tick.C
	}
}

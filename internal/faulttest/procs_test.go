package faulttest_test

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
)

// The fault tests run their own servers on free ports of 127.0.0.1, so that
// they can stop and restart them without touching the shared ones.

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// serviceUser returns the credential that PostgreSQL and PgBouncer run
// under. Both refuse to run as root, so a test running as root runs them as
// the postgres user, and skips when there is none; otherwise they run as the
// test's own user (nil).
func serviceUser(t *testing.T) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Skipf("faulttest: running as root, and there is no postgres user to run PostgreSQL and PgBouncer as: %v", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		t.Skipf("faulttest: user postgres has ids %q/%q, not numbers", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

// ownedDir makes a temporary directory that cred's user owns (t.TempDir's
// are private to the test's user), removed when the test ends.
func ownedDir(t *testing.T, cred *syscall.Credential) string {
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
func chown(t *testing.T, path string, cred *syscall.Credential) {
	t.Helper()
	if cred == nil {
		return
	}
	if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
		t.Fatalf("chown %s: %v", path, err)
	}
}

// binary returns the path of a program, looked up in PATH and then in dirs,
// and skips the test when it is missing.
func binary(t *testing.T, name string, dirs ...string) string {
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
	t.Skipf("faulttest: %s not found in PATH or %v", name, dirs)
	return ""
}

// postgresBinDir returns the directory of the newest installed PostgreSQL's
// server programs (initdb, postgres, pg_ctl), or skips the test.
func postgresBinDir(t *testing.T) string {
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
	t.Skip("faulttest: no PostgreSQL server programs (initdb) in /usr/lib/postgresql/*/bin or PATH")
	return ""
}

// process is a server the test runs. It is killed, with its process group,
// when the test ends, if it still runs.
type process struct {
	path string
	args []string
	dir  string // working directory; also holds log
	log  string
	cred *syscall.Credential
	quit syscall.Signal // the signal that stops it cleanly

	cmd    *exec.Cmd
	exited chan struct{}
}

// start runs the process in the background; its output goes to p.log.
func (p *process) start(t *testing.T) {
	t.Helper()
	if p.cmd != nil {
		t.Fatalf("%s already runs", p.path)
	}
	out, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("log file: %v", err)
	}
	defer out.Close() // the child holds its own copy
	cmd := exec.Command(p.path, p.args...)
	cmd.Dir = p.dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred, Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", p.path, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	first := p.exited == nil
	p.cmd, p.exited = cmd, exited
	if first {
		t.Cleanup(func() { p.stop(t, p.quit) })
	}
}

// stop sends sig to the process and waits until it exits; after 15s it
// kills the process group. Stopping a stopped process does nothing.
func (p *process) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	_ = p.cmd.Process.Signal(syscall.SIGCONT) // in case it was frozen
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		t.Errorf("%s did not stop within 15s of %v; killing it", p.path, sig)
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
	p.cmd = nil
}

// signal sends sig to the running process.
func (p *process) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if !p.running() {
		t.Fatalf("%s does not run", p.path)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to %s: %v", sig, p.path, err)
	}
}

// running reports whether the process has not exited.
func (p *process) running() bool {
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

// logTail returns the end of the process's log.
func (p *process) logTail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 4<<10 {
		b = b[len(b)-4<<10:]
	}
	return string(b)
}

// waitReady polls ready until it holds, failing the test if the process
// exits or 30s pass.
func (p *process) waitReady(t *testing.T, ready func() bool) {
	t.Helper()
	eventually(t, 30*time.Second, p.path+" ready", func() bool {
		if !p.running() {
			t.Fatalf("%s exited; log:\n%s", p.path, p.logTail())
		}
		return ready()
	})
}

// runAs runs a command to its end as cred's user and fails the test with
// its output if it fails.
func runAs(t *testing.T, cred *syscall.Credential, dir, path string, args ...string) {
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

// redisServer is a redis-server of the test's own, without persistence:
// a restart comes back empty, as after a crash.
type redisServer struct {
	addr string
	proc *process
}

func startRedis(t *testing.T) *redisServer {
	t.Helper()
	bin := binary(t, "redis-server", "/usr/bin", "/usr/local/bin")
	dir := t.TempDir()
	port := freePort(t)
	r := &redisServer{
		addr: fmt.Sprintf("127.0.0.1:%d", port),
		proc: &process{path: bin, dir: dir, log: filepath.Join(dir, "redis.log"), quit: syscall.SIGTERM,
			args: []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}},
	}
	r.start(t)
	return r
}

// start starts the server and returns when it answers PING.
func (r *redisServer) start(t *testing.T) {
	t.Helper()
	r.proc.start(t)
	r.proc.waitReady(t, r.pong)
}

// stop stops the server (SIGTERM) and returns when it has exited.
func (r *redisServer) stop(t *testing.T) { t.Helper(); r.proc.stop(t, syscall.SIGTERM) }

// freeze stops the server's process (SIGSTOP) without closing anything:
// connections stay open and new ones are accepted by the kernel, but
// nothing answers, as with a Redis that hangs.
func (r *redisServer) freeze(t *testing.T) {
	t.Helper()
	r.proc.signal(t, syscall.SIGSTOP)
}

// thaw lets a frozen server go on (SIGCONT) and returns when it answers.
func (r *redisServer) thaw(t *testing.T) {
	t.Helper()
	r.proc.signal(t, syscall.SIGCONT)
	r.proc.waitReady(t, r.pong)
}

func (r *redisServer) pong() bool {
	c, err := net.DialTimeout("tcp", r.addr, 200*time.Millisecond)
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

// postgresServer is a PostgreSQL cluster of the test's own, with trust
// authentication for user postgres on 127.0.0.1 and fsync off.
type postgresServer struct {
	bin  string
	data string
	dir  string
	port int
	cred *syscall.Credential
	proc *process
}

func startPostgres(t *testing.T) *postgresServer {
	t.Helper()
	bin := postgresBinDir(t)
	cred := serviceUser(t)
	dir := ownedDir(t, cred)
	p := &postgresServer{bin: bin, data: filepath.Join(dir, "data"), dir: dir, port: freePort(t), cred: cred}
	runAs(t, cred, dir, filepath.Join(bin, "initdb"), "-D", p.data, "-U", "postgres",
		"--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	p.proc = &process{path: filepath.Join(bin, "postgres"), dir: dir, log: filepath.Join(dir, "postgres.log"),
		cred: cred, quit: syscall.SIGINT, // fast shutdown
		args: []string{"-D", p.data, "-p", strconv.Itoa(p.port),
			"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + dir,
			"-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=50",
			"-c", "shared_buffers=16MB", "-c", "log_min_messages=warning"}}
	p.start(t)
	return p
}

// dsn returns the URL of database on the server.
func (p *postgresServer) dsn(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=2", p.port, database)
}

// start starts the server and returns when it accepts queries.
func (p *postgresServer) start(t *testing.T) {
	t.Helper()
	p.proc.start(t)
	p.proc.waitReady(t, func() bool { return pingSQL(p.dsn("postgres")) })
}

// stop shuts the server down with `pg_ctl stop -m fast` (open sessions are
// terminated, running transactions roll back) and returns when it has
// exited.
func (p *postgresServer) stop(t *testing.T) {
	t.Helper()
	runAs(t, p.cred, p.dir, filepath.Join(p.bin, "pg_ctl"), "stop", "-D", p.data, "-m", "fast", "-w", "-t", "30")
	p.proc.stop(t, syscall.SIGINT)
}

// createDatabase creates a database on the server and returns its DSN.
func (p *postgresServer) createDatabase(t *testing.T, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.dsn("postgres"))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create database: %v", err)
	}
	return p.dsn(name)
}

// pingSQL reports whether a connection to dsn runs a query.
func pingSQL(dsn string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return false
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx) == nil
}

// pgBouncer is a PgBouncer of the test's own in transaction pooling, in
// front of one postgresServer.
type pgBouncer struct {
	port int
	proc *process
}

func startPgBouncer(t *testing.T, pg *postgresServer) *pgBouncer {
	t.Helper()
	bin := binary(t, "pgbouncer", "/usr/sbin", "/usr/local/bin")
	cred := serviceUser(t)
	dir := ownedDir(t, cred)
	b := &pgBouncer{port: freePort(t)}
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
	b.proc = &process{path: bin, dir: dir, log: filepath.Join(dir, "stderr.log"), cred: cred,
		quit: syscall.SIGTERM, args: []string{ini}}
	b.start(t)
	return b
}

// dsn returns the URL of database through the pooler.
func (b *pgBouncer) dsn(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=2", b.port, database)
}

// start starts the pooler and returns when a query passes through it.
func (b *pgBouncer) start(t *testing.T) {
	t.Helper()
	b.proc.start(t)
	b.proc.waitReady(t, func() bool { return pingSQL(b.dsn("postgres")) })
}

// stop shuts the pooler down at once (SIGTERM) and returns when it has
// exited.
func (b *pgBouncer) stop(t *testing.T) { t.Helper(); b.proc.stop(t, syscall.SIGTERM) }

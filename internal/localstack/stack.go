package localstack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// startLimit bounds how long Up waits for a server it started to answer.
const startLimit = 60 * time.Second

// postgresSettings are the settings of the stack's cluster: the service
// follows the replication stream (wal_level=logical), and the tests open
// many connections and replication slots.
func postgresSettings() []string {
	return []string{"wal_level=logical", "max_wal_senders=20", "max_replication_slots=20",
		"max_connections=200", "max_slot_wal_keep_size=1GB"}
}

// stack is one run of Up or Down.
type stack struct {
	cfg  Config
	w    io.Writer
	cred *syscall.Credential
}

func (s *stack) logf(format string, args ...any) {
	fmt.Fprintf(s.w, "==> "+format+"\n", args...)
}

func (s *stack) postgres(binDir string) Postgres {
	return Postgres{BinDir: binDir, Data: filepath.Join(s.cfg.Dir, "postgres", "data"), Port: s.cfg.PostgresPort,
		Settings: postgresSettings()}
}

func (s *stack) pgbouncer() PgBouncer {
	return PgBouncer{Dir: filepath.Join(s.cfg.Dir, "pgbouncer"), Port: s.cfg.PgBouncerPort, PostgresPort: s.cfg.PostgresPort,
		MaxClientConn: 1000, PoolSize: 20}
}

func (s *stack) redis() Redis {
	dir := filepath.Join(s.cfg.Dir, "redis")
	return Redis{Dir: dir, Port: s.cfg.RedisPort, PidFile: filepath.Join(dir, "redis.pid"), LogFile: filepath.Join(dir, "redis.log")}
}

// Up starts whatever part of the stack is not running, creates the
// database warmcache, and writes a summary to w; run again, it changes
// nothing. It installs the servers that are missing (see Install), writes
// its progress to w, and returns an error that says what to do when a port
// is taken by something else or a server does not start.
func Up(ctx context.Context, c Config, w io.Writer) error {
	s := &stack{cfg: c.withDefaults(), w: w}
	if err := Install(ctx, w, false); err != nil {
		return err
	}
	cred, err := ServiceAccount()
	if err != nil {
		return err
	}
	s.cred = cred
	if err := s.stateDir(ctx); err != nil {
		return err
	}
	pg, err := s.postgresUp(ctx)
	if err != nil {
		return err
	}
	redis, err := s.redisUp(ctx)
	if err != nil {
		return err
	}
	pgb, err := s.pgbouncerUp(ctx)
	if err != nil {
		return err
	}
	db, err := s.createDatabase(ctx)
	if err != nil {
		return err
	}
	if err := PingSQL(ctx, s.cfg.PgBouncerDSN(Database)); err != nil {
		return fmt.Errorf("localstack: database %s through PgBouncer on %s: %w", Database, s.cfg.PgBouncerAddr(), err)
	}
	fmt.Fprintf(w, `warmcache local stack is up (state in %s):
  postgres   %s  %s
  redis      %s  %s
  pgbouncer  %s  %s
             config %s
  database   %s (%s)
`, s.cfg.Dir, s.cfg.PostgresAddr(), pg, s.cfg.RedisAddr(), redis, s.cfg.PgBouncerAddr(), pgb, s.pgbouncer().ConfigPath(), Database, db)
	return nil
}

// stateDir creates the state directory, searchable by every user, and
// refuses one that another user owns or that the service account cannot
// reach.
func (s *stack) stateDir(ctx context.Context) error {
	dir := s.cfg.Dir
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("localstack: %w", err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			return fmt.Errorf("localstack: %w", err)
		}
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("localstack: %w", err)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !st.IsDir() || (ok && int(sys.Uid) != os.Geteuid()) {
		return fmt.Errorf("localstack: %s is not a directory of this user; set %s to one of your own", dir, EnvDir)
	}
	if s.cred != nil {
		if err := Command(ctx, s.cred, "test", "-x", dir).Run(); err != nil {
			return fmt.Errorf("localstack: user %s cannot reach %s; set %s to a directory every user can search (such as one under /var/tmp)",
				ServiceUser, dir, EnvDir)
		}
	}
	return nil
}

// mkdirFor creates a directory of the state directory for cred's user.
func mkdirFor(dir string, cred *syscall.Credential) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("localstack: %w", err)
	}
	return Chown(dir, cred)
}

// postgresUp starts the cluster unless a PostgreSQL answers on its port,
// and checks that the one there can carry change capture.
func (s *stack) postgresUp(ctx context.Context) (status string, err error) {
	dsn := s.cfg.PostgresDSN("postgres")
	data := s.postgres("").Data
	switch {
	case PingSQL(ctx, dsn) == nil:
		status = "already running, not started by localstack"
		if pid, ok := pidFileAlive(filepath.Join(data, "postmaster.pid"), "postgres"); ok {
			status = fmt.Sprintf("own cluster %s (pid %d), started earlier", data, pid)
		}
	case portOpen(s.cfg.PostgresPort):
		return "", fmt.Errorf("localstack: something listens on %s but does not let user postgres in without a password, as the stack's PostgreSQL does; stop it, or set %s to a free port",
			s.cfg.PostgresAddr(), EnvPostgresPort)
	default:
		if status, err = s.startPostgres(ctx, data); err != nil {
			return "", err
		}
	}
	conn, err := connect(ctx, dsn)
	if err != nil {
		return "", fmt.Errorf("localstack: PostgreSQL on %s: %w", s.cfg.PostgresAddr(), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var version, walLevel string
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version'), current_setting('wal_level')").Scan(&version, &walLevel); err != nil {
		return "", fmt.Errorf("localstack: PostgreSQL on %s: %w", s.cfg.PostgresAddr(), err)
	}
	if walLevel != "logical" {
		return "", fmt.Errorf("localstack: PostgreSQL on %s runs wal_level=%s; change capture needs logical (stop it, or set %s to a free port)",
			s.cfg.PostgresAddr(), walLevel, EnvPostgresPort)
	}
	// PgBouncer's userlist admits root too; give it a role.
	if _, err := conn.Exec(ctx, `DO $$ BEGIN
IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'root') THEN CREATE ROLE root LOGIN SUPERUSER; END IF;
END $$`); err != nil {
		return "", fmt.Errorf("localstack: create role root: %w", err)
	}
	return "PostgreSQL " + version + ": " + status, nil
}

// startPostgres initdb's the cluster unless it exists, and starts it.
func (s *stack) startPostgres(ctx context.Context, data string) (string, error) {
	version := ""
	if b, err := os.ReadFile(filepath.Join(data, "PG_VERSION")); err == nil {
		version = strings.TrimSpace(string(b))
	}
	binDir, err := PostgresBinDir(version)
	if err != nil {
		if version != "" {
			return "", fmt.Errorf("localstack: %s is a PostgreSQL %s cluster, but that version is not installed: %w", data, version, err)
		}
		return "", err
	}
	pg := s.postgres(binDir)
	dir := filepath.Dir(data)
	if err := mkdirFor(dir, s.cred); err != nil {
		return "", err
	}
	if version == "" {
		s.logf("initdb %s (a few seconds)", data)
		path, args := pg.InitDB("C.UTF-8")
		cmd := Command(ctx, s.cred, path, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			_ = os.WriteFile(filepath.Join(dir, "initdb.log"), out, 0o644)
			return "", fmt.Errorf("localstack: initdb %s: %w\n%s", data, err, out)
		}
	}
	s.logf("starting PostgreSQL on %s (cluster %s)", s.cfg.PostgresAddr(), data)
	path, args := pg.Server()
	d, err := startDaemon(s.cred, dir, filepath.Join(dir, "postgres.log"), path, args)
	if err != nil {
		return "", err
	}
	if err := d.waitReady(ctx, s, "PostgreSQL", func(ctx context.Context) error { return PingSQL(ctx, pg.DSN("postgres")) }); err != nil {
		return "", err
	}
	return fmt.Sprintf("own cluster %s (pid %d), started now", data, d.cmd.Process.Pid), nil
}

// redisUp uses the Redis that answers on the port, or starts one.
func (s *stack) redisUp(ctx context.Context) (string, error) {
	r := s.redis()
	var status string
	switch {
	case PingRedis(ctx, r.Addr()) == nil:
		status = "already running, not started by localstack"
		if pid, ok := pidFileAlive(r.PidFile, "redis-server"); ok {
			status = fmt.Sprintf("own, dir %s (pid %d), started earlier", r.Dir, pid)
		}
	case portOpen(r.Port):
		return "", fmt.Errorf("localstack: something listens on %s but does not answer Redis's PING; stop it, or set %s to a free port",
			r.Addr(), EnvRedisPort)
	default:
		bin, err := Program("redis-server")
		if err != nil {
			return "", err
		}
		if err := mkdirFor(r.Dir, nil); err != nil {
			return "", err
		}
		s.logf("starting redis-server on %s", r.Addr())
		path, args := r.Server(bin)
		d, err := startDaemon(nil, r.Dir, r.LogFile, path, args)
		if err != nil {
			return "", err
		}
		if err := d.waitReady(ctx, s, "redis-server", func(ctx context.Context) error { return PingRedis(ctx, r.Addr()) }); err != nil {
			return "", err
		}
		status = fmt.Sprintf("own, dir %s (pid %d), started now", r.Dir, d.cmd.Process.Pid)
	}
	version, err := redisVersion(ctx, r.Addr())
	if err != nil {
		return "", fmt.Errorf("localstack: redis on %s: %w", r.Addr(), err)
	}
	return "Redis " + version + ": " + status, nil
}

// redisVersion returns redis_version from INFO server.
func redisVersion(ctx context.Context, addr string) (string, error) {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("INFO server\r\n")); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
	if err != nil || !strings.HasPrefix(head, "$") {
		return "", fmt.Errorf("INFO answered %q", strings.TrimSpace(head))
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "", errors.New("INFO server has no redis_version")
}

// pgbouncerUp starts the stack's PgBouncer unless it runs, refreshing the
// configuration of one that runs.
func (s *stack) pgbouncerUp(ctx context.Context) (string, error) {
	b := s.pgbouncer()
	bin, err := Program("pgbouncer")
	if err != nil {
		return "", err
	}
	if err := mkdirFor(b.Dir, s.cred); err != nil {
		return "", err
	}
	status := ""
	pid, ok := pidFileAlive(b.PidPath(), "pgbouncer")
	if ok && !strings.Contains(readFile(b.ConfigPath()), fmt.Sprintf("\nlisten_port = %d\n", b.Port)) {
		// A reload cannot move PgBouncer to another port: restart it.
		s.logf("pgbouncer (pid %d) listens on another port; stopping it", pid)
		if err := stopProcess(ctx, pid, "pgbouncer", syscall.SIGTERM); err != nil {
			return "", err
		}
		ok = false
	}
	if ok {
		changed, err := b.WriteConfig(s.cred)
		if err != nil {
			return "", err
		}
		if changed {
			s.logf("pgbouncer's configuration changed; reloading it")
			if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
				return "", fmt.Errorf("localstack: reload pgbouncer %d: %w", pid, err)
			}
		}
		status = fmt.Sprintf("own (pid %d), started earlier", pid)
	} else if s.pgbouncerPassesThrough(ctx) == nil {
		return "already running, not started by localstack", nil
	} else if portOpen(b.Port) {
		return "", fmt.Errorf("localstack: something listens on %s but does not pass connections through to the PostgreSQL on %s as user postgres; stop it (a packaged pgbouncer: service pgbouncer stop), or set %s to a free port",
			s.cfg.PgBouncerAddr(), s.cfg.PostgresAddr(), EnvPgBouncerPort)
	} else {
		if _, err := b.WriteConfig(s.cred); err != nil {
			return "", err
		}
		_ = os.Remove(b.PidPath()) // stale
		// max_client_conn = 1000 needs more descriptors than a soft limit of
		// 1024; the child inherits a limit set here.
		var lim syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
			lim.Cur = lim.Max
			_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
		}
		s.logf("starting pgbouncer on %s", s.cfg.PgBouncerAddr())
		path, args := b.Server(bin)
		d, err := startDaemon(s.cred, b.Dir, b.LogPath(), path, args)
		if err != nil {
			return "", err
		}
		if err := d.waitReady(ctx, s, "pgbouncer", s.pgbouncerPassesThrough); err != nil {
			return "", err
		}
		status = fmt.Sprintf("own (pid %d), started now", d.cmd.Process.Pid)
	}
	if err := s.pgbouncerPassesThrough(ctx); err != nil {
		return "", fmt.Errorf("localstack: pgbouncer on %s: %w (log: %s)", s.cfg.PgBouncerAddr(), err, b.LogPath())
	}
	return "pool_mode=transaction: " + status, nil
}

// pgbouncerPassesThrough checks that the PgBouncer on the stack's port
// passes connections on to the stack's PostgreSQL.
func (s *stack) pgbouncerPassesThrough(ctx context.Context) error {
	conn, err := connect(ctx, s.cfg.PgBouncerDSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var port string
	if err := conn.QueryRow(ctx, "SHOW port").Scan(&port); err != nil {
		return err
	}
	if port != strconv.Itoa(s.cfg.PostgresPort) {
		return fmt.Errorf("it passes connections to the PostgreSQL on port %s, not %d", port, s.cfg.PostgresPort)
	}
	return nil
}

// createDatabase creates the database warmcache unless it exists.
func (s *stack) createDatabase(ctx context.Context) (string, error) {
	conn, err := connect(ctx, s.cfg.PostgresDSN("postgres"))
	if err != nil {
		return "", fmt.Errorf("localstack: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", Database).Scan(&exists); err != nil {
		return "", fmt.Errorf("localstack: %w", err)
	}
	if exists {
		return "exists", nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{Database}.Sanitize()); err != nil {
		return "", fmt.Errorf("localstack: create database %s: %w", Database, err)
	}
	return "created", nil
}

// Down stops the servers that Up started, each from its pid file, and
// returns when they have exited. Servers it did not start (a Redis that
// answered on the port) are left alone.
func Down(ctx context.Context, c Config, w io.Writer) error {
	s := &stack{cfg: c.withDefaults(), w: w}
	stopped := false
	for _, srv := range s.daemons() {
		pid, ok := pidFileAlive(srv.pidFile, srv.comm)
		if !ok {
			continue
		}
		s.logf("stopping %s (pid %d)", srv.name, pid)
		if err := stopProcess(ctx, pid, srv.comm, srv.sig); err != nil {
			return err
		}
		stopped = true
	}
	if !stopped {
		s.logf("nothing that localstack started is running (state in %s)", s.cfg.Dir)
	}
	return nil
}

// stackDaemon is one server the stack runs: its pid file, its command
// name, and the signal that stops it.
type stackDaemon struct {
	name, pidFile, comm string
	sig                 syscall.Signal
}

// daemons returns the stack's servers in the order Down stops them.
func (s *stack) daemons() []stackDaemon {
	return []stackDaemon{
		// SIGTERM closes PgBouncer's connections at once, SIGINT has
		// PostgreSQL roll open transactions back (fast shutdown).
		{"pgbouncer", s.pgbouncer().PidPath(), "pgbouncer", syscall.SIGTERM},
		{"PostgreSQL", filepath.Join(s.postgres("").Data, "postmaster.pid"), "postgres", syscall.SIGINT},
		{"redis-server", s.redis().PidFile, "redis-server", syscall.SIGTERM},
	}
}

// Pids returns the pids of the stack's running servers by command name,
// from their pid files: "postgres" (the postmaster, whose children are
// the backends), "pgbouncer" and "redis-server". A server that does not
// run, or that the stack did not start (a Redis that answered on the
// port), is absent. The load tools measure the servers' CPU by them.
func Pids(c Config) map[string]int {
	s := &stack{cfg: c.withDefaults()}
	out := map[string]int{}
	for _, srv := range s.daemons() {
		if pid, ok := pidFileAlive(srv.pidFile, srv.comm); ok {
			out[srv.comm] = pid
		}
	}
	return out
}

// Seed runs the SQL file path on the database warmcache of the stack's
// PostgreSQL, as one implicit transaction, and writes the command tags to
// w. The file holds plain SQL (no psql commands).
func Seed(ctx context.Context, c Config, path string, w io.Writer) error {
	sql, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("localstack: %w", err)
	}
	c = c.withDefaults()
	conn, err := connect(ctx, c.PostgresDSN(Database))
	if err != nil {
		return fmt.Errorf("localstack: %w (is the stack up?)", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	fmt.Fprintf(w, "==> running %s on %s\n", path, c.PostgresDSN(Database))
	results, err := conn.PgConn().Exec(ctx, string(sql)).ReadAll()
	if err != nil {
		return fmt.Errorf("localstack: %s: %w", path, err)
	}
	for _, r := range results {
		line := r.CommandTag.String()
		if len(r.Rows) == 1 {
			var cols []string
			for i, f := range r.FieldDescriptions {
				cols = append(cols, f.Name+"="+string(r.Rows[0][i]))
			}
			line += " (" + strings.Join(cols, ", ") + ")"
		}
		fmt.Fprintf(w, "    %s\n", line)
	}
	return nil
}

// daemon is a server that Up started in a session of its own, so that it
// outlives Up and the terminal's signals.
type daemon struct {
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
}

// startDaemon starts path as cred's user in dir, its output appended to
// logPath.
func startDaemon(cred *syscall.Credential, dir, logPath, path string, args []string) (*daemon, error) {
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("localstack: %w", err)
	}
	defer out.Close() // the child holds its own copy
	if err := Chown(logPath, cred); err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: cred}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("localstack: start %s: %w", path, err)
	}
	d := &daemon{cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(d.exited)
	}()
	return d, nil
}

// waitReady polls ready until it returns nil. It fails, with the end of
// the log, when the daemon exits or startLimit passes, and says that it
// waits when that takes more than a few seconds.
func (d *daemon) waitReady(ctx context.Context, s *stack, name string, ready func(context.Context) error) error {
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	told := false
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := ready(pctx)
		cancel()
		if err == nil {
			return nil
		}
		if !told && time.Since(start) > 5*time.Second {
			s.logf("waiting for %s to answer (up to %s; log: %s)", name, startLimit, d.log)
			told = true
		}
		if time.Since(start) > startLimit {
			return fmt.Errorf("localstack: %s did not answer within %s: %v; the end of %s:\n%s", name, startLimit, err, d.log, logTail(d.log))
		}
		select {
		case <-d.exited:
			return fmt.Errorf("localstack: %s exited (%v); the end of %s:\n%s", name, d.cmd.ProcessState, d.log, logTail(d.log))
		case <-ctx.Done():
			return fmt.Errorf("localstack: waiting for %s: %w", name, ctx.Err())
		case <-tick.C:
		}
	}
}

// logTail returns the last lines of a log file.
func logTail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2<<10 {
		b = b[len(b)-2<<10:]
	}
	return string(b)
}

// pidFileAlive returns the pid on the first line of a pid file when that
// process lives and its command name starts with comm, which guards
// against stale files and recycled pids.
func pidFileAlive(path, comm string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, procAlive(pid, comm)
}

// procAlive reports whether process pid lives (and is not a zombie) with a
// command name that starts with comm.
func procAlive(pid int, comm string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// "PID (COMM) STATE ...": COMM may hold spaces and parentheses.
	stat := string(b)
	open, end := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
	if open < 0 || end < open || len(stat) < end+3 {
		return false
	}
	return strings.HasPrefix(stat[open+1:end], comm) && stat[end+2] != 'Z'
}

// stopProcess sends sig to process pid and waits up to startLimit for it
// to exit.
func stopProcess(ctx context.Context, pid int, comm string, sig syscall.Signal) error {
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("localstack: stop %s (pid %d): %w", comm, pid, err)
	}
	if !waitGone(ctx, pid, comm, startLimit) {
		return fmt.Errorf("localstack: %s (pid %d) did not exit within %s of %v", comm, pid, startLimit, sig)
	}
	return nil
}

// readFile returns the text of a file, or "" when it cannot be read.
func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// waitGone waits up to limit for process pid to exit, and reports whether
// it did.
func waitGone(ctx context.Context, pid int, comm string, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for procAlive(pid, comm) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

package localstack

import (
	"bufio"
	"bytes"
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
	"time"

	"github.com/jackc/pgx/v5"
)

// ServiceUser is the account that PostgreSQL and PgBouncer run as when the
// caller is root: both refuse to run as root.
const ServiceUser = "postgres"

// ServiceAccount returns the credential to run PostgreSQL and PgBouncer
// under: nil, the caller's own, unless the caller is root; then that of
// ServiceUser. It fails when root has no such user.
func ServiceAccount() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(ServiceUser)
	if err != nil {
		return nil, fmt.Errorf("localstack: running as root, and there is no %s user to run PostgreSQL and PgBouncer as (they refuse root): %w", ServiceUser, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("localstack: user %s has ids %q/%q, not numbers", ServiceUser, u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// Chown gives path to cred's user; a nil cred leaves it as it is.
func Chown(path string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
		return fmt.Errorf("localstack: %w", err)
	}
	return nil
}

// Command returns a command that runs as cred's user (nil: the caller's).
func Command(ctx context.Context, cred *syscall.Credential, path string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	return cmd
}

// NotInstalledError says that a program is missing, and which Debian
// package brings it.
type NotInstalledError struct {
	Program string
	Package string
}

func (e *NotInstalledError) Error() string {
	return fmt.Sprintf("localstack: %s is not installed (Debian package %s; `go run ./cmd/localstack install` installs it)", e.Program, e.Package)
}

// Program returns the path of one of the programs that packages() lists,
// found on PATH or in the directories Debian installs them in.
func Program(name string) (string, error) {
	if name == "initdb" || name == "postgres" {
		dir, err := PostgresBinDir("")
		if err != nil {
			return "", err
		}
		return filepath.Join(dir, name), nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/bin", "/usr/local/sbin", "/usr/bin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", &NotInstalledError{Program: name, Package: packageOf(name)}
}

// PostgresBinDir returns the directory of PostgreSQL's server programs
// (initdb, postgres): those of version (such as "15") when it is not
// empty, else of the newest version under /usr/lib/postgresql, else the
// directory of initdb on PATH.
func PostgresBinDir(version string) (string, error) {
	if version != "" {
		dir := filepath.Join("/usr/lib/postgresql", version, "bin")
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err != nil {
			return "", &NotInstalledError{Program: "PostgreSQL " + version, Package: "postgresql-" + version}
		}
		return dir, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return va - vb
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", &NotInstalledError{Program: "initdb", Package: "postgresql"}
}

// Postgres is a PostgreSQL cluster in one data directory, served on
// 127.0.0.1, with trust authentication for user postgres.
type Postgres struct {
	// BinDir holds initdb and postgres (see PostgresBinDir).
	BinDir string
	// Data is the data directory.
	Data string
	// Port is the TCP port.
	Port int
	// SocketDir is where the unix socket goes. Empty means no socket.
	SocketDir string
	// Settings are more "name=value" server settings, after the defaults
	// (listen_addresses, port and socket), such as "wal_level=logical".
	Settings []string
}

// InitDB returns the command line that creates the cluster in p.Data:
// superuser postgres, trust authentication, UTF8. extra are more initdb
// flags, such as "--no-sync" for a cluster thrown away after a test.
func (p Postgres) InitDB(locale string, extra ...string) (path string, args []string) {
	args = append([]string{"-D", p.Data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=" + locale}, extra...)
	return filepath.Join(p.BinDir, "initdb"), args
}

// Server returns the command line that serves the cluster in the
// foreground. SIGINT stops it at once, rolling back open transactions
// (fast shutdown).
func (p Postgres) Server() (path string, args []string) {
	args = []string{"-D", p.Data, "-p", strconv.Itoa(p.Port),
		"-c", "listen_addresses=" + Host, "-c", "unix_socket_directories=" + p.SocketDir}
	for _, kv := range p.Settings {
		args = append(args, "-c", kv)
	}
	return filepath.Join(p.BinDir, "postgres"), args
}

// DSN returns the URL of database on the cluster.
func (p Postgres) DSN(database string) string { return DSN(p.Port, database) }

// PgBouncer is a PgBouncer in transaction pooling on 127.0.0.1 in front of
// the PostgreSQL on PostgresPort, passing any database name through, with
// trust authentication for users postgres and root.
type PgBouncer struct {
	// Dir holds pgbouncer.ini, userlist.txt, the log and the pid file.
	Dir string
	// Port is the TCP port.
	Port int
	// PostgresPort is the port of the PostgreSQL on 127.0.0.1 behind it.
	PostgresPort int
	// MaxClientConn is max_client_conn. Zero means 200.
	MaxClientConn int
	// PoolSize is default_pool_size. Zero means 10.
	PoolSize int
	// Settings are more "name = value" lines of the [pgbouncer] section.
	Settings []string
}

// ConfigPath returns the path of the pgbouncer.ini that WriteConfig writes.
func (b PgBouncer) ConfigPath() string { return filepath.Join(b.Dir, "pgbouncer.ini") }

// PidPath returns the path of the pid file PgBouncer writes.
func (b PgBouncer) PidPath() string { return filepath.Join(b.Dir, "pgbouncer.pid") }

// LogPath returns the path of PgBouncer's log.
func (b PgBouncer) LogPath() string { return filepath.Join(b.Dir, "pgbouncer.log") }

// Config returns the text of pgbouncer.ini.
func (b PgBouncer) Config() string {
	maxConn, pool := b.MaxClientConn, b.PoolSize
	if maxConn == 0 {
		maxConn = 200
	}
	if pool == 0 {
		pool = 10
	}
	var s strings.Builder
	fmt.Fprintf(&s, `;; Written by internal/localstack; edits are overwritten.
[databases]
; Any database name passes through to the PostgreSQL behind.
* = host=%s port=%d

[pgbouncer]
listen_addr = %s
listen_port = %d
; TCP only: a socket path under a deep directory can exceed 107 bytes.
unix_socket_dir =
auth_type = trust
auth_file = %s
; Admin console: psql -h %s -p %d -U postgres pgbouncer -c 'show pools'
admin_users = postgres, root
pool_mode = transaction
max_client_conn = %d
default_pool_size = %d
ignore_startup_parameters = extra_float_digits
logfile = %s
pidfile = %s
`, Host, b.PostgresPort, Host, b.Port, filepath.Join(b.Dir, "userlist.txt"), Host, b.Port,
		maxConn, pool, b.LogPath(), b.PidPath())
	for _, line := range b.Settings {
		s.WriteString(line + "\n")
	}
	return s.String()
}

// WriteConfig writes pgbouncer.ini and userlist.txt into b.Dir (which must
// exist) and gives them to cred's user. It reports whether pgbouncer.ini
// changed.
func (b PgBouncer) WriteConfig(cred *syscall.Credential) (changed bool, err error) {
	ini := []byte(b.Config())
	old, _ := os.ReadFile(b.ConfigPath())
	// Trust authentication still needs every user name in auth_file.
	files := []struct {
		path string
		text []byte
	}{{filepath.Join(b.Dir, "userlist.txt"), []byte(`"postgres" ""` + "\n" + `"root" ""` + "\n")}, {b.ConfigPath(), ini}}
	for _, f := range files {
		if err := os.WriteFile(f.path+".new", f.text, 0o644); err != nil {
			return false, fmt.Errorf("localstack: %w", err)
		}
		if err := Chown(f.path+".new", cred); err != nil {
			return false, err
		}
		if err := os.Rename(f.path+".new", f.path); err != nil {
			return false, fmt.Errorf("localstack: %w", err)
		}
	}
	return !bytes.Equal(old, ini), nil
}

// Server returns the command line that serves PgBouncer in the foreground,
// logging to its log file only. SIGTERM (in PgBouncer 1.18) closes every
// connection at once, as a crash of the pooler would; SIGINT waits for
// them.
func (b PgBouncer) Server(bin string) (path string, args []string) {
	return bin, []string{"-q", b.ConfigPath()}
}

// DSN returns the URL of database through the pooler.
func (b PgBouncer) DSN(database string) string { return DSN(b.Port, database) }

// Redis is a redis-server on 127.0.0.1 without persistence: a restart
// comes back empty, as after a crash.
type Redis struct {
	// Dir is its working directory.
	Dir string
	// Port is the TCP port.
	Port int
	// PidFile and LogFile, when not empty, are where it writes its pid and
	// its log (else to standard output).
	PidFile, LogFile string
}

// Server returns the command line that serves Redis in the foreground.
func (r Redis) Server(bin string) (path string, args []string) {
	args = []string{"--bind", Host, "--port", strconv.Itoa(r.Port), "--save", "", "--appendonly", "no", "--dir", r.Dir}
	if r.PidFile != "" {
		args = append(args, "--pidfile", r.PidFile)
	}
	if r.LogFile != "" {
		args = append(args, "--logfile", r.LogFile)
	}
	return bin, args
}

// Addr returns the server's host:port.
func (r Redis) Addr() string { return addr(r.Port) }

// PingSQL connects to dsn and runs an empty query: nil when a PostgreSQL
// (or a PgBouncer with a server behind it) answers.
func PingSQL(ctx context.Context, dsn string) error {
	conn, err := connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.Ping(ctx)
}

// connect opens a connection that speaks the simple query protocol, which
// PgBouncer's admin console and transaction pooling both accept.
func connect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("localstack: %w", err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	if cfg.ConnectTimeout == 0 || cfg.ConnectTimeout > 5*time.Second {
		cfg.ConnectTimeout = 5 * time.Second
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// PingRedis sends PING to the Redis at addr: nil when it answers PONG.
func PingRedis(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("redis at %s answered PING with %q", addr, strings.TrimSpace(line))
	}
	return nil
}

// portOpen reports whether something accepts TCP connections on
// 127.0.0.1:port.
func portOpen(port int) bool {
	c, err := net.DialTimeout("tcp", addr(port), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

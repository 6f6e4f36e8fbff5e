package localstack_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warmcache/warmcache/internal/localstack"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/testproc"
)

func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

func TestFromEnv(t *testing.T) {
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want localstack.Config
		err  string
	}{
		{"defaults", nil, localstack.Config{Dir: "/var/tmp/warmcache-stack-" + u.Username,
			PostgresPort: 55432, RedisPort: 6379, PgBouncerPort: 56432}, ""},
		{"moved", map[string]string{localstack.EnvDir: "/srv/stack", localstack.EnvPostgresPort: "15432",
			localstack.EnvRedisPort: "16379", localstack.EnvPgBouncerPort: "16432"},
			localstack.Config{Dir: "/srv/stack", PostgresPort: 15432, RedisPort: 16379, PgBouncerPort: 16432}, ""},
		{"not a port", map[string]string{localstack.EnvPgBouncerPort: "6432x"}, localstack.Config{}, "WARMCACHE_STACK_PGBOUNCER_PORT"},
		{"out of range", map[string]string{localstack.EnvPostgresPort: "70000"}, localstack.Config{}, "WARMCACHE_STACK_PG_PORT"},
		{"one port twice", map[string]string{localstack.EnvPgBouncerPort: "55432"}, localstack.Config{}, "three ports"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := localstack.FromEnv(env(tc.env))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("FromEnv = %+v, %v; want an error naming %s", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("FromEnv = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestAddressesAreWrittenOnce(t *testing.T) {
	c := localstack.Config{PostgresPort: 15432, RedisPort: 16379, PgBouncerPort: 16432}
	test := map[string]string{}
	for _, v := range c.TestEnv() {
		test[v.Name] = v.Value
	}
	run := map[string]string{}
	for _, v := range c.RunEnv() {
		run[v.Name] = v.Value
	}
	for name, want := range map[string]string{
		testenv.EnvPostgres:          "postgres://postgres@127.0.0.1:15432/postgres?sslmode=disable",
		testenv.EnvPgBouncer:         "postgres://postgres@127.0.0.1:16432/postgres?sslmode=disable",
		testenv.EnvRedis:             "127.0.0.1:16379",
		"WARMCACHE_STACK_PG_ADDR":    "127.0.0.1:15432",
		"WARMCACHE_POSTGRES_DSN":     "postgres://postgres@127.0.0.1:16432/warmcache?sslmode=disable",
		"WARMCACHE_REPLICATION_DSN":  "postgres://postgres@127.0.0.1:15432/warmcache?sslmode=disable",
		"WARMCACHE_STACK_DIRECT_DSN": "postgres://postgres@127.0.0.1:15432/warmcache?sslmode=disable",
		"WARMCACHE_REDIS_ADDRS":      "127.0.0.1:16379",
		"WARMCACHE_PG_POOLER":        "pgbouncer",
	} {
		got, ok := test[name]
		if !ok {
			got = run[name]
		}
		if got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

func TestWriteExportsKeepsWhatIsSet(t *testing.T) {
	var out bytes.Buffer
	vars := []localstack.Var{{"A", "it's"}, {"B", "stack"}}
	if err := localstack.WriteExports(&out, vars, env(map[string]string{"B": "ci's own"})); err != nil {
		t.Fatal(err)
	}
	want := "export A='it'\\''s'\nexport B='ci'\\''s own'\n"
	if out.String() != want {
		t.Errorf("WriteExports wrote\n%s\nwant\n%s", out.String(), want)
	}
}

func TestPgBouncerConfig(t *testing.T) {
	ini := localstack.PgBouncer{Dir: "/d", Port: 16432, PostgresPort: 15432, Settings: []string{"server_login_retry = 1"}}.Config()
	for _, line := range []string{"* = host=127.0.0.1 port=15432", "listen_addr = 127.0.0.1", "listen_port = 16432",
		"pool_mode = transaction", "auth_type = trust", "auth_file = /d/userlist.txt", "max_client_conn = 200",
		"default_pool_size = 10", "pidfile = /d/pgbouncer.pid", "server_login_retry = 1"} {
		if !strings.Contains(ini, "\n"+line+"\n") {
			t.Errorf("pgbouncer.ini lacks %q:\n%s", line, ini)
		}
	}
}

func TestPostgresServerSettingsComeLast(t *testing.T) {
	_, args := localstack.Postgres{BinDir: "/b", Data: "/d", Port: 15432, Settings: []string{"wal_level=logical"}}.Server()
	got := strings.Join(args, " ")
	want := "-D /d -p 15432 -c listen_addresses=127.0.0.1 -c unix_socket_directories= -c wal_level=logical"
	if got != want {
		t.Errorf("postgres %s\nwant     %s", got, want)
	}
}

// stackDir returns a fresh directory for a stack's state that every user
// can search, removed when the test ends.
func stackDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "warmcache-localstack-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "stack")
}

// needServers skips the test, or fails it under CI=true, when the servers
// are not installed.
func needServers(t *testing.T) {
	t.Helper()
	if missing := localstack.Missing(false); len(missing) > 0 {
		testenv.Unavailable(t, "localstack: %s not installed (go run ./cmd/localstack install)", strings.Join(missing, ", "))
	}
	if _, err := localstack.ServiceAccount(); err != nil {
		testenv.Unavailable(t, "%v", err)
	}
}

func TestUpIsIdempotentAndDownStopsAll(t *testing.T) {
	needServers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := localstack.Config{Dir: stackDir(t), PostgresPort: testproc.FreePort(t),
		RedisPort: testproc.FreePort(t), PgBouncerPort: testproc.FreePort(t)}
	t.Cleanup(func() {
		var out bytes.Buffer
		if err := localstack.Down(context.Background(), c, &out); err != nil {
			t.Errorf("Down: %v\n%s", err, &out)
		}
	})

	var first bytes.Buffer
	if err := localstack.Up(ctx, c, &first); err != nil {
		t.Fatalf("Up: %v\n%s", err, &first)
	}
	if n := strings.Count(first.String(), "started now"); n != 3 {
		t.Errorf("the first Up started %d servers, want 3:\n%s", n, &first)
	}
	if !strings.Contains(first.String(), "initdb") {
		t.Errorf("the first Up did not say that it runs initdb:\n%s", &first)
	}
	var second bytes.Buffer
	if err := localstack.Up(ctx, c, &second); err != nil {
		t.Fatalf("Up again: %v\n%s", err, &second)
	}
	if n := strings.Count(second.String(), "started earlier"); n != 3 || strings.Contains(second.String(), "==>") {
		t.Errorf("Up again did something (want 3 servers started earlier, no step):\n%s", &second)
	}
	if !strings.Contains(second.String(), "warmcache (exists)") {
		t.Errorf("Up again did not find the database warmcache:\n%s", &second)
	}

	// Through PgBouncer to the database warmcache, on a cluster that can
	// carry change capture.
	if err := localstack.PingSQL(ctx, c.PgBouncerDSN(localstack.Database)); err != nil {
		t.Errorf("through PgBouncer: %v", err)
	}
	if err := localstack.PingRedis(ctx, c.RedisAddr()); err != nil {
		t.Errorf("redis: %v", err)
	}
	seed := filepath.Join(t.TempDir(), "seed.sql")
	if err := os.WriteFile(seed, []byte("CREATE TABLE t (k int); INSERT INTO t SELECT generate_series(1, 3); SELECT current_setting('wal_level') AS wal_level, count(*) AS n FROM t;"), 0o644); err != nil {
		t.Fatal(err)
	}
	var seeded bytes.Buffer
	if err := localstack.Seed(ctx, c, seed, &seeded); err != nil {
		t.Fatalf("Seed: %v", err)
	}
	if !strings.Contains(seeded.String(), "INSERT 0 3") || !strings.Contains(seeded.String(), "wal_level=logical, n=3") {
		t.Errorf("Seed wrote:\n%s", &seeded)
	}

	if pids := localstack.Pids(c); len(pids) != 3 || pids["postgres"] == 0 || pids["pgbouncer"] == 0 || pids["redis-server"] == 0 {
		t.Errorf("Pids = %v, want the postmaster, pgbouncer and redis-server", pids)
	}

	var down bytes.Buffer
	if err := localstack.Down(ctx, c, &down); err != nil {
		t.Fatalf("Down: %v\n%s", err, &down)
	}
	for _, port := range []int{c.PostgresPort, c.RedisPort, c.PgBouncerPort} {
		if conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			conn.Close()
			t.Errorf("port %d still answers after Down:\n%s", port, &down)
		}
	}
	if pids := localstack.Pids(c); len(pids) != 0 {
		t.Errorf("Pids after Down = %v, want none", pids)
	}
	var again bytes.Buffer
	if err := localstack.Down(ctx, c, &again); err != nil || !strings.Contains(again.String(), "nothing") {
		t.Errorf("Down again = %v:\n%s", err, &again)
	}
}

func TestUpRefusesAStateDirTheServiceUserCannotReach(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root runs the servers as another user")
	}
	needServers(t)
	private := t.TempDir() // mode 0700, as mktemp -d or /root
	c := localstack.Config{Dir: filepath.Join(private, "stack"), PostgresPort: testproc.FreePort(t),
		RedisPort: testproc.FreePort(t), PgBouncerPort: testproc.FreePort(t)}
	var out bytes.Buffer
	err := localstack.Up(context.Background(), c, &out)
	if err == nil || !strings.Contains(err.Error(), localstack.EnvDir) || !strings.Contains(err.Error(), "cannot reach") {
		t.Fatalf("Up in a private directory = %v; want an error that names %s", err, localstack.EnvDir)
	}
}

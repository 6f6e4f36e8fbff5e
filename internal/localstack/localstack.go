// Package localstack runs the servers warmcache needs on one machine:
// PostgreSQL (a cluster of its own, with wal_level=logical), Redis, and
// PgBouncer in transaction pooling, all on 127.0.0.1 and on ports of their
// own, so that they never collide with the servers the machine already runs.
//
// It is the one way the project gets these servers. `make run` and
// `make test` start a long-lived stack with Up (through cmd/localstack), and
// the tests that stop and kill servers (internal/testproc) start their own
// from the same definitions: Postgres, PgBouncer and Redis. Config names
// every address and DSN, once.
//
// PostgreSQL and PgBouncer refuse to run as root, so when the caller is root
// they run as the postgres user (see ServiceAccount). Their state therefore
// lives outside the repository, which may sit under a directory only its
// owner can enter: in Config.Dir, /var/tmp/warmcache-stack-<user> by default.
//
// Install is the only code that installs packages (with apt-get).
//
// Serve is the one launcher of the warmcache binary as `warmcache serve`,
// for the end-to-end tests (e2e's harness.Spawn) and the load tools alike:
// it starts the binary, reads its endpoints from the lines it prints
// (internal/endpoint), waits for /readyz, and stops it (Process.Stop).
// Migrate runs its `warmcache migrate up`.
package localstack

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/user"
	"strconv"
	"strings"
)

// The environment variables that move the stack. Each is optional.
const (
	EnvDir           = "WARMCACHE_STACK_DIR"
	EnvPostgresPort  = "WARMCACHE_STACK_PG_PORT"
	EnvRedisPort     = "WARMCACHE_STACK_REDIS_PORT"
	EnvPgBouncerPort = "WARMCACHE_STACK_PGBOUNCER_PORT"
)

// The environment variables that name the servers to the integration tests
// (see internal/testenv). TestEnv gives them the stack's addresses.
const (
	EnvTestPostgres  = "WARMCACHE_TEST_POSTGRES_DSN"
	EnvTestPgBouncer = "WARMCACHE_TEST_PGBOUNCER_DSN"
	EnvTestRedis     = "WARMCACHE_TEST_REDIS_ADDR"
	EnvTestGreenplum = "WARMCACHE_TEST_GREENPLUM_DSN"
	EnvTestDaprd     = "WARMCACHE_TEST_DAPRD"
)

// The stack's addresses when Config leaves them zero.
const (
	// Host is the only address the servers listen on.
	Host                 = "127.0.0.1"
	DefaultPostgresPort  = 55432
	DefaultRedisPort     = 6379
	DefaultPgBouncerPort = 56432
)

// Database is the database that `make run` serves from.
const Database = "warmcache"

// Config says where the stack keeps its state and which ports it takes.
type Config struct {
	// Dir holds the servers' data, configuration, logs and pid files. Every
	// user must be able to search it and the directories above it, since
	// PostgreSQL and PgBouncer may run as another user. Empty means
	// /var/tmp/warmcache-stack-<user>.
	Dir string
	// PostgresPort is the port of the stack's own PostgreSQL cluster. Zero
	// means 55432.
	PostgresPort int
	// RedisPort is the port of Redis. A Redis that already answers there is
	// used as it is; otherwise the stack runs its own. Zero means 6379.
	RedisPort int
	// PgBouncerPort is the port of the PgBouncer in front of the cluster.
	// Zero means 56432.
	PgBouncerPort int
}

// FromEnv returns the Config that the WARMCACHE_STACK_* variables describe,
// with the defaults filled in. It fails on a port that is not a number.
func FromEnv(getenv func(string) string) (Config, error) {
	c := Config{Dir: getenv(EnvDir)}
	for _, p := range []struct {
		env  string
		port *int
	}{{EnvPostgresPort, &c.PostgresPort}, {EnvRedisPort, &c.RedisPort}, {EnvPgBouncerPort, &c.PgBouncerPort}} {
		v := getenv(p.env)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > 65535 {
			return Config{}, fmt.Errorf("localstack: %s=%q is not a port", p.env, v)
		}
		*p.port = n
	}
	c = c.withDefaults()
	if c.PostgresPort == c.PgBouncerPort || c.PostgresPort == c.RedisPort || c.PgBouncerPort == c.RedisPort {
		return Config{}, fmt.Errorf("localstack: PostgreSQL, PgBouncer and Redis need three ports, not %d, %d and %d",
			c.PostgresPort, c.PgBouncerPort, c.RedisPort)
	}
	return c, nil
}

// withDefaults fills in every zero field.
func (c Config) withDefaults() Config {
	if c.Dir == "" {
		c.Dir = "/var/tmp/warmcache-stack-" + userName()
	}
	if c.PostgresPort == 0 {
		c.PostgresPort = DefaultPostgresPort
	}
	if c.RedisPort == 0 {
		c.RedisPort = DefaultRedisPort
	}
	if c.PgBouncerPort == 0 {
		c.PgBouncerPort = DefaultPgBouncerPort
	}
	return c
}

// userName returns the name of the process's user, or its uid.
func userName() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return strconv.Itoa(os.Geteuid())
}

// DSN returns the URL of database on the PostgreSQL (or PgBouncer) at
// 127.0.0.1:port, for user postgres, whom the local servers trust.
func DSN(port int, database string) string {
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Host: addr(port), Path: "/" + database, RawQuery: "sslmode=disable"}
	return u.String()
}

func addr(port int) string { return net.JoinHostPort(Host, strconv.Itoa(port)) }

// PostgresAddr returns the host:port of the stack's PostgreSQL.
func (c Config) PostgresAddr() string { return addr(c.withDefaults().PostgresPort) }

// PgBouncerAddr returns the host:port of the stack's PgBouncer.
func (c Config) PgBouncerAddr() string { return addr(c.withDefaults().PgBouncerPort) }

// RedisAddr returns the host:port of the stack's Redis.
func (c Config) RedisAddr() string { return addr(c.withDefaults().RedisPort) }

// PostgresDSN returns the URL of database on the stack's PostgreSQL,
// straight, as migrations and the replication stream need.
func (c Config) PostgresDSN(database string) string {
	return DSN(c.withDefaults().PostgresPort, database)
}

// PgBouncerDSN returns the URL of database through the stack's PgBouncer.
func (c Config) PgBouncerDSN(database string) string {
	return DSN(c.withDefaults().PgBouncerPort, database)
}

// Var is an environment variable.
type Var struct{ Name, Value string }

// TestEnv returns the variables that point the integration tests at the
// stack, and the stack's addresses for scripts.
func (c Config) TestEnv() []Var {
	return []Var{
		{EnvTestPostgres, c.PostgresDSN("postgres")},
		{EnvTestPgBouncer, c.PgBouncerDSN("postgres")},
		{EnvTestRedis, c.RedisAddr()},
		{"WARMCACHE_STACK_PG_ADDR", c.PostgresAddr()},
		{"WARMCACHE_STACK_PGBOUNCER_ADDR", c.PgBouncerAddr()},
	}
}

// RunEnv returns the variables that make `warmcache serve` (and the other
// subcommands) use the stack as `make run` does: the warehouse through
// PgBouncer, the replication stream straight from PostgreSQL, which
// PgBouncer cannot carry. WARMCACHE_STACK_DIRECT_DSN is the direct DSN, for
// migrations and psql.
func (c Config) RunEnv() []Var {
	direct := c.PostgresDSN(Database)
	return []Var{
		{"WARMCACHE_POSTGRES_DSN", c.PgBouncerDSN(Database)},
		{"WARMCACHE_PG_POOLER", "pgbouncer"},
		{"WARMCACHE_REDIS_ADDRS", c.RedisAddr()},
		{"WARMCACHE_REPLICATION_DSN", direct},
		{"WARMCACHE_STACK_DIRECT_DSN", direct},
	}
}

// WriteExports writes vars as POSIX shell export lines, for eval. A
// variable that getenv already gives a value keeps that value, so that
// servers named by the caller (as CI does) win over the stack's.
func WriteExports(w io.Writer, vars []Var, getenv func(string) string) error {
	var b strings.Builder
	for _, v := range vars {
		value := v.Value
		if set := getenv(v.Name); set != "" {
			value = set
		}
		fmt.Fprintf(&b, "export %s='%s'\n", v.Name, strings.ReplaceAll(value, "'", `'\''`))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

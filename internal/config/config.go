// Package config loads the service's configuration from flags, WARMCACHE_*
// environment variables and an optional YAML file of namespaces. Flags win
// over the environment, and the environment over defaults. No other package
// reads the environment.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// Config is everything the service and its subcommands need.
type Config struct {
	// HTTPAddr is the REST listener. Default 127.0.0.1:8080.
	HTTPAddr string
	// PostgresDSN reaches the warehouse (directly or through PgBouncer).
	// Default postgres://postgres@127.0.0.1:5432/warmcache?sslmode=disable.
	PostgresDSN string
	// PGExecMode is the pgx exec mode; "auto" picks one per dialect.
	PGExecMode string
	// PGPooler is "none" or "pgbouncer" (transaction pooling in between).
	PGPooler string
	// PGMaxConns bounds the warehouse pool. Default 8.
	PGMaxConns int
	// RedisAddrs lists the hot tier's addresses: one for a standalone server,
	// several for a Cluster, Sentinels with RedisMasterName. Default
	// 127.0.0.1:6379.
	RedisAddrs      []string
	RedisMasterName string
	RedisPassword   string
	RedisDB         int
	// RedisPrefix starts every key the service writes. Default "wc:".
	RedisPrefix string
	// HotTimeout bounds one Redis call. Default 50ms.
	HotTimeout time.Duration
	// WarmTimeout bounds one warehouse call. Default 2s.
	WarmTimeout time.Duration
	// MaxWarmInflight bounds concurrent warehouse reads. Default 32.
	MaxWarmInflight int
	// BreakerThreshold is the number of consecutive warehouse failures
	// that open the circuit breaker. Default 5.
	BreakerThreshold int
	// BreakerCooldown is how long an open breaker refuses warehouse calls
	// before one probe; it doubles while probes fail, up to 30 times.
	// Default 1s.
	BreakerCooldown time.Duration
	// MaxInflight bounds the REST requests served at once; the excess gets
	// 503 with Retry-After at once instead of queueing. Default 1024.
	MaxInflight int
	// MaxBodyBytes bounds a request body. Default 1 MiB.
	MaxBodyBytes int64
	// MaxLoadBytes bounds the streamed body of a _load. Default 64 MiB.
	MaxLoadBytes int64
	// MaxBatchKeys bounds the keys of one _mget. Default 1000.
	MaxBatchKeys int
	// MaxResponseBytes bounds the values of one _mget answer (REST and
	// gRPC). Default 16 MiB.
	MaxResponseBytes int
	// MaxLoads bounds the bulk loads in progress at once, REST and gRPC
	// together. Default 4.
	MaxLoads int
	// LoadIdleTimeout cuts off a load whose client sends nothing for this
	// long. Default 30s.
	LoadIdleTimeout time.Duration
	// SpoolDir is where loads are spooled before they reach the warehouse.
	// Empty (the default) means the system's temporary directory.
	SpoolDir string
	// CursorKey signs _query cursors. Empty (the default) means a random
	// key per process; instances behind one load balancer need the same.
	CursorKey string
	// ShutdownTimeout bounds the drain on SIGTERM. Default 15s.
	ShutdownTimeout time.Duration
	// LogLevel is debug, info, warn or error. Default info.
	LogLevel string
	// PprofAddr is the loopback address of a separate listener serving
	// net/http/pprof. Empty (the default) means no profiling endpoints.
	PprofAddr string
	// NearCacheBytes bounds the in-process near cache (L1), which serves the
	// namespaces whose near_ttl is set and is kept coherent across instances
	// over Redis pub/sub. Zero (the default) means no near cache.
	NearCacheBytes int64
	// Freshness is how the service learns of writes that bypass it: auto
	// (change capture on PostgreSQL when wal_level is logical, polling
	// otherwise), capture, poll or off. Default auto.
	Freshness string
	// ReplicationDSN reaches PostgreSQL directly for change capture:
	// replication connections cannot pass PgBouncer. Empty means
	// PostgresDSN when PGPooler is none, and no change capture otherwise.
	ReplicationDSN string
	// ReplicationSlot names the deployment's replication slot; the
	// instances of one deployment share it. Default warmcache.
	ReplicationSlot string
	// PollInterval is the time between two watermark polls and two reads
	// of the namespace generations. Default 1s.
	PollInterval time.Duration
	// PollOverlap is how far back each poll reads again, for transactions
	// that commit after one with a higher version. Default 10s.
	PollOverlap time.Duration
	// Dialect names the warehouse dialect for `migrate plan`: postgres or
	// greenplum. Empty means the dialect of the DSN's server when it
	// answers, else postgres. Everywhere else the dialect is detected at
	// connect.
	Dialect string
	// NamespacesFile is the YAML file that declares namespaces. Empty means
	// the built-in widgets and widgets_archive namespaces.
	NamespacesFile string
	// Namespaces are loaded from NamespacesFile, or the built-in default.
	Namespaces []*warmcache.Namespace
	// Args are the arguments left after the flags.
	Args []string

	// GRPCAddr is the gRPC listener. Default 127.0.0.1:9090; empty means
	// no gRPC TCP listener.
	GRPCAddr string
	// DaprHTTPAddr and DaprGRPCAddr are the listeners of Dapr's state API
	// (HTTP /v1.0/state and gRPC dapr.proto.runtime.v1.Dapr), on ports of
	// their own as a Dapr sidecar has them (3500 and 50001). Empty, the
	// default, means the Dapr API is not served.
	DaprHTTPAddr string
	DaprGRPCAddr string
	// HTTPSocket and GRPCSocket are unix socket paths on which REST and gRPC
	// are also served, for a sidecar's application. Empty means none.
	HTTPSocket string
	GRPCSocket string
	// TLSCert and TLSKey are PEM files; when both are set the TCP listeners
	// (not the unix sockets) serve TLS. Empty means plain TCP.
	TLSCert string
	TLSKey  string
	// KeysFile is the YAML file of API keys (see ParseKeys). Empty means no
	// keys: every request is let through, and only loopback addresses and
	// unix sockets may be listened on.
	KeysFile string
	// APIKeys are loaded from KeysFile.
	APIKeys []auth.Key
}

// Load parses args (without the program and subcommand names) and the
// environment read through getenv. Errors name the flag, variable or field
// that is wrong. A -h or -help flag returns flag.ErrHelp after printing the
// usage to usage.
func Load(name string, args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	c := Config{
		HTTPAddr:         "127.0.0.1:8080",
		PostgresDSN:      "postgres://postgres@127.0.0.1:5432/warmcache?sslmode=disable",
		PGExecMode:       "auto",
		PGPooler:         "none",
		PGMaxConns:       8,
		RedisAddrs:       []string{"127.0.0.1:6379"},
		RedisPrefix:      "wc:",
		HotTimeout:       50 * time.Millisecond,
		WarmTimeout:      2 * time.Second,
		MaxWarmInflight:  32,
		BreakerThreshold: 5,
		BreakerCooldown:  time.Second,
		MaxInflight:      1024,
		MaxBodyBytes:     1 << 20,
		MaxLoadBytes:     64 << 20,
		MaxBatchKeys:     1000,
		MaxResponseBytes: 16 << 20,
		MaxLoads:         4,
		LoadIdleTimeout:  30 * time.Second,
		ShutdownTimeout:  15 * time.Second,
		LogLevel:         "info",
		GRPCAddr:         "127.0.0.1:9090",
		Freshness:        "auto",
		ReplicationSlot:  "warmcache",
		PollInterval:     time.Second,
		PollOverlap:      10 * time.Second,
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(usage)
	var redisAddrs string
	var errs []error
	str := func(p *string, flagName, env, help string) {
		if v := getenv(env); v != "" {
			*p = v
		}
		fs.StringVar(p, flagName, *p, help+" ("+env+")")
	}
	num := func(p *int, flagName, env, help string) {
		if v := getenv(env); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				errs = append(errs, fmt.Errorf("%s: want a positive integer, got %q", env, v))
			} else {
				*p = n
			}
		}
		fs.IntVar(p, flagName, *p, help+" ("+env+")")
	}
	dur := func(p *time.Duration, flagName, env, help string) {
		if v := getenv(env); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				errs = append(errs, fmt.Errorf("%s: want a positive duration such as 50ms, got %q", env, v))
			} else {
				*p = d
			}
		}
		fs.DurationVar(p, flagName, *p, help+" ("+env+")")
	}
	redisAddrs = strings.Join(c.RedisAddrs, ",")
	maxBody := int(c.MaxBodyBytes)
	maxLoad := int(c.MaxLoadBytes)
	str(&c.HTTPAddr, "http-addr", "WARMCACHE_HTTP_ADDR", "REST listen address")
	str(&c.PostgresDSN, "postgres-dsn", "WARMCACHE_POSTGRES_DSN", "warehouse connection string")
	str(&c.PGExecMode, "pg-exec-mode", "WARMCACHE_PG_EXEC_MODE", "pgx exec mode: auto, cache_statement, cache_describe, describe_exec, exec or simple_protocol")
	str(&c.PGPooler, "pg-pooler", "WARMCACHE_PG_POOLER", "pooler between the service and the warehouse: none or pgbouncer")
	num(&c.PGMaxConns, "pg-max-conns", "WARMCACHE_PG_MAX_CONNS", "warehouse pool size")
	str(&redisAddrs, "redis-addrs", "WARMCACHE_REDIS_ADDRS", "comma-separated Redis addresses (several for a Cluster)")
	str(&c.RedisMasterName, "redis-master", "WARMCACHE_REDIS_MASTER", "Sentinel master name")
	str(&c.RedisPassword, "redis-password", "WARMCACHE_REDIS_PASSWORD", "Redis password")
	str(&c.RedisPrefix, "redis-prefix", "WARMCACHE_REDIS_PREFIX", "prefix of every Redis key")
	dur(&c.HotTimeout, "hot-timeout", "WARMCACHE_HOT_TIMEOUT", "deadline of one Redis call")
	dur(&c.WarmTimeout, "warm-timeout", "WARMCACHE_WARM_TIMEOUT", "deadline of one warehouse call")
	num(&c.MaxWarmInflight, "max-warm-inflight", "WARMCACHE_MAX_WARM_INFLIGHT", "concurrent warehouse reads")
	num(&c.BreakerThreshold, "breaker-threshold", "WARMCACHE_BREAKER_THRESHOLD", "consecutive warehouse failures that open the circuit breaker")
	dur(&c.BreakerCooldown, "breaker-cooldown", "WARMCACHE_BREAKER_COOLDOWN", "first wait of an open circuit breaker")
	num(&c.MaxInflight, "max-inflight", "WARMCACHE_MAX_INFLIGHT", "REST requests served at once")
	num(&maxBody, "max-body-bytes", "WARMCACHE_MAX_BODY_BYTES", "largest request body")
	num(&maxLoad, "max-load-bytes", "WARMCACHE_MAX_LOAD_BYTES", "largest _load body (streamed)")
	num(&c.MaxBatchKeys, "max-batch-keys", "WARMCACHE_MAX_BATCH_KEYS", "most keys in one _mget")
	num(&c.MaxResponseBytes, "max-response-bytes", "WARMCACHE_MAX_RESPONSE_BYTES", "largest sum of values in one _mget answer")
	num(&c.MaxLoads, "max-loads", "WARMCACHE_MAX_LOADS", "bulk loads in progress at once, REST and gRPC together")
	dur(&c.LoadIdleTimeout, "load-idle-timeout", "WARMCACHE_LOAD_IDLE_TIMEOUT", "cut off a load that sends nothing for this long")
	str(&c.SpoolDir, "spool-dir", "WARMCACHE_SPOOL_DIR", "directory where loads are spooled; empty: the system's temporary directory")
	str(&c.CursorKey, "cursor-key", "WARMCACHE_CURSOR_KEY", "secret that signs _query cursors; empty: random per process")
	dur(&c.ShutdownTimeout, "shutdown-timeout", "WARMCACHE_SHUTDOWN_TIMEOUT", "drain deadline on SIGTERM")
	str(&c.LogLevel, "log-level", "WARMCACHE_LOG_LEVEL", "debug, info, warn or error")
	str(&c.PprofAddr, "pprof", "WARMCACHE_PPROF_ADDR", "loopback address serving net/http/pprof; empty: off")
	str(&c.Freshness, "freshness", "WARMCACHE_FRESHNESS", "how writes that bypass the cache are seen: auto, capture, poll or off")
	str(&c.ReplicationDSN, "replication-dsn", "WARMCACHE_REPLICATION_DSN", "PostgreSQL connection string for change capture, straight to the server (not PgBouncer); empty: the warehouse DSN when pg-pooler is none")
	str(&c.ReplicationSlot, "replication-slot", "WARMCACHE_REPLICATION_SLOT", "replication slot of this deployment")
	dur(&c.PollInterval, "poll-interval", "WARMCACHE_POLL_INTERVAL", "time between two polls for writes that bypass the cache")
	dur(&c.PollOverlap, "poll-overlap", "WARMCACHE_POLL_OVERLAP", "how far back each poll reads again")
	str(&c.Dialect, "dialect", "WARMCACHE_DIALECT", "dialect for migrate plan: postgres or greenplum (default: detected from the DSN's server, else postgres)")
	str(&c.NamespacesFile, "namespaces", "WARMCACHE_NAMESPACES_FILE", "YAML file declaring namespaces")
	str(&c.GRPCAddr, "grpc-addr", "WARMCACHE_GRPC_ADDR", "gRPC listen address; empty: no gRPC TCP listener")
	str(&c.DaprHTTPAddr, "dapr-http-addr", "WARMCACHE_DAPR_HTTP_ADDR", "listen address of Dapr's state API over HTTP, e.g. 127.0.0.1:3500; empty: not served")
	str(&c.DaprGRPCAddr, "dapr-grpc-addr", "WARMCACHE_DAPR_GRPC_ADDR", "listen address of Dapr's state API over gRPC, e.g. 127.0.0.1:50001; empty: not served")
	str(&c.HTTPSocket, "http-socket", "WARMCACHE_HTTP_SOCKET", "unix socket path to also serve REST on")
	str(&c.GRPCSocket, "grpc-socket", "WARMCACHE_GRPC_SOCKET", "unix socket path to also serve gRPC on")
	str(&c.TLSCert, "tls-cert", "WARMCACHE_TLS_CERT", "PEM certificate for TLS on the TCP listeners")
	str(&c.TLSKey, "tls-key", "WARMCACHE_TLS_KEY", "PEM private key for TLS on the TCP listeners")
	str(&c.KeysFile, "keys-file", "WARMCACHE_KEYS_FILE", "YAML file of API keys (hashed); empty: no keys, loopback only")
	if v := getenv("WARMCACHE_REDIS_DB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("WARMCACHE_REDIS_DB: want a non-negative integer, got %q", v))
		}
		c.RedisDB = n
	}
	fs.IntVar(&c.RedisDB, "redis-db", c.RedisDB, "Redis database number (WARMCACHE_REDIS_DB)")
	if v := getenv("WARMCACHE_NEAR_CACHE_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("WARMCACHE_NEAR_CACHE_BYTES: want a non-negative integer, got %q", v))
		}
		c.NearCacheBytes = n
	}
	fs.Int64Var(&c.NearCacheBytes, "near-cache-bytes", c.NearCacheBytes, "bytes of the in-process near cache for namespaces with near_ttl; 0: off (WARMCACHE_NEAR_CACHE_BYTES)")
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	c.Args = fs.Args()
	c.MaxBodyBytes = int64(maxBody)
	c.MaxLoadBytes = int64(maxLoad)
	c.RedisAddrs = splitList(redisAddrs)
	if c.ReplicationDSN == "" && c.PGPooler == "none" {
		c.ReplicationDSN = c.PostgresDSN
	}
	if err := c.validate(); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	var err error
	if c.NamespacesFile == "" {
		c.Namespaces = DefaultNamespaces()
	} else if c.Namespaces, err = LoadNamespacesFile(c.NamespacesFile); err != nil {
		return Config{}, err
	}
	if c.KeysFile != "" {
		if c.APIKeys, err = LoadKeysFile(c.KeysFile); err != nil {
			return Config{}, err
		}
	}
	if err := c.checkOpenAccess(); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return c, nil
}

func (c *Config) validate() error {
	var errs []error
	oneOf := func(field, v string, allowed ...string) {
		for _, a := range allowed {
			if v == a {
				return
			}
		}
		errs = append(errs, fmt.Errorf("%s: must be one of %s, got %q", field, strings.Join(allowed, ", "), v))
	}
	oneOf("pg-exec-mode", c.PGExecMode, "auto", "cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol")
	oneOf("pg-pooler", c.PGPooler, "none", "pgbouncer")
	oneOf("freshness", c.Freshness, "auto", "capture", "poll", "off")
	if c.ReplicationSlot == "" || strings.IndexFunc(c.ReplicationSlot, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_')
	}) >= 0 || len(c.ReplicationSlot) > 63 {
		errs = append(errs, fmt.Errorf("replication-slot: must be 1 to 63 lowercase letters, digits or underscores, got %q", c.ReplicationSlot))
	}
	oneOf("dialect", c.Dialect, "", "postgres", "greenplum")
	oneOf("log-level", c.LogLevel, "debug", "info", "warn", "error")
	if c.NearCacheBytes < 0 {
		errs = append(errs, fmt.Errorf("near-cache-bytes: must not be negative, got %d", c.NearCacheBytes))
	}
	if c.PprofAddr != "" && !isLoopback(c.PprofAddr) {
		errs = append(errs, fmt.Errorf("pprof: must be a loopback host:port such as 127.0.0.1:6060, got %q", c.PprofAddr))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("tls-cert, tls-key: give both or neither"))
	}
	if c.PGPooler == "pgbouncer" && c.PGExecMode == "cache_statement" {
		errs = append(errs, errors.New("pg-exec-mode: cache_statement keeps named prepared statements, which PgBouncer in transaction pooling cannot; use auto, cache_describe, exec or simple_protocol"))
	}
	if len(c.RedisAddrs) == 0 {
		errs = append(errs, errors.New("redis-addrs: at least one address is needed"))
	}
	if c.PostgresDSN == "" {
		errs = append(errs, errors.New("postgres-dsn: must not be empty"))
	}
	for _, field := range []struct {
		name string
		n    int
	}{{"pg-max-conns", c.PGMaxConns}, {"max-warm-inflight", c.MaxWarmInflight}, {"max-batch-keys", c.MaxBatchKeys}, {"max-inflight", c.MaxInflight}, {"max-body-bytes", int(c.MaxBodyBytes)},
		{"max-load-bytes", int(c.MaxLoadBytes)}, {"max-response-bytes", c.MaxResponseBytes}, {"max-loads", c.MaxLoads}} {
		if field.n <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive, got %d", field.name, field.n))
		}
	}
	return errors.Join(errs...)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

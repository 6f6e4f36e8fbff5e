// Package config loads the service's configuration from flags, WARMCACHE_*
// environment variables and YAML files of namespaces and API keys. Flags
// win over the environment, and the environment over the defaults. Each
// command registers only the settings it uses (see Command), and each
// setting is registered once, with its flag, its variable and its default.
// No other package reads the environment.
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// The flags' defaults. The core's and the warehouse's defaults are their
// own constants (warmcache.DefaultHotTimeout, pgstore.DefaultMaxConns and so
// on); the flags not named here or there default to the zero value, which
// means "none" or "off". A package that applies one of these settings
// documents the same default for its zero value, and its tests hold the two
// equal.
const (
	DefaultHTTPAddr          = "127.0.0.1:8080"
	DefaultGRPCAddr          = "127.0.0.1:9090"
	DefaultPostgresDSN       = "postgres://postgres@127.0.0.1:5432/warmcache?sslmode=disable"
	DefaultNearCacheTracking = "bcast"
	DefaultShutdownTimeout   = 15 * time.Second
	DefaultLogLevel          = "info"

	// DefaultMaxInflight bounds the REST requests served at once
	// (httpapi.Options.MaxInflight).
	DefaultMaxInflight = 1024

	// DefaultDaprSocketFolder is daprd's default folder of pluggable
	// components' sockets, where the component listens unless told
	// otherwise.
	DefaultDaprSocketFolder = "/tmp/dapr-components-sockets"
	// DefaultDaprSocketName is the socket's file name without ".sock";
	// daprd registers the component's type as state.<name>:
	// state.warmcache.
	DefaultDaprSocketName = "warmcache"
	// DefaultDaprMaxValueBytes bounds a value saved through the pluggable
	// component (pluggable.Options.MaxValueBytes): 4 MiB, what daprd's
	// client for pluggable components receives, less 1 KiB for the answer's
	// ETag and metadata.
	DefaultDaprMaxValueBytes = 4<<20 - 1<<10

	// The Redis tier's (rediscache.Options).
	DefaultRedisAddr        = "127.0.0.1:6379"
	DefaultRedisPrefix      = "wc:"
	DefaultRedisDialTimeout = 200 * time.Millisecond

	// The change capture's (capture.Options).
	DefaultCaptureMode  = "auto"
	DefaultPollInterval = time.Second
	DefaultPollOverlap  = 10 * time.Second

	// DefaultConsistencySamples is the hot-tier updates in a million that
	// the consistency monitor checks: 1,000 (0.1%).
	DefaultConsistencySamples = 1000
)

// slotStem begins the name of every deployment's replication slot.
const slotStem = "warmcache"

// Config is everything the service and its subcommands need, in groups. A
// command's Config holds the defaults in the groups it does not use. Each
// field names its flag; `warmcache <command> -h` prints the defaults.
type Config struct {
	HTTP     HTTP
	GRPC     GRPC
	Dapr     Dapr
	TLS      TLS
	Access   Access
	Postgres Postgres
	Redis    Redis
	Near     Near
	Capture  Capture
	Tiers    Tiers
	Limits   Limits
	Loads    Loads
	Server   Server
	// Tracing is read by `serve` from the OTEL_* variables (see
	// TracingFromEnv); the OpenTelemetry SDK reads the rest of them.
	Tracing Tracing
	// LogLevel is debug, info, warn or error (--log-level).
	LogLevel string
	// NamespacesFile is the YAML file that declares namespaces
	// (--namespaces). Empty means the built-in widgets and widgets_archive
	// namespaces.
	NamespacesFile string
	// Namespaces are loaded from NamespacesFile, or the built-in default.
	Namespaces []*warmcache.Namespace
	// Tables are the same namespaces' tables as migrate sees them, one for
	// each namespace in the same order: whether migrate manages the table
	// and its storage options.
	Tables []schema.Table
	// Args are the arguments left after the flags.
	Args []string
}

// HTTP is the REST listener.
type HTTP struct {
	// Addr is the TCP address (--http-addr).
	Addr string
	// Socket is a unix socket path on which REST is also served, for a
	// sidecar's application (--http-socket). Empty means none.
	Socket string
	// MaxInflight bounds the requests served at once; the excess gets 503
	// with Retry-After at once instead of queueing (--max-inflight).
	MaxInflight int
}

// GRPC is the gRPC listener.
type GRPC struct {
	// Addr is the TCP address (--grpc-addr); empty means no TCP listener.
	Addr string
	// Socket is a unix socket path on which gRPC is also served
	// (--grpc-socket). Empty means none.
	Socket string
}

// Dapr is the listeners of Dapr's state API (HTTP /v1.0/state and gRPC
// dapr.proto.runtime.v1.Dapr), on ports of their own as a Dapr sidecar has
// them (3500 and 50001). An empty address means that form is not served.
type Dapr struct {
	HTTPAddr string // --dapr-http-addr
	GRPCAddr string // --dapr-grpc-addr

	// Components are the Dapr pluggable state-store components served on
	// the socket SocketFolder/SocketName.sock (--dapr-components): each
	// "component=namespace", or a namespace's name for a component of the
	// same name. The first answers the calls that name no component. Empty
	// means the pluggable component is not served.
	Components []DaprComponent
	// SocketFolder is daprd's components folder (--dapr-socket-folder).
	// Its default is $DAPR_COMPONENTS_SOCKETS_FOLDER (daprd's variable),
	// else $DAPR_COMPONENT_SOCKETS_FOLDER (which Dapr's sidecar injector
	// sets in a pluggable component's container), else
	// /tmp/dapr-components-sockets, daprd's default.
	SocketFolder string
	// SocketName names the socket file, and so the component type daprd
	// registers: state.<SocketName> (--dapr-socket-name). Empty means
	// "warmcache".
	SocketName string
	// MaxValueBytes bounds a value saved through the pluggable component
	// (--dapr-max-value-bytes). Its default, DefaultDaprMaxValueBytes
	// (4 MiB less 1 KiB), lets through every value that daprd's default body
	// bound (4 MiB) lets through and that daprd can read back.
	MaxValueBytes int64
}

// DaprComponent is one Dapr component served by the pluggable state store.
type DaprComponent struct {
	Name      string // the component's metadata.name in daprd
	Namespace string
}

// SocketPath is the pluggable component's socket.
func (d Dapr) SocketPath() string {
	return filepath.Join(d.SocketFolder, d.SocketName+".sock")
}

// TLS is the certificate of the TCP listeners (not the unix sockets).
type TLS struct {
	// Cert and Key are PEM files (--tls-cert, --tls-key); when both are set
	// the TCP listeners serve TLS. Empty means plain TCP.
	Cert string
	Key  string
}

// Access is who may call.
type Access struct {
	// KeysFile is the YAML file of API keys (--keys-file; see ParseKeys).
	// Empty means no keys: every request is let through, and only loopback
	// addresses and unix sockets may be listened on.
	KeysFile string
	// Keys are loaded from KeysFile.
	Keys []auth.Key
}

// Postgres is the warehouse.
type Postgres struct {
	// DSN reaches the warehouse, directly or through PgBouncer
	// (--postgres-dsn). Load adds application_name=warmcache
	// (ApplicationName) when neither it nor PGAPPNAME names one.
	DSN string
	// ExecMode is pgx's exec mode; auto picks one per dialect
	// (--pg-exec-mode).
	ExecMode pgstore.ExecMode
	// Pooler is what sits between the service and the warehouse
	// (--pg-pooler).
	Pooler pgstore.Pooler
	// LookupFunction says whether `serve` reads keys through a PL/pgSQL
	// function of each table on PostgreSQL, created when missing
	// (--pg-lookup-function). The other commands use one that exists and
	// create none.
	LookupFunction pgstore.FunctionMode
	// WriteFunction says whether `serve` writes on PostgreSQL through a
	// PL/pgSQL function of each writable table, one round trip per write,
	// created when missing (--pg-write-function). The other commands use
	// one that exists and create none.
	WriteFunction pgstore.FunctionMode
	// SegmentLanes says whether `serve`, on Greenplum reached directly,
	// splits its pool into lanes of segments, so that each session keeps
	// to a few segments (--gp-segment-lanes).
	SegmentLanes pgstore.LaneMode
	// MaxConns bounds the pool of `serve` (--pg-max-conns). Commands use
	// two connections.
	MaxConns int
	// Dialect names the warehouse dialect for `migrate plan`: postgres or
	// greenplum (--dialect). Empty means the dialect of the DSN's server
	// when it answers, else postgres. Everywhere else the dialect is
	// detected at connect.
	Dialect string
}

// Redis is the hot tier.
type Redis struct {
	// Addrs lists the addresses: one for a standalone server, several for a
	// Cluster, Sentinels with MasterName (--redis-addrs).
	Addrs      []string
	MasterName string // --redis-master
	Password   string // --redis-password
	DB         int    // --redis-db
	// DialTimeout bounds opening one connection (--redis-dial-timeout).
	// A dial that misses it fails the call that needed the connection,
	// which then goes on as a hot-tier failure.
	DialTimeout time.Duration
	// Prefix starts every key the service writes (--redis-prefix).
	Prefix string
}

// Near is the in-process near cache (L1).
type Near struct {
	// Bytes bounds the near cache, which serves the namespaces whose
	// near_ttl is set and is kept coherent across instances over Redis
	// pub/sub (--near-cache-bytes). Zero means no near cache.
	Bytes int64
	// Tracking is the near cache's second coherence path,
	// Redis's key tracking (--near-cache-tracking): bcast, the default,
	// has Redis report every change of a key under the near-cache
	// namespaces' prefixes, whoever made it, and the key is dropped;
	// off relies on the instances' versioned invalidations and near_ttl
	// alone. A Redis Cluster has no tracking whatever this says.
	Tracking string
}

// Capture is how the service learns of writes that bypass it: change capture
// from the replication slot, or the watermark poll.
type Capture struct {
	// Mode is auto (change capture on PostgreSQL when wal_level is
	// logical, polling otherwise), capture, poll or off (--freshness).
	Mode string
	// ReplicationDSN reaches PostgreSQL directly for change capture:
	// replication connections cannot pass PgBouncer (--replication-dsn).
	// Empty means the warehouse DSN when the pooler is none, and no change
	// capture otherwise.
	ReplicationDSN string
	// ReplicationSlot names the deployment's replication slot; the
	// instances of one deployment share it (--replication-slot). Empty
	// means DeploymentSlot's, which Load fills in.
	ReplicationSlot string
	// PollInterval is the time between two watermark polls and two reads
	// of the namespace generations (--poll-interval).
	PollInterval time.Duration
	// PollOverlap is how far back each poll reads again, for transactions
	// that commit after one with a higher version (--poll-overlap).
	PollOverlap time.Duration
}

// Tiers are the deadlines and the protection of the tiers.
type Tiers struct {
	// HotTimeout bounds one Redis call (--hot-timeout).
	HotTimeout time.Duration
	// WarmTimeout bounds one warehouse call (--warm-timeout).
	WarmTimeout time.Duration
	// MaxWarmInflight bounds concurrent warehouse reads
	// (--max-warm-inflight).
	MaxWarmInflight int
	// WarmLanes bounds the folded warehouse reads of a namespace at once
	// (--warm-lanes).
	WarmLanes int
	// HotLanes bounds the folded Redis reads of a namespace at once
	// (--hot-lanes).
	HotLanes int
	// HotLaneSpill is how long the hot lanes may go without sending a
	// pipeline, while Redis is slower than that to answer, before a read
	// that finds them busy starts one more (--hot-lane-spill); 0 never
	// adds one.
	HotLaneSpill time.Duration
	// WriteFold bounds the single writes that go to the warehouse in one
	// round trip and one commit (--write-fold).
	WriteFold int
	// WriteLanes bounds the folded writes of a namespace at once
	// (--write-lanes).
	WriteLanes int
	// WriteFoldWait is how long a write lane waits for company while
	// another lane's writes are in the warehouse (--write-fold-wait).
	WriteFoldWait time.Duration
	// SweepInterval is how often the rows past their expiry are deleted
	// (--sweep-interval).
	SweepInterval time.Duration
	// SweepBatch bounds the rows one sweep transaction deletes
	// (--sweep-batch).
	SweepBatch int
	// ConsistencySamples is how many hot-tier updates in a million the
	// consistency monitor checks later against the warehouse; zero turns
	// it off (--consistency-samples).
	ConsistencySamples int
	// BreakerThreshold is the number of consecutive warehouse failures
	// that open the circuit breaker (--breaker-threshold).
	BreakerThreshold int
	// BreakerCooldown is how long an open breaker refuses warehouse calls
	// before one probe; it doubles while probes fail, up to 30 times
	// (--breaker-cooldown).
	BreakerCooldown time.Duration
}

// Limits bound what one request may carry.
type Limits struct {
	// MaxBodyBytes bounds a request body, and so a value
	// (--max-body-bytes).
	MaxBodyBytes int64
	// MaxBatchKeys bounds the keys of one _mget (--max-batch-keys).
	MaxBatchKeys int
	// MaxResponseBytes bounds the values of one _mget answer, REST and
	// gRPC (--max-response-bytes).
	MaxResponseBytes int
}

// Loads are the bulk loads served over REST and gRPC.
type Loads struct {
	// Max bounds the loads in progress at once, REST and gRPC together
	// (--max-loads).
	Max int
	// MaxBytes bounds the streamed body of one load (--max-load-bytes).
	MaxBytes int64
	// IdleTimeout cuts off a load whose client sends nothing for this long
	// (--load-idle-timeout).
	IdleTimeout time.Duration
	// SpoolDir is where loads are spooled before they reach the warehouse
	// (--spool-dir). Empty means the system's temporary directory.
	SpoolDir string
}

// Server is the rest of what `serve` needs.
type Server struct {
	// CursorKey signs _query cursors (--cursor-key). Empty means a random
	// key per process; instances behind one load balancer need the same.
	CursorKey string
	// ShutdownTimeout bounds the drain on SIGTERM (--shutdown-timeout).
	ShutdownTimeout time.Duration
	// PprofAddr is the loopback address of a separate listener serving
	// net/http/pprof (--pprof). Empty means no profiling endpoints.
	PprofAddr string
	// GCHeapFloor is the heap goal below which the garbage collector's
	// GOGC is raised, in bytes (--gc-heap-floor; see package gctune).
	// Zero means GOGC alone decides.
	GCHeapFloor int64
}

// Command is a warmcache command. It decides which settings Load
// registers: each command accepts only the flags and reads only the
// variables it uses.
type Command string

// The commands.
const (
	ServeCommand      Command = "serve"
	MigrateCommand    Command = "migrate"      // up, down and status
	PlanCommand       Command = "migrate plan" // the DDL, without a server
	DictCommand       Command = "dict"
	DoctorCommand     Command = "doctor"
	LoadCommand       Command = "load"
	AdviseCommand     Command = "advise"
	InvalidateCommand Command = "invalidate"
)

// Commands returns every command, serve first.
func Commands() []Command {
	return []Command{ServeCommand, MigrateCommand, PlanCommand, DictCommand, DoctorCommand, LoadCommand, AdviseCommand, InvalidateCommand}
}

// groups returns the settings cmd registers, or nil for an unknown command.
func (cmd Command) groups() []func(*Config, *settings) {
	warehouse := func(c *Config, s *settings) { c.Postgres.registerConn(s) }
	switch cmd {
	case ServeCommand:
		return []func(*Config, *settings){
			func(c *Config, s *settings) { c.HTTP.register(s) },
			func(c *Config, s *settings) { c.GRPC.register(s) },
			func(c *Config, s *settings) { c.Dapr.register(s) },
			func(c *Config, s *settings) { c.TLS.register(s) },
			func(c *Config, s *settings) { c.Access.register(s) },
			warehouse,
			func(c *Config, s *settings) { c.Postgres.registerPool(s) },
			func(c *Config, s *settings) { c.Redis.register(s) },
			func(c *Config, s *settings) { c.Near.register(s) },
			func(c *Config, s *settings) { c.Capture.register(s) },
			func(c *Config, s *settings) { c.Tiers.registerTimeouts(s) },
			func(c *Config, s *settings) { c.Tiers.registerProtection(s) },
			func(c *Config, s *settings) { c.Limits.register(s) },
			func(c *Config, s *settings) { c.Loads.register(s) },
			func(c *Config, s *settings) { c.Server.register(s) },
			(*Config).registerLog,
			(*Config).registerNamespaces,
		}
	case MigrateCommand:
		return []func(*Config, *settings){
			func(c *Config, s *settings) { c.Postgres.registerDSN(s) },
			(*Config).registerLog,
			(*Config).registerNamespaces,
		}
	case DictCommand:
		return []func(*Config, *settings){warehouse, (*Config).registerLog, (*Config).registerNamespaces}
	case PlanCommand:
		return []func(*Config, *settings){
			func(c *Config, s *settings) { c.Postgres.registerDSN(s) },
			func(c *Config, s *settings) { c.Postgres.registerDialect(s) },
			(*Config).registerNamespaces,
		}
	case DoctorCommand:
		return []func(*Config, *settings){warehouse, func(c *Config, s *settings) { c.Postgres.registerPoolSize(s) },
			func(c *Config, s *settings) { c.Capture.registerConn(s) },
			func(c *Config, s *settings) { c.Redis.register(s) }, (*Config).registerNamespaces}
	case AdviseCommand:
		return []func(*Config, *settings){warehouse, (*Config).registerNamespaces}
	case LoadCommand, InvalidateCommand:
		groups := []func(*Config, *settings){
			warehouse,
			func(c *Config, s *settings) { c.Redis.register(s) },
			func(c *Config, s *settings) { c.Tiers.registerTimeouts(s) },
			(*Config).registerNamespaces,
		}
		if cmd == LoadCommand {
			groups = append(groups, func(c *Config, s *settings) { c.Limits.registerBody(s) })
		}
		return groups
	default:
		return nil
	}
}

// Defaults returns the configuration with every setting at its default, as
// if no flag and no variable were set, without namespaces.
func Defaults() Config {
	var c Config
	s := newSettings(flag.NewFlagSet("defaults", flag.ContinueOnError), func(string) string { return "" })
	for _, g := range allGroups() {
		g(&c, s)
	}
	return c
}

// allGroups registers every setting, for the defaults of the groups a
// command does not use.
func allGroups() []func(*Config, *settings) {
	groups := ServeCommand.groups()
	return append(groups,
		func(c *Config, s *settings) { c.Postgres.registerDialect(s) },
	)
}

// Load parses args (without the program and command names) and the
// environment read through getenv, for cmd. Errors name the flag, variable
// or field that is wrong. A -h or -help flag returns flag.ErrHelp after
// printing the usage to usage.
func Load(cmd Command, args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	groups := cmd.groups()
	if groups == nil {
		return Config{}, fmt.Errorf("config: unknown command %q", cmd)
	}
	c := Defaults()
	fs := flag.NewFlagSet("warmcache "+string(cmd), flag.ContinueOnError)
	fs.SetOutput(usage)
	s := newSettings(fs, getenv)
	for _, g := range groups {
		g(&c, s)
	}
	if err := errors.Join(s.errs...); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	c.Args = fs.Args()
	c.Postgres.DSN = withApplicationName(c.Postgres.DSN, getenv)
	c.Capture.ReplicationDSN = withApplicationName(c.Capture.ReplicationDSN, getenv)
	if c.Capture.ReplicationDSN == "" && c.Postgres.Pooler == pgstore.PoolerNone {
		c.Capture.ReplicationDSN = c.Postgres.DSN
	}
	if err := s.validate(); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if c.Capture.ReplicationSlot == "" {
		c.Capture.ReplicationSlot = DeploymentSlot(c)
	}
	var err error
	if c.NamespacesFile == "" {
		c.Namespaces, c.Tables = DefaultNamespaces()
	} else if c.Namespaces, c.Tables, err = LoadNamespacesFile(c.NamespacesFile); err != nil {
		return Config{}, err
	}
	if c.Access.KeysFile != "" {
		if c.Access.Keys, err = LoadKeysFile(c.Access.KeysFile); err != nil {
			return Config{}, err
		}
	}
	if cmd == ServeCommand {
		if err := c.checkOpenAccess(); err != nil {
			return Config{}, fmt.Errorf("config: %w", err)
		}
		if c.Tracing, err = TracingFromEnv(getenv); err != nil {
			return Config{}, fmt.Errorf("config: %w", err)
		}
	}
	return c, nil
}

// DeploymentSlot returns the replication slot of c's deployment when
// --replication-slot does not name one: "warmcache_" and 16 hex digits of a
// SHA-256 of what a deployment is, its database's name (of the replication
// DSN when set, else of the warehouse DSN), its Redis (addresses, sorted;
// Sentinel master; database number) and its Redis key prefix. The instances of one deployment share all
// three, and so the slot; two deployments on one PostgreSQL server differ
// in at least one (two caches of one database differ in their Redis or its
// prefix), and so never share a slot, whose changes only one of them would
// then see. Changing any of the three changes the slot: the old one must be
// dropped (docs/capture.md).
func DeploymentSlot(c Config) string {
	dsn := c.Capture.ReplicationDSN
	if dsn == "" {
		dsn = c.Postgres.DSN
	}
	database := dsn // a DSN that does not parse still names one deployment
	if pc, err := pgconn.ParseConfig(dsn); err == nil {
		database = pc.Database
	}
	addrs := slices.Clone(c.Redis.Addrs)
	slices.Sort(addrs)
	h := sha256.New()
	parts := append([]string{database, c.Redis.Prefix, c.Redis.MasterName, strconv.Itoa(c.Redis.DB)}, addrs...)
	for _, part := range parts {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return slotStem + "_" + hex.EncodeToString(h.Sum(nil))[:16]
}

func (h *HTTP) register(s *settings) {
	s.str(&h.Addr, "http-addr", "WARMCACHE_HTTP_ADDR", DefaultHTTPAddr, "REST listen address")
	s.str(&h.Socket, "http-socket", "WARMCACHE_HTTP_SOCKET", "", "unix socket path to also serve REST on")
	s.positive(&h.MaxInflight, "max-inflight", "WARMCACHE_MAX_INFLIGHT", DefaultMaxInflight, "REST requests served at once")
}

func (g *GRPC) register(s *settings) {
	s.str(&g.Addr, "grpc-addr", "WARMCACHE_GRPC_ADDR", DefaultGRPCAddr, "gRPC listen address; empty: no gRPC TCP listener")
	s.str(&g.Socket, "grpc-socket", "WARMCACHE_GRPC_SOCKET", "", "unix socket path to also serve gRPC on")
}

func (d *Dapr) register(s *settings) {
	s.str(&d.HTTPAddr, "dapr-http-addr", "WARMCACHE_DAPR_HTTP_ADDR", "", "listen address of Dapr's state API over HTTP, e.g. 127.0.0.1:3500; empty: not served")
	s.str(&d.GRPCAddr, "dapr-grpc-addr", "WARMCACHE_DAPR_GRPC_ADDR", "", "listen address of Dapr's state API over gRPC, e.g. 127.0.0.1:50001; empty: not served")
	var components []string
	s.list(&components, "dapr-components", "WARMCACHE_DAPR_COMPONENTS", nil,
		"Dapr pluggable state-store components to serve, each component=namespace or a namespace name; the first is the default; empty: not served")
	// daprd reads DAPR_COMPONENTS_SOCKETS_FOLDER; on Kubernetes, Dapr's
	// sidecar injector gives a pluggable component's container
	// DAPR_COMPONENT_SOCKETS_FOLDER, the shared volume's mount path.
	folder := DefaultDaprSocketFolder
	for _, env := range []string{"DAPR_COMPONENT_SOCKETS_FOLDER", "DAPR_COMPONENTS_SOCKETS_FOLDER"} {
		if v := s.env(env); v != "" {
			folder = v
		}
	}
	s.str(&d.SocketFolder, "dapr-socket-folder", "WARMCACHE_DAPR_SOCKET_FOLDER", folder,
		"daprd's components socket folder, where the pluggable component listens; default $DAPR_COMPONENTS_SOCKETS_FOLDER, else $DAPR_COMPONENT_SOCKETS_FOLDER (set by Dapr's injector), else "+DefaultDaprSocketFolder)
	s.str(&d.SocketName, "dapr-socket-name", "WARMCACHE_DAPR_SOCKET_NAME", DefaultDaprSocketName,
		"the pluggable component's socket file name, without .sock; daprd registers it as the component type state.<name>")
	s.positive64(&d.MaxValueBytes, "dapr-max-value-bytes", "WARMCACHE_DAPR_MAX_VALUE_BYTES", DefaultDaprMaxValueBytes,
		"largest value saved through the pluggable component; raise it with daprd's --max-body-size")
	s.check(func() error {
		d.Components = nil
		seen := map[string]bool{}
		for _, c := range components {
			name, namespace, ok := strings.Cut(c, "=")
			if !ok {
				namespace = name
			}
			if name == "" || namespace == "" {
				return fmt.Errorf("WARMCACHE_DAPR_COMPONENTS: %q: want component=namespace or a namespace name", c)
			}
			if seen[name] {
				return fmt.Errorf("WARMCACHE_DAPR_COMPONENTS: component %q is named twice", name)
			}
			seen[name] = true
			d.Components = append(d.Components, DaprComponent{Name: name, Namespace: namespace})
		}
		if len(d.Components) > 0 && (d.SocketName == "" || strings.ContainsRune(d.SocketName, '/')) {
			return fmt.Errorf("WARMCACHE_DAPR_SOCKET_NAME: %q is not a file name", d.SocketName)
		}
		return nil
	})
}

func (t *TLS) register(s *settings) {
	s.str(&t.Cert, "tls-cert", "WARMCACHE_TLS_CERT", "", "PEM certificate for TLS on the TCP listeners")
	s.str(&t.Key, "tls-key", "WARMCACHE_TLS_KEY", "", "PEM private key for TLS on the TCP listeners")
	s.check(func() error {
		if (t.Cert == "") != (t.Key == "") {
			return errors.New("tls-cert, tls-key: give both or neither")
		}
		return nil
	})
}

func (a *Access) register(s *settings) {
	s.str(&a.KeysFile, "keys-file", "WARMCACHE_KEYS_FILE", "", "YAML file of API keys (hashed); empty: no keys, loopback only")
}

// registerConn registers how the warehouse is reached.
func (p *Postgres) registerConn(s *settings) {
	p.registerDSN(s)
	s.enum(enumOf(&p.ExecMode, pgstore.ParseExecMode), "pg-exec-mode", "WARMCACHE_PG_EXEC_MODE", string(pgstore.DefaultExecMode),
		"pgx exec `mode`: "+strings.Join(names(pgstore.AllExecModes()), ", "))
	s.enum(enumOf(&p.Pooler, pgstore.ParsePooler), "pg-pooler", "WARMCACHE_PG_POOLER", string(pgstore.DefaultPooler),
		"`pooler` between the service and the warehouse: "+strings.Join(names(pgstore.AllPoolers()), " or "))
	s.check(func() error {
		if err := p.ExecMode.Through(p.Pooler); err != nil {
			return fmt.Errorf("pg-exec-mode: %w", err)
		}
		return nil
	})
}

func (p *Postgres) registerDSN(s *settings) {
	s.str(&p.DSN, "postgres-dsn", "WARMCACHE_POSTGRES_DSN", DefaultPostgresDSN, "warehouse connection string")
	s.check(func() error {
		if p.DSN == "" {
			return errors.New("postgres-dsn: must not be empty")
		}
		return nil
	})
}

func (p *Postgres) registerPool(s *settings) {
	p.registerPoolSize(s)
	s.enum(enumOf(&p.LookupFunction, pgstore.ParseFunctionMode), "pg-lookup-function", "WARMCACHE_PG_LOOKUP_FUNCTION", string(pgstore.DefaultLookupFunction),
		"read keys on PostgreSQL through a PL/pgSQL function of each table, whose plan each session keeps: auto (create it when missing), use (one that exists) or off")
	s.enum(enumOf(&p.WriteFunction, pgstore.ParseFunctionMode), "pg-write-function", "WARMCACHE_PG_WRITE_FUNCTION", string(pgstore.DefaultWriteFunction),
		"write on PostgreSQL through a PL/pgSQL function of each writable table that locks, versions and writes in one round trip: auto (create it when missing), use (one that exists) or off")
	s.enum(enumOf(&p.SegmentLanes, pgstore.ParseLaneMode), "gp-segment-lanes", "WARMCACHE_GP_SEGMENT_LANES", string(pgstore.DefaultSegmentLanes),
		"on Greenplum reached directly, split the pool into lanes of segments and send each key's statements through its segment's lane: auto or off")
}

// registerPoolSize registers --pg-max-conns: serve's pool, which the
// doctor's connection budget counts too.
func (p *Postgres) registerPoolSize(s *settings) {
	s.positive(&p.MaxConns, "pg-max-conns", "WARMCACHE_PG_MAX_CONNS", pgstore.DefaultMaxConns, "warehouse pool size")
}

func (p *Postgres) registerDialect(s *settings) {
	s.str(&p.Dialect, "dialect", "WARMCACHE_DIALECT", "", "dialect for migrate plan: postgres or greenplum (default: detected from the DSN's server, else postgres)")
	s.check(func() error { return oneOf("dialect", p.Dialect, "", "postgres", "greenplum") })
}

func (r *Redis) register(s *settings) {
	s.list(&r.Addrs, "redis-addrs", "WARMCACHE_REDIS_ADDRS", []string{DefaultRedisAddr}, "comma-separated Redis `addresses` (several for a Cluster)")
	s.str(&r.MasterName, "redis-master", "WARMCACHE_REDIS_MASTER", "", "Sentinel master name")
	s.str(&r.Password, "redis-password", "WARMCACHE_REDIS_PASSWORD", "", "Redis password")
	s.nonNegative(&r.DB, "redis-db", "WARMCACHE_REDIS_DB", 0, "Redis database number")
	s.str(&r.Prefix, "redis-prefix", "WARMCACHE_REDIS_PREFIX", DefaultRedisPrefix, "prefix of every Redis key")
	s.duration(&r.DialTimeout, "redis-dial-timeout", "WARMCACHE_REDIS_DIAL_TIMEOUT", DefaultRedisDialTimeout, "deadline of opening one Redis connection")
	s.check(func() error {
		if len(r.Addrs) == 0 {
			return errors.New("redis-addrs: at least one address is needed")
		}
		return nil
	})
}

func (n *Near) register(s *settings) {
	s.nonNegative64(&n.Bytes, "near-cache-bytes", "WARMCACHE_NEAR_CACHE_BYTES", 0, "bytes of the in-process near cache for namespaces with near_ttl; 0: off")
	s.str(&n.Tracking, "near-cache-tracking", "WARMCACHE_NEAR_CACHE_TRACKING", DefaultNearCacheTracking, "Redis key tracking that drops near-cache entries changed by any client: bcast or off")
	s.check(func() error { return oneOf("near-cache-tracking", n.Tracking, "bcast", "off") })
}

// registerConn registers whether and where change capture connects,
// which the doctor's connection budget counts too.
func (f *Capture) registerConn(s *settings) {
	s.str(&f.Mode, "freshness", "WARMCACHE_FRESHNESS", DefaultCaptureMode, "how writes that bypass the cache are seen: auto, capture, poll or off")
	s.str(&f.ReplicationDSN, "replication-dsn", "WARMCACHE_REPLICATION_DSN", "", "PostgreSQL connection string for change capture, straight to the server (not PgBouncer); empty: the warehouse DSN when pg-pooler is none")
}

func (f *Capture) register(s *settings) {
	f.registerConn(s)
	s.str(&f.ReplicationSlot, "replication-slot", "WARMCACHE_REPLICATION_SLOT", "",
		"replication slot of this deployment, shared by its instances; default warmcache_ and a hash of the database's name, the Redis addresses and the Redis prefix")
	s.duration(&f.PollInterval, "poll-interval", "WARMCACHE_POLL_INTERVAL", DefaultPollInterval, "time between two polls for writes that bypass the cache")
	s.duration(&f.PollOverlap, "poll-overlap", "WARMCACHE_POLL_OVERLAP", DefaultPollOverlap, "how far back each poll reads again")
	s.check(func() error {
		if err := oneOf("freshness", f.Mode, "auto", "capture", "poll", "off"); err != nil {
			return err
		}
		if f.ReplicationSlot == "" {
			return nil // DeploymentSlot's
		}
		if strings.IndexFunc(f.ReplicationSlot, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_')
		}) >= 0 || len(f.ReplicationSlot) > 63 {
			return fmt.Errorf("replication-slot: must be 1 to 63 lowercase letters, digits or underscores, got %q", f.ReplicationSlot)
		}
		return nil
	})
}

// registerTimeouts registers the tiers' deadlines.
func (t *Tiers) registerTimeouts(s *settings) {
	s.duration(&t.HotTimeout, "hot-timeout", "WARMCACHE_HOT_TIMEOUT", warmcache.DefaultHotTimeout, "deadline of one Redis call")
	s.duration(&t.WarmTimeout, "warm-timeout", "WARMCACHE_WARM_TIMEOUT", warmcache.DefaultWarmTimeout, "deadline of one warehouse call")
}

// registerProtection registers what guards the warehouse of a server.
func (t *Tiers) registerProtection(s *settings) {
	s.positive(&t.MaxWarmInflight, "max-warm-inflight", "WARMCACHE_MAX_WARM_INFLIGHT", warmcache.DefaultMaxWarmInflight, "concurrent warehouse reads")
	s.positive(&t.WarmLanes, "warm-lanes", "WARMCACHE_WARM_LANES", warmcache.DefaultWarmLanes, "folded warehouse reads of a namespace at once; misses that arrive meanwhile go together in the next query")
	s.positive(&t.HotLanes, "hot-lanes", "WARMCACHE_HOT_LANES", warmcache.DefaultHotLanes, "folded Redis reads of a namespace at once; reads that arrive meanwhile go together in the next pipeline")
	s.nonNegativeDuration(&t.HotLaneSpill, "hot-lane-spill", "WARMCACHE_HOT_LANE_SPILL", warmcache.DefaultHotLaneSpill, "how long the Redis read lanes of a namespace may go without sending a pipeline, while even Redis's shortest recent pipeline takes longer, before a read that finds them busy opens one more (up to 4 × --hot-lanes), so that a Redis a network hop away is waited for once; 0 never opens more")
	s.positive(&t.WriteFold, "write-fold", "WARMCACHE_WRITE_FOLD", warmcache.DefaultWriteFold, "most single writes of distinct keys that go to PostgreSQL together, in one round trip and one commit; 1 sends every write alone")
	s.positive(&t.WriteLanes, "write-lanes", "WARMCACHE_WRITE_LANES", warmcache.DefaultWriteLanes, "folded writes of a namespace at once; writes that arrive meanwhile go together in the next transaction")
	s.nonNegativeDuration(&t.WriteFoldWait, "write-fold-wait", "WARMCACHE_WRITE_FOLD_WAIT", warmcache.DefaultWriteFoldWait, "how long a write lane waits for company while another lane's writes are in the warehouse; 0 never waits")
	s.duration(&t.SweepInterval, "sweep-interval", "WARMCACHE_SWEEP_INTERVAL", warmcache.DefaultSweepInterval, "how often rows past their expiry (a TTL) are deleted")
	s.positive(&t.SweepBatch, "sweep-batch", "WARMCACHE_SWEEP_BATCH", warmcache.DefaultSweepBatch, "most expired rows one sweep transaction deletes")
	s.nonNegative(&t.ConsistencySamples, "consistency-samples", "WARMCACHE_CONSISTENCY_SAMPLES", DefaultConsistencySamples, "hot-tier updates in a million that the consistency monitor checks against the warehouse 1s, 10s and 60s later; 0 turns it off")
	s.positive(&t.BreakerThreshold, "breaker-threshold", "WARMCACHE_BREAKER_THRESHOLD", warmcache.DefaultBreakerThreshold, "consecutive warehouse failures that open the circuit breaker")
	s.duration(&t.BreakerCooldown, "breaker-cooldown", "WARMCACHE_BREAKER_COOLDOWN", warmcache.DefaultBreakerCooldown, "first wait of an open circuit breaker")
}

func (l *Limits) register(s *settings) {
	l.registerBody(s)
	s.positive(&l.MaxBatchKeys, "max-batch-keys", "WARMCACHE_MAX_BATCH_KEYS", warmcache.DefaultMaxBatchKeys, "most keys in one _mget")
	s.positive(&l.MaxResponseBytes, "max-response-bytes", "WARMCACHE_MAX_RESPONSE_BYTES", warmcache.DefaultMaxResponseBytes, "largest sum of values in one _mget answer")
}

// registerBody registers the bound of a request body, which is also the
// bound of a value.
func (l *Limits) registerBody(s *settings) {
	s.positive64(&l.MaxBodyBytes, "max-body-bytes", "WARMCACHE_MAX_BODY_BYTES", warmcache.DefaultMaxValueBytes, "largest request body")
}

func (l *Loads) register(s *settings) {
	s.positive64(&l.MaxBytes, "max-load-bytes", "WARMCACHE_MAX_LOAD_BYTES", warmcache.DefaultMaxLoadBytes, "largest _load body (streamed)")
	s.positive(&l.Max, "max-loads", "WARMCACHE_MAX_LOADS", warmcache.DefaultMaxLoads, "bulk loads in progress at once, REST and gRPC together")
	s.duration(&l.IdleTimeout, "load-idle-timeout", "WARMCACHE_LOAD_IDLE_TIMEOUT", warmcache.DefaultLoadIdleTimeout, "cut off a load that sends nothing for this long")
	s.str(&l.SpoolDir, "spool-dir", "WARMCACHE_SPOOL_DIR", "", "directory where loads are spooled; empty: the system's temporary directory")
}

func (v *Server) register(s *settings) {
	s.str(&v.CursorKey, "cursor-key", "WARMCACHE_CURSOR_KEY", "", "secret that signs _query cursors; empty: random per process")
	s.duration(&v.ShutdownTimeout, "shutdown-timeout", "WARMCACHE_SHUTDOWN_TIMEOUT", DefaultShutdownTimeout, "drain deadline on SIGTERM")
	s.str(&v.PprofAddr, "pprof", "WARMCACHE_PPROF_ADDR", "", "loopback address serving net/http/pprof; empty: off")
	s.nonNegative64(&v.GCHeapFloor, "gc-heap-floor", "WARMCACHE_GC_HEAP_FLOOR", 0, "bytes of heap goal below which GOGC is raised, such as 67108864; 0: GOGC alone decides")
	s.check(func() error {
		if v.PprofAddr != "" && !isLoopback(v.PprofAddr) {
			return fmt.Errorf("pprof: must be a loopback host:port such as 127.0.0.1:6060, got %q", v.PprofAddr)
		}
		return nil
	})
}

func (c *Config) registerLog(s *settings) {
	s.str(&c.LogLevel, "log-level", "WARMCACHE_LOG_LEVEL", DefaultLogLevel, "debug, info, warn or error")
	s.check(func() error { return oneOf("log-level", c.LogLevel, "debug", "info", "warn", "error") })
}

func (c *Config) registerNamespaces(s *settings) {
	s.str(&c.NamespacesFile, "namespaces", "WARMCACHE_NAMESPACES_FILE", "", "YAML file declaring namespaces")
}

// oneOf returns an error naming field unless v is one of allowed.
func oneOf(field, v string, allowed ...string) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return fmt.Errorf("%s: must be one of %s, got %q", field, strings.Join(allowed, ", "), v)
}

func names[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

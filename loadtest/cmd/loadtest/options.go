package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/warmcache/warmcache/internal/localstack"
)

// options are the harness's flags.
type options struct {
	Bin          string        // the warmcache binary
	OutDir       string        // RESULTS.md and results/*.png
	ArtifactDir  string        // logs, profiles, pgbench logs (git-ignored)
	Database     string        // the harness's own database
	PGHost       string        // PostgreSQL host:port (direct)
	PGBouncer    string        // PgBouncer host:port
	ViaPgBouncer bool          // the service reaches the warehouse through PgBouncer
	Capture      bool          // the service follows changes by change capture, else by polling
	RedisAddr    string        // Redis host:port
	RedisPrefix  string        // the service's key prefix during the run
	Rows         int64         // widget rows
	Duration     time.Duration // each measured attack
	Warmup       time.Duration // before each saturation attack
	Workers      int           // concurrency of saturation attacks and baselines
	ZipfS        float64       // exponent of the hot key distribution
	HotSamples   int           // zipf draws in the hot key ring
	MGetBatch    int           // keys per _mget request
	StampedeN    int           // concurrent requests in the stampede
	FloorBytes   int           // the floor's body size
	HotEnv       []string      // extra service env for every scenario but l1
	NearEnv      []string      // extra service env for the l1 scenario
	Token        string        // bearer token sent with every request, if any
	Profile      bool          // take CPU and allocation profiles of each path
	GRPCConns    int           // client connections of a gRPC attack
	Before       string        // results.json of an earlier run to compare with
	BeforeLabel  string        // what that run measured, for the report
	Scenarios    map[string]bool
	// WriteWorkers are the workers of the write scenarios and the clients
	// of their pgbench references.
	WriteWorkers int
	// SingleRounds are the turns of one client's PUTs and pgbench's one
	// client of the same upsert; zero leaves them out.
	SingleRounds int
	Timeout      time.Duration // the whole run
	Command      string        // how the run was started, for the report
	Pin          bool          // servers and load generators on separate CPUs
	Loader       string        // the load generator of saturation GETs: wrk or vegeta
	PeerPrefix   string        // the peer's Redis key prefix (flushed by the harness)
	// The dapr scenario's fixed-rate GETs: their rates, the latency a
	// proxy adds each way for the run one hop away (zero: none), and the
	// near_ttl of its near-cached component.
	DaprRates   []int
	DaprHop     time.Duration
	DaprNearTTL time.Duration
}

type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

var allScenarios = []string{"floor", "peer", "hot", "l1", "miss", "mixed", "stampede", "mget", "grpc", "baselines", "writes", "dapr", "monitor"}

// parseOptions parses the flags; the servers default to those of stack.
func parseOptions(args []string, stack localstack.Config, usage io.Writer) (options, error) {
	o := options{}
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.StringVar(&o.Bin, "bin", "bin/warmcache", "warmcache binary to serve")
	fs.StringVar(&o.OutDir, "out", "loadtest", "directory of RESULTS.md and results/*.png")
	fs.StringVar(&o.ArtifactDir, "artifacts", "loadtest/out", "directory of logs, profiles and pgbench logs")
	fs.StringVar(&o.Database, "database", "warmcache_bench", "database the harness creates and fills")
	fs.StringVar(&o.PGHost, "postgres", stack.PostgresAddr(), "PostgreSQL host:port (user postgres, trust); default: the local stack's")
	fs.StringVar(&o.PGBouncer, "pgbouncer", stack.PgBouncerAddr(), "PgBouncer host:port; default: the local stack's")
	fs.BoolVar(&o.ViaPgBouncer, "via-pgbouncer", true, "the service reaches PostgreSQL through PgBouncer, as deployed")
	fs.BoolVar(&o.Capture, "capture", true, "the service follows the table's changes by change capture over a direct replication connection, as the local stack deploys it, in a slot of the harness's own (dropped at the end); false: by polling")
	fs.StringVar(&o.RedisAddr, "redis", stack.RedisAddr(), "Redis host:port; default: the local stack's")
	fs.StringVar(&o.RedisPrefix, "redis-prefix", "wcbench:", "Redis key prefix of the service under test (flushed by the harness)")
	fs.Int64Var(&o.Rows, "rows", 1_000_000, "widget rows in the table")
	fs.DurationVar(&o.Duration, "duration", 4*time.Second, "length of each measured attack")
	fs.DurationVar(&o.Warmup, "warmup", time.Second, "unmeasured attack before each saturation attack")
	fs.IntVar(&o.Workers, "workers", 32, "concurrent workers at saturation, pgbench clients and redis-benchmark clients")
	fs.Float64Var(&o.ZipfS, "zipf-s", 1.1, "Zipf exponent of the hot keys (> 1)")
	fs.IntVar(&o.HotSamples, "hot-samples", 1<<16, "Zipf draws in the hot key sequence")
	fs.IntVar(&o.WriteWorkers, "write-workers", 16, "concurrent workers of the write scenarios, and clients of the pgbench upserts they are held against")
	fs.IntVar(&o.SingleRounds, "single-rounds", 2, "rounds of the writes scenario's single client: one client's PUTs, then pgbench -c 1 of the same upsert, each for -duration; 0 leaves them out")
	fs.IntVar(&o.MGetBatch, "mget-batch", 50, "keys per _mget request")
	fs.IntVar(&o.StampedeN, "stampede", 500, "concurrent requests for one cold key")
	fs.IntVar(&o.FloorBytes, "floor-bytes", 460, "body size of the floor server")
	hotEnv := listFlag{"WARMCACHE_NEAR_CACHE_BYTES=0"}
	nearEnv := listFlag{"WARMCACHE_NEAR_CACHE_BYTES=67108864"}
	fs.Var(&hotEnv, "service-env", "NAME=VALUE added to the service's environment for every scenario but l1 (repeatable; default WARMCACHE_NEAR_CACHE_BYTES=0: no near cache)")
	fs.Var(&nearEnv, "near-env", "NAME=VALUE added to the service's environment for the l1 scenario (repeatable; default WARMCACHE_NEAR_CACHE_BYTES=67108864: a 64 MiB near cache)")
	fs.StringVar(&o.Token, "token", "", "bearer token for the service's API, if it requires one")
	fs.BoolVar(&o.Profile, "profile", true, "take CPU and allocation profiles of the service during an extra attack on each path (hot, grpc, miss, l1, put)")
	fs.IntVar(&o.GRPCConns, "grpc-conns", 4, "client connections of a gRPC attack, shared by its workers")
	fs.StringVar(&o.Before, "before", "", "results.json of an earlier run (of an earlier build) to compare with in the report")
	fs.StringVar(&o.BeforeLabel, "before-label", "", "what the -before run measured, such as the build's commit")
	scenarios := fs.String("scenarios", strings.Join(allScenarios, ","), "comma-separated scenarios to run")
	fs.DurationVar(&o.Timeout, "timeout", 20*time.Minute, "bound of the whole run")
	fs.StringVar(&o.Loader, "loader", "wrk", "load generator of the saturation attacks of plain GETs: wrk, or vegeta (in the harness); fixed-rate, PUT, _mget and gRPC attacks always use the harness's own clients")
	fs.BoolVar(&o.Pin, "pin", true, "pin the servers to CPU 0 and the load generators to the other CPUs with taskset (on two or more CPUs)")
	fs.StringVar(&o.PeerPrefix, "peer-prefix", "wcpeer:", "Redis key prefix of the peer, the hand-written cache-aside (flushed by the harness)")
	daprRates := fs.String("dapr-rates", "1000,4000", "comma-separated rates (GETs/s) of the dapr scenario's fixed-rate attacks of each store")
	fs.DurationVar(&o.DaprHop, "dapr-hop", time.Millisecond, "latency a proxy adds each way between Redis, PostgreSQL and PgBouncer and their clients in the dapr scenario's run one hop away (whole milliseconds); 0: no such run")
	fs.DurationVar(&o.DaprNearTTL, "dapr-near-ttl", 10*time.Second, "near_ttl of the dapr scenario's near-cached warmcache component: longer than the time between two reads of one key (1,000 keys at 1,000/s: a second), or the near cache expires each entry before it is read again")
	fs.StringVar(&o.Command, "command", "make bench", "the command shown in the report as the way to reproduce")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.HotEnv, o.NearEnv = dedupeEnv(hotEnv), dedupeEnv(nearEnv)
	if o.Command == "make bench" {
		o.Command += benchFlags(fs, o)
	}
	for _, r := range strings.Split(*daprRates, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil || n <= 0 {
			return options{}, fmt.Errorf("-dapr-rates: want positive whole rates, got %q", r)
		}
		o.DaprRates = append(o.DaprRates, n)
	}
	o.Scenarios = map[string]bool{}
	for _, s := range strings.Split(*scenarios, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.Scenarios[s] = true
		}
	}
	return o, o.validate()
}

// benchFlags returns the BENCHFLAGS of make bench that give the flags set
// in fs (o's environment lists as given), or "" when none was set.
func benchFlags(fs *flag.FlagSet, o options) string {
	var given []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "bin", "command":
		case "service-env", "near-env":
			env := o.HotEnv
			if f.Name == "near-env" {
				env = o.NearEnv
			}
			for _, kv := range env {
				given = append(given, "-"+f.Name+"="+kv)
			}
		default:
			v := f.Value.String()
			if strings.ContainsAny(v, " \t\"'") {
				v = strconv.Quote(v)
			}
			given = append(given, "-"+f.Name+"="+v)
		}
	})
	if len(given) == 0 {
		return ""
	}
	return " BENCHFLAGS='" + strings.Join(given, " ") + "'"
}

// dedupeEnv keeps the last value of each NAME, so that a flag given on
// the command line replaces its default.
func dedupeEnv(env []string) []string {
	last := map[string]int{}
	for i, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		last[name] = i
	}
	var out []string
	for i, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if last[name] == i && kv != name+"=" {
			out = append(out, kv)
		}
	}
	return out
}

func (o options) validate() error {
	var errs []error
	for _, a := range []struct{ name, addr string }{{"postgres", o.PGHost}, {"pgbouncer", o.PGBouncer}, {"redis", o.RedisAddr}} {
		if err := requireLoopback(a.addr); err != nil {
			errs = append(errs, fmt.Errorf("-%s: %w", a.name, err))
		}
	}
	for s := range o.Scenarios {
		if !contains(allScenarios, s) {
			errs = append(errs, fmt.Errorf("-scenarios: unknown scenario %q (known: %s)", s, strings.Join(allScenarios, ", ")))
		}
	}
	if o.Loader != "wrk" && o.Loader != "vegeta" {
		errs = append(errs, fmt.Errorf("-loader: want wrk or vegeta, got %q", o.Loader))
	}
	if o.Rows <= 0 || o.Workers <= 0 || o.HotSamples <= 0 || o.MGetBatch <= 0 || o.StampedeN <= 0 || o.GRPCConns <= 0 || o.FloorBytes < 40 {
		errs = append(errs, errors.New("-rows, -workers, -hot-samples, -mget-batch, -stampede and -grpc-conns must be positive, -floor-bytes at least 40"))
	}
	if o.Duration < time.Second || o.Duration > time.Minute {
		errs = append(errs, fmt.Errorf("-duration: want 1s to 1m, got %s", o.Duration))
	}
	if o.SingleRounds < 0 {
		errs = append(errs, fmt.Errorf("-single-rounds: want 0 or more, got %d", o.SingleRounds))
	}
	if !(o.ZipfS > 1) {
		errs = append(errs, fmt.Errorf("-zipf-s: want > 1, got %g", o.ZipfS))
	}
	if o.RedisPrefix == "" {
		errs = append(errs, errors.New("-redis-prefix: must not be empty (the harness flushes it)"))
	}
	return errors.Join(errs...)
}

// requireLoopback refuses any address whose host is not a loopback
// address: the harness attacks only this machine.
func requireLoopback(hostport string) error {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("want host:port, got %q", hostport)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not a loopback address", host)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// dsn returns a connection string for user postgres on hostport.
func dsn(hostport, database string) string {
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Host: hostport, Path: "/" + database, RawQuery: "sslmode=disable"}
	return u.String()
}

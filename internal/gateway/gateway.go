// Package gateway assembles warmcache. From a config.Config it builds the
// tiers (the warehouse over pgstore, Redis over rediscache, the near cache),
// the core (warmcache.Service), change capture, tracing and the transports (REST,
// gRPC and Dapr's state API), and it owns their start and stop.
//
// `warmcache serve`, every subcommand and the end-to-end tests build
// through this package: Open, Serve and Close for an assembly, or
// OpenWarehouse, OpenRedis, OpenMigrator and DetectDialect for a command
// that needs one tier; nothing else wires the tiers together. The
// subcommands' flows and output live in cmd/warmcache.
//
// What a Server serves is data: buildTransports fills a table of
// endpoints (endpoint.Endpoint: a transport, a network, an address, TLS),
// and Serve listens on each in one loop, prints its Line on stdout, and
// then reports them through Endpoints and Listening. The lines have one
// format, which endpoint.ParseLine reads, for whoever runs the binary.
// Adding a transport takes its package (its server over the core), a
// Transport constant with its title in internal/endpoint, an entry of the table in buildTransports (its
// address from the configuration and the function that builds its server
// for a listener) and the group of its settings in internal/config.
package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/capture"
	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/consistencymon"
	"github.com/warmcache/warmcache/internal/dapr/pluggable"
	"github.com/warmcache/warmcache/internal/dapr/stateapi"
	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/endpoint"
	"github.com/warmcache/warmcache/internal/grpcapi"
	"github.com/warmcache/warmcache/internal/httpapi"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/promreg"
	"github.com/warmcache/warmcache/internal/rediscache"
	"github.com/warmcache/warmcache/internal/tracing"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// Role says what an assembly is for.
type Role int

const (
	// Server is the long-running gateway: the full warehouse pool, the near
	// cache, the value dictionaries, change capture, tracing and the transports.
	Server Role = iota
	// Command is a one-shot command such as `warmcache load`: a pool of two
	// connections, the tiers and the core, and nothing that runs in the
	// background. Its loads stream straight into the warehouse, without a
	// bound: the source is local and trusted.
	Command
)

// commandConns is the warehouse pool of a Command.
const commandConns = 2

// startTimeout bounds connecting to the tiers and reading what the service
// needs from them at start.
const startTimeout = 30 * time.Second

// Options are what an assembly takes besides the configuration. The zero
// value builds a Server that logs nowhere.
type Options struct {
	// Role is Server (the default) or Command.
	Role Role
	// Logger receives the gateway's logs. Nil means none.
	Logger *slog.Logger
	// Registry receives every metric. Nil means a new registry; a Server
	// adds the Go and process collectors to a registry it made itself.
	Registry *prometheus.Registry
	// Stdout receives one "warmcache: serving ..." line per endpoint
	// (endpoint.Endpoint.Line), and the notice of open access. Nil means none.
	Stdout io.Writer
	// Tracer, when set, is used instead of the one that the
	// configuration's Tracing asks for, and Close leaves it running.
	Tracer *tracing.Provider

	// Hot and Warm, when set, wrap the tiers before the core is built, to
	// observe their calls or to hold them open.
	Hot  func(warmcache.Hot) warmcache.Hot
	Warm func(warmcache.Warm) warmcache.Warm
	// SkipDoctor leaves out the lookup checks that a Server runs and logs
	// at start (see doctor.Diagnose): their queries count in the
	// warehouse's statistics of the namespaces' tables.
	SkipDoctor bool
	// Redis and Core, when set, adjust the options of the Redis client and
	// of the core that the configuration does not carry, such as client
	// timeouts or batch folding, after the gateway has set its own.
	Redis func(*rediscache.Options)
	Core  func(*warmcache.Options)
}

// Gateway is one assembly: the tiers, the core, and for a Server the
// transports. Its methods are safe for concurrent use, except Serve and
// Close, which are called once each.
type Gateway struct {
	cfg  config.Config
	opts Options
	log  *slog.Logger
	reg  *prometheus.Registry

	tracer *tracing.Provider
	store  *pgstore.Store
	cache  *rediscache.Cache
	near   nearTier
	gens   *capture.Generations
	svc    *warmcache.Service
	keys   *auth.Keyring
	rest   http.Handler
	// table is what Serve listens on: an entry an endpoint, which
	// buildTransports fills.
	table []listener

	// endpoints are the endpoints Serve listens on; listening is closed
	// once it listens on all of them.
	mu        sync.Mutex
	endpoints []endpoint.Endpoint
	listening chan struct{}

	closers []func() error // run in reverse by Close
}

// Open builds the assembly that opts.Role asks for from cfg. It connects
// to the warehouse and Redis, and for a Server starts the profiling
// listener, tracing, the near cache's subscription and change capture, all of
// which run until Close. The transports are served by Serve. On error,
// whatever was started is stopped.
func Open(ctx context.Context, cfg config.Config, opts Options) (_ *Gateway, err error) {
	g := &Gateway{cfg: cfg, opts: opts, log: opts.Logger, reg: opts.Registry, listening: make(chan struct{})}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.opts.Stdout == nil {
		g.opts.Stdout = io.Discard
	}
	if g.reg == nil {
		g.reg = prometheus.NewRegistry()
		if opts.Role == Server {
			if err := registerAll(g.reg,
				collectors.NewGoCollector(),
				collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
			); err != nil {
				return nil, err
			}
		}
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, g.Close())
		}
	}()
	if opts.Role == Server {
		if err := g.startServer(ctx); err != nil {
			return nil, err
		}
		return g, nil
	}
	startCtx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := g.openTiers(startCtx, commandConns); err != nil {
		return nil, err
	}
	// Written keys must land in the namespaces' current generations.
	if g.gens, err = g.startGenerations(startCtx); err != nil {
		return nil, err
	}
	return g, g.buildCore(warmcache.Options{
		HotTimeout:    cfg.Tiers.HotTimeout,
		WarmTimeout:   cfg.Tiers.WarmTimeout,
		MaxValueBytes: int(cfg.Limits.MaxBodyBytes),
		DirectLoads:   true,
		MaxLoadBytes:  -1,
		Generations:   g.gens,
	})
}

// startServer builds everything a Server runs, in the order it needs them.
func (g *Gateway) startServer(ctx context.Context) error {
	cfg := g.cfg
	if cfg.Server.PprofAddr != "" {
		pp, err := startPprof(cfg.Server.PprofAddr, g.log)
		if err != nil {
			return err
		}
		g.onClose(func() error { pp.close(); return nil })
	}
	if err := g.startTracing(ctx); err != nil {
		return err
	}

	startCtx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := g.openTiers(startCtx, int32(cfg.Postgres.MaxConns)); err != nil {
		return err
	}
	g.log.Info("warehouse connected", "dialect", g.store.Dialect().String(), "exec_mode", g.store.ExecMode(), "pooler", cfg.Postgres.Pooler)
	if !g.opts.SkipDoctor {
		logDoctor(startCtx, cfg, g.store, g.log)
	}
	var err error
	if g.near, err = startNear(cfg, g.cache, g.reg, g.log); err != nil {
		return err
	}
	g.onClose(func() error { g.near.stop(); return nil })
	loadDictionaries(startCtx, g.store, g.cache, cfg.Namespaces, g.log)
	if g.gens, err = g.startGenerations(startCtx); err != nil {
		return err
	}
	o := g.serverCoreOptions()
	var mon *consistencymon.Monitor
	if cfg.Tiers.ConsistencySamples > 0 {
		if mon, err = consistencymon.New(consistencymon.Options{Rate: float64(cfg.Tiers.ConsistencySamples) / 1e6}, g.reg, g.log); err != nil {
			return err
		}
		o.Sampler = mon
	}
	if err := g.buildCore(o); err != nil {
		return err
	}
	if mon != nil {
		g.startMonitor(ctx, mon)
	}
	if err := g.startCapture(ctx); err != nil {
		return err
	}
	return g.buildTransports()
}

// hotLaneSpill is the core's HotLaneSpill of --hot-lane-spill, whose 0
// turns spilling off (the core's zero means its default).
func hotLaneSpill(cfg config.Config) time.Duration {
	if cfg.Tiers.HotLaneSpill <= 0 {
		return -1
	}
	return cfg.Tiers.HotLaneSpill
}

// serverCoreOptions returns the core's options of a Server.
func (g *Gateway) serverCoreOptions() warmcache.Options {
	cfg := g.cfg
	return warmcache.Options{
		HotTimeout:       cfg.Tiers.HotTimeout,
		WarmTimeout:      cfg.Tiers.WarmTimeout,
		MaxWarmInflight:  cfg.Tiers.MaxWarmInflight,
		WarmLanes:        cfg.Tiers.WarmLanes,
		HotLanes:         cfg.Tiers.HotLanes,
		HotLaneSpill:     hotLaneSpill(cfg),
		WriteFold:        cfg.Tiers.WriteFold,
		WriteLanes:       cfg.Tiers.WriteLanes,
		WriteFoldWait:    cfg.Tiers.WriteFoldWait,
		SweepInterval:    cfg.Tiers.SweepInterval,
		SweepBatch:       cfg.Tiers.SweepBatch,
		BreakerThreshold: cfg.Tiers.BreakerThreshold,
		BreakerCooldown:  cfg.Tiers.BreakerCooldown,
		MaxBatchKeys:     cfg.Limits.MaxBatchKeys,
		MaxValueBytes:    maxValueBytes(cfg),
		MaxResponseBytes: cfg.Limits.MaxResponseBytes,
		MaxLoads:         cfg.Loads.Max,
		MaxLoadBytes:     cfg.Loads.MaxBytes,
		SpoolDir:         cfg.Loads.SpoolDir,
		CursorKey:        []byte(cfg.Server.CursorKey),
		Near:             g.near.near,
		Invalidations:    g.near.invalidations,
		Generations:      g.gens,
		Tracer:           g.tracer.Core(),
	}
}

// startCapture starts the change capture or polling of the managed
// namespaces, which runs until Close.
func (g *Gateway) startCapture(ctx context.Context) error {
	managed, others := managedNamespaces(g.cfg)
	if len(others) > 0 && g.cfg.Capture.Mode != capture.Off {
		g.log.Info("capture: namespaces not managed by migrate are not captured or polled (they have no version index); their entries live their TTL",
			slog.Any("namespaces", others))
	}
	runner, err := capture.Start(ctx, captureOptions(g.cfg, g.store), managed, g.store, g.svc, g.gens, g.reg, g.log)
	if err != nil {
		return err
	}
	g.onClose(func() error { runner.Stop(); return nil })
	g.startSweeper(ctx)
	return nil
}

// startSweeper runs the service's sweeper of expired rows until the
// gateway closes.
func (g *Gateway) startSweeper(ctx context.Context) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); g.svc.RunSweeper(sctx) }()
	g.onClose(func() error { cancel(); <-done; return nil })
}

// startMonitor runs the consistency monitor's checks until the gateway
// closes.
func (g *Gateway) startMonitor(ctx context.Context, mon *consistencymon.Monitor) {
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); mon.Run(mctx, g.svc) }()
	g.onClose(func() error { cancel(); <-done; return nil })
}

// startTracing starts the tracer of a Server, unless one was given.
func (g *Gateway) startTracing(ctx context.Context) error {
	if g.opts.Tracer != nil {
		g.tracer = g.opts.Tracer
		return nil
	}
	tcfg := g.cfg.Tracing
	tp, err := tracing.Start(ctx, tcfg.Protocol, buildVersion())
	if err != nil {
		return err
	}
	g.tracer = tp
	g.onClose(func() error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			g.log.Warn("traces not flushed", "err", err)
		}
		return nil
	})
	g.log.Info("tracing", "enabled", tcfg.Enabled, "protocol", tcfg.Protocol, "reason", tcfg.Reason)
	return nil
}

// openTiers connects to the warehouse, with a pool of maxConns, and builds
// the Redis client.
func (g *Gateway) openTiers(ctx context.Context, maxConns int32) error {
	storeOpts := StoreOptions(g.cfg)
	storeOpts.MaxConns = maxConns
	storeOpts.Tracer = g.tracer.PGTracer()
	store, err := pgstore.Open(ctx, storeOpts, g.cfg.Namespaces, g.reg, g.log)
	if err != nil {
		return err
	}
	g.store = store
	g.onClose(func() error { store.Close(); return nil })

	cache, err := newCache(g.cfg, func(o *rediscache.Options) {
		o.Instrument = g.tracer.RedisInstrument()
		if g.opts.Redis != nil {
			g.opts.Redis(o)
		}
	}, g.reg, g.log)
	if err != nil {
		return err
	}
	g.cache = cache
	g.onClose(cache.Close)
	return nil
}

// buildCore builds the core over the tiers, wrapped as the options ask.
func (g *Gateway) buildCore(o warmcache.Options) error {
	var hot warmcache.Hot = g.cache
	var warm warmcache.Warm = g.store
	if g.opts.Hot != nil {
		hot = g.opts.Hot(hot)
	}
	if g.opts.Warm != nil {
		warm = g.opts.Warm(warm)
	}
	if g.opts.Core != nil {
		g.opts.Core(&o)
	}
	svc, err := warmcache.NewService(hot, warm, g.cfg.Namespaces, g.reg, g.log, o)
	if err != nil {
		return err
	}
	g.svc = svc
	return nil
}

// buildTransports builds the REST handler, the gRPC API, Dapr's state API
// and the pluggable state store over the core, and fills the table of
// their endpoints, in the order Serve listens on them.
func (g *Gateway) buildTransports() error {
	cfg := g.cfg
	keys, err := auth.NewKeyring(cfg.Access.Keys, auth.Options{})
	if err != nil {
		return err
	}
	g.keys = keys
	rest, err := httpapi.NewHandler(g.svc, promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{Registry: g.reg}), g.reg, g.log,
		httpapi.Options{MaxBodyBytes: cfg.Limits.MaxBodyBytes, MaxLoadBytes: cfg.Loads.MaxBytes, LoadIdleTimeout: cfg.Loads.IdleTimeout,
			MaxInflight: cfg.HTTP.MaxInflight, Keys: keys})
	if err != nil {
		return err
	}
	g.rest = g.tracer.HTTP(rest, "warmcache")
	api, err := grpcapi.New(g.svc, keys, g.reg, g.log, grpcapi.Options{
		MaxMessageBytes: int(cfg.Limits.MaxBodyBytes) + 64<<10,
		// An MGet answer carries its values and, per key, the key and a
		// few fields.
		MaxSendBytes:    cfg.Limits.MaxResponseBytes + cfg.Limits.MaxBatchKeys*(512+64),
		MaxLoadBytes:    cfg.Loads.MaxBytes,
		LoadIdleTimeout: cfg.Loads.IdleTimeout,
	})
	if err != nil {
		return err
	}
	daprGRPC := stateapi.NewGRPC(g.svc, keys, g.log)
	daprHTTP := g.tracer.HTTP(stateapi.NewHTTP(g.svc, g.log, stateapi.HTTPOptions{MaxBodyBytes: cfg.Limits.MaxBodyBytes, Keys: keys}), "dapr")
	// Up to daprd's own 4 MiB, so that a value over the bound reaches the
	// core, which refuses it with the bound, rather than gRPC's raw size
	// error.
	daprRecv := grpc.MaxRecvMsgSize(max(int(cfg.Limits.MaxBodyBytes), pluggable.DaprdMaxBodyBytes) + 64<<10)
	grpcOpts := g.tracer.GRPCServerOptions()
	tlsOn := cfg.TLS.Cert != ""

	restServer := func(tlsConf *tls.Config) server { return newHTTPServer(g.rest, tlsConf, g.log) }
	grpcServe := func(tlsConf *tls.Config) server { return grpcServer{api.NewServer(grpcOptions(grpcOpts, tlsConf)...)} }
	// REST on TCP is always served: /healthz, /readyz and /metrics are
	// there.
	g.table = append(g.table, listener{Endpoint: endpoint.Endpoint{Transport: endpoint.REST, Network: "tcp", Addr: cfg.HTTP.Addr, TLS: tlsOn}, server: restServer})
	g.add(endpoint.Endpoint{Transport: endpoint.REST, Network: "unix", Addr: cfg.HTTP.Socket}, restServer)
	g.add(endpoint.Endpoint{Transport: endpoint.GRPC, Network: "tcp", Addr: cfg.GRPC.Addr, TLS: tlsOn}, grpcServe)
	g.add(endpoint.Endpoint{Transport: endpoint.GRPC, Network: "unix", Addr: cfg.GRPC.Socket}, grpcServe)
	g.add(endpoint.Endpoint{Transport: endpoint.DaprHTTP, Network: "tcp", Addr: cfg.Dapr.HTTPAddr, TLS: tlsOn},
		func(tlsConf *tls.Config) server { return newHTTPServer(daprHTTP, tlsConf, g.log) })
	g.add(endpoint.Endpoint{Transport: endpoint.DaprGRPC, Network: "tcp", Addr: cfg.Dapr.GRPCAddr, TLS: tlsOn},
		func(tlsConf *tls.Config) server {
			return grpcServer{daprGRPC.NewServer(append([]grpc.ServerOption{daprRecv}, grpcOptions(grpcOpts, tlsConf)...)...)}
		})
	return g.addPluggable(grpcOpts)
}

// add adds an endpoint to the table, served by newServer; none when the
// configuration gives it no address.
func (g *Gateway) add(e endpoint.Endpoint, newServer func(*tls.Config) server) {
	if e.Addr != "" {
		g.table = append(g.table, listener{Endpoint: e, server: newServer})
	}
}

// Serve serves the transports of a Server on every endpoint of the table
// until ctx is done or a listener fails; then it stops intake and drains
// in-flight requests for up to the shutdown timeout. It returns only after
// every server has returned. The tiers stay open until Close.
func (g *Gateway) Serve(ctx context.Context) error {
	if g.rest == nil {
		return errors.New("gateway: only a Server serves")
	}
	tlsConf, err := loadTLS(g.cfg)
	if err != nil {
		return err
	}
	lns, err := startListeners(g.table, tlsConf, g.log, g.opts.Stdout)
	if err != nil {
		return err
	}
	names := make([]string, len(g.cfg.Namespaces))
	for i, ns := range g.cfg.Namespaces {
		names[i] = ns.Name
	}
	g.log.Info("serving namespaces", "namespaces", names)
	if g.keys.Open() {
		g.log.Warn("no API keys configured: every request is served unauthenticated, on loopback and unix sockets only")
		fmt.Fprintln(g.opts.Stdout, "warmcache: no API keys configured: serving unauthenticated, on loopback and unix sockets only")
	} else {
		g.log.Info("access control on", "api_keys", len(g.cfg.Access.Keys))
	}
	g.mu.Lock()
	g.endpoints = lns.endpoints
	g.mu.Unlock()
	close(g.listening)

	served := lns.wait(ctx)
	if served == nil {
		g.log.Info("shutting down: draining requests", "timeout", g.cfg.Server.ShutdownTimeout)
	}
	drainCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.Server.ShutdownTimeout)
	defer cancel()
	if err := errors.Join(served, lns.shutdown(drainCtx)); err != nil {
		return err
	}
	g.log.Info("stopped")
	return nil
}

// Endpoints returns the endpoints Serve listens on, in the order it
// listened on them and printed them, with the ports the system chose; nil
// until Serve listens on all of them (see Listening).
func (g *Gateway) Endpoints() []endpoint.Endpoint {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.endpoints)
}

// Listening returns a channel that is closed once Serve listens on every
// endpoint and has printed them, and the notice of open access, on
// Options.Stdout. It is never closed when Serve fails to listen.
func (g *Gateway) Listening() <-chan struct{} { return g.listening }

// Close stops what Open started, in the reverse order, and closes the
// tiers' clients. It returns the errors of closing them.
func (g *Gateway) Close() error {
	var errs []error
	for i := len(g.closers) - 1; i >= 0; i-- {
		errs = append(errs, g.closers[i]())
	}
	g.closers = nil
	return errors.Join(errs...)
}

func (g *Gateway) onClose(fn func() error) { g.closers = append(g.closers, fn) }

// Config returns the configuration the gateway was built from.
func (g *Gateway) Config() config.Config { return g.cfg }

// Registry returns the registry that holds the gateway's metrics.
func (g *Gateway) Registry() *prometheus.Registry { return g.reg }

// Service returns the core.
func (g *Gateway) Service() *warmcache.Service { return g.svc }

// Store returns the warehouse tier.
func (g *Gateway) Store() *pgstore.Store { return g.store }

// Cache returns the Redis tier.
func (g *Gateway) Cache() *rediscache.Cache { return g.cache }

// Handler returns the REST API of a Server, traced when tracing is on;
// nil for a Command.
func (g *Gateway) Handler() http.Handler { return g.rest }

// managedNamespaces returns the namespaces of cfg whose tables migrate
// manages, and the names of the others.
func managedNamespaces(cfg config.Config) (managed []*warmcache.Namespace, others []string) {
	isManaged := map[string]bool{}
	for _, t := range cfg.Tables {
		isManaged[t.Namespace.Name] = t.Managed
	}
	for _, ns := range cfg.Namespaces {
		if isManaged[ns.Name] {
			managed = append(managed, ns)
		} else {
			others = append(others, ns.Name)
		}
	}
	return managed, others
}

// startGenerations returns the namespace generations of the warehouse,
// read once, which move the hot tier's keys and drop the near cache. A
// failed first read is logged: the generations are read again every poll
// interval.
func (g *Gateway) startGenerations(ctx context.Context) (*capture.Generations, error) {
	var dropNear func(string)
	if c, ok := g.near.near.(interface{ Clear() }); ok {
		dropNear = func(string) { c.Clear() }
	}
	gens, err := capture.NewGenerations(g.store, g.cfg.Namespaces, g.cache.SetGeneration, dropNear, g.reg, g.log)
	if err != nil {
		return nil, err
	}
	if err := gens.Sync(ctx); err != nil {
		g.log.Warn("namespace generations not read; retrying every poll interval", slog.Any("err", err))
	}
	return gens, nil
}

// captureOptions returns the change capture options of cfg for the store's
// dialect.
func captureOptions(cfg config.Config, store *pgstore.Store) capture.Options {
	return capture.Options{
		Mode:           cfg.Capture.Mode,
		PostgreSQL:     store.Dialect() == dialect.Postgres,
		ReplicationDSN: cfg.Capture.ReplicationDSN,
		Slot:           cfg.Capture.ReplicationSlot,
		PollInterval:   cfg.Capture.PollInterval,
		PollOverlap:    cfg.Capture.PollOverlap,
	}
}

// buildVersion is the main module's version as the build recorded it.
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func registerAll(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	return promreg.Register(reg, "gateway", cs...)
}

// NewLogger returns a JSON logger on w at level (debug, info, warn or
// error; config validates it).
func NewLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/daprapi"
	"github.com/warmcache/warmcache/internal/freshness"
	"github.com/warmcache/warmcache/internal/grpcapi"
	"github.com/warmcache/warmcache/internal/httpapi"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/rediscache"
	"github.com/warmcache/warmcache/internal/tracing"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// serve wires the tiers, the core and the REST transport, serves until ctx
// is cancelled, then stops intake, drains in-flight requests and closes the
// clients.
func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := config.Load("warmcache serve", args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log := newLogger(stderr, cfg.LogLevel)
	if cfg.PprofAddr != "" {
		pp, err := startPprof(cfg.PprofAddr, log)
		if err != nil {
			return err
		}
		defer pp.close()
	}

	tcfg, err := tracing.FromEnv(getenv)
	if err != nil {
		return err
	}
	tp, err := tracing.Start(ctx, tcfg, buildVersion())
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("traces not flushed", "err", err)
		}
	}()
	log.Info("tracing", "enabled", tcfg.Enabled, "protocol", tcfg.Protocol, "reason", tcfg.Reason)

	reg := prometheus.NewRegistry()
	if err := registerAll(reg,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	); err != nil {
		return err
	}

	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	storeOpts := storeOptions(cfg, int32(cfg.PGMaxConns))
	storeOpts.Tracer = tp.PGTracer()
	store, err := pgstore.Open(startCtx, storeOpts, cfg.Namespaces, reg, log)
	if err != nil {
		return err
	}
	defer store.Close()
	log.Info("warehouse connected", "dialect", store.Dialect().String(), "exec_mode", store.ExecMode(), "pooler", cfg.PGPooler)
	logDoctor(startCtx, store, log)

	redisOpts := redisOptions(cfg)
	redisOpts.Instrument = tp.RedisInstrument()
	cache, err := rediscache.New(redisOpts, reg, log)
	if err != nil {
		return err
	}
	defer cache.Close()
	near, err := startNear(cfg, cache, reg, log)
	if err != nil {
		return err
	}
	defer near.stop()
	loadDictionaries(startCtx, store, cache, cfg.Namespaces, log)

	gens, err := startGenerations(startCtx, cfg, store, cache, near, reg, log)
	if err != nil {
		return err
	}
	svc, err := warmcache.NewService(cache, store, cfg.Namespaces, reg, log, warmcache.Options{
		HotTimeout:       cfg.HotTimeout,
		WarmTimeout:      cfg.WarmTimeout,
		MaxWarmInflight:  cfg.MaxWarmInflight,
		BreakerThreshold: cfg.BreakerThreshold,
		BreakerCooldown:  cfg.BreakerCooldown,
		MaxBatchKeys:     cfg.MaxBatchKeys,
		MaxValueBytes:    int(cfg.MaxBodyBytes),
		MaxResponseBytes: cfg.MaxResponseBytes,
		MaxLoads:         cfg.MaxLoads,
		MaxLoadBytes:     cfg.MaxLoadBytes,
		SpoolDir:         cfg.SpoolDir,
		CursorKey:        []byte(cfg.CursorKey),
		Near:             near.near,
		Invalidations:    near.invalidations,
		Generations:      gens,
		Tracer:           tp.Core(),
	})
	if err != nil {
		return err
	}
	fresh, err := freshness.Start(ctx, freshnessOptions(cfg, store), cfg.Namespaces, store, svc, gens, reg, log)
	if err != nil {
		return err
	}
	defer fresh.Stop()
	keys, err := auth.NewKeyring(cfg.APIKeys, auth.Options{})
	if err != nil {
		return err
	}
	restHandler, err := httpapi.NewHandler(svc, promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}), reg, log,
		httpapi.Options{MaxBodyBytes: cfg.MaxBodyBytes, MaxLoadBytes: cfg.MaxLoadBytes, LoadIdleTimeout: cfg.LoadIdleTimeout,
			MaxInflight: cfg.MaxInflight, Keys: keys})
	if err != nil {
		return err
	}
	grpcAPI, err := grpcapi.New(svc, keys, reg, log, grpcapi.Options{
		MaxMessageBytes: int(cfg.MaxBodyBytes) + 64<<10,
		// An MGet answer carries its values and, per key, the key and a
		// few fields.
		MaxSendBytes:    cfg.MaxResponseBytes + cfg.MaxBatchKeys*(512+64),
		MaxLoadBytes:    cfg.MaxLoadBytes,
		LoadIdleTimeout: cfg.LoadIdleTimeout,
	})
	if err != nil {
		return err
	}

	daprGRPC := daprapi.NewGRPC(svc, keys, log)
	dapr := daprServers{
		http: tp.HTTP(daprapi.NewHTTP(svc, log, daprapi.HTTPOptions{MaxBodyBytes: cfg.MaxBodyBytes, Keys: keys}), "dapr"),
		grpc: func(opts ...grpc.ServerOption) *grpc.Server {
			return daprGRPC.NewServer(append([]grpc.ServerOption{grpc.MaxRecvMsgSize(int(cfg.MaxBodyBytes) + 64<<10)}, opts...)...)
		},
	}
	lns, err := startListeners(cfg, tp.HTTP(restHandler, "warmcache"), grpcAPI, dapr, tp.GRPCServerOptions(), log, stdout)
	if err != nil {
		return err
	}
	names := make([]string, len(cfg.Namespaces))
	for i, ns := range cfg.Namespaces {
		names[i] = ns.Name
	}
	log.Info("serving namespaces", "namespaces", names)
	if keys.Open() {
		log.Warn("no API keys configured: every request is served unauthenticated, on loopback and unix sockets only")
		fmt.Fprintln(stdout, "warmcache: no API keys configured: serving unauthenticated, on loopback and unix sockets only")
	} else {
		log.Info("access control on", "api_keys", len(cfg.APIKeys))
	}

	if err := lns.wait(ctx); err != nil {
		drainCtx, cancelDrain := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
		defer cancelDrain()
		return errors.Join(err, lns.shutdown(drainCtx))
	}
	log.Info("shutting down: draining requests", "timeout", cfg.ShutdownTimeout)
	drainCtx, cancelDrain := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancelDrain()
	if err := lns.shutdown(drainCtx); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// buildVersion is the main module's version as the build recorded it.
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func registerAll(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	return nil
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level)) // validated by config
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/httpapi"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/rediscache"
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

	reg := prometheus.NewRegistry()
	if err := registerAll(reg,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	); err != nil {
		return err
	}

	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	store, err := pgstore.Open(startCtx, pgstore.Options{
		DSN:      cfg.PostgresDSN,
		ExecMode: cfg.PGExecMode,
		Pooler:   cfg.PGPooler,
		MaxConns: int32(cfg.PGMaxConns),
	}, cfg.Namespaces, reg, log)
	if err != nil {
		return err
	}
	defer store.Close()
	log.Info("warehouse connected", "dialect", store.Dialect().String(), "exec_mode", store.ExecMode(), "pooler", cfg.PGPooler)

	cache, err := rediscache.New(rediscache.Options{
		Addrs:      cfg.RedisAddrs,
		MasterName: cfg.RedisMasterName,
		Password:   cfg.RedisPassword,
		DB:         cfg.RedisDB,
		Prefix:     cfg.RedisPrefix,
	}, reg, log)
	if err != nil {
		return err
	}
	defer cache.Close()

	svc, err := warmcache.NewService(cache, store, cfg.Namespaces, reg, log, warmcache.Options{
		HotTimeout:      cfg.HotTimeout,
		WarmTimeout:     cfg.WarmTimeout,
		MaxWarmInflight: cfg.MaxWarmInflight,
		MaxBatchKeys:    cfg.MaxBatchKeys,
		MaxValueBytes:   int(cfg.MaxBodyBytes),
	})
	if err != nil {
		return err
	}
	handler, err := httpapi.NewHandler(svc, promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}), reg, log,
		httpapi.Options{MaxBodyBytes: cfg.MaxBodyBytes})
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.HTTPAddr, err)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	names := make([]string, len(cfg.Namespaces))
	for i, ns := range cfg.Namespaces {
		names[i] = ns.Name
	}
	log.Info("serving", "http", "http://"+ln.Addr().String(), "namespaces", names)
	fmt.Fprintf(stdout, "warmcache: serving HTTP on http://%s\n", ln.Addr())

	select {
	case err := <-served:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: draining requests", "timeout", cfg.ShutdownTimeout)
	drainCtx, cancelDrain := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancelDrain()
	shutdownErr := srv.Shutdown(drainCtx)
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http server: %w", err)
	}
	if shutdownErr != nil {
		return fmt.Errorf("drain: %w", shutdownErr)
	}
	log.Info("stopped")
	return nil
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

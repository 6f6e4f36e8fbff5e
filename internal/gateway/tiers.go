package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/rediscache"
	"github.com/warmcache/warmcache/internal/schema"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// migrateConnectTimeout bounds connecting to the warehouse for migrations.
const migrateConnectTimeout = 15 * time.Second

// StoreOptions returns the warehouse options of cfg.
func StoreOptions(cfg config.Config) pgstore.Options {
	return pgstore.Options{DSN: cfg.Postgres.DSN, ExecMode: cfg.Postgres.ExecMode, Pooler: cfg.Postgres.Pooler, LookupFunction: cfg.Postgres.LookupFunction,
		WriteFunction: cfg.Postgres.WriteFunction, SegmentLanes: cfg.Postgres.SegmentLanes,
		MaxConns: int32(cfg.Postgres.MaxConns)}
}

// RedisOptions returns the Redis tier's options of cfg.
func RedisOptions(cfg config.Config) rediscache.Options {
	return rediscache.Options{
		Addrs:      cfg.Redis.Addrs,
		MasterName: cfg.Redis.MasterName,
		Password:   cfg.Redis.Password,
		DB:         cfg.Redis.DB,
		Prefix:     cfg.Redis.Prefix,

		DialTimeout: cfg.Redis.DialTimeout,
	}
}

// newCache builds the Redis client of cfg, with its options adjusted by
// adjust.
func newCache(cfg config.Config, adjust func(*rediscache.Options), reg prometheus.Registerer, log *slog.Logger) (*rediscache.Cache, error) {
	opts := RedisOptions(cfg)
	adjust(&opts)
	return rediscache.New(opts, reg, log)
}

// OpenWarehouse connects to the warehouse of cfg alone, for a command that
// needs no other tier: a pool of two connections that checks only
// namespaces (none for nil), creates no lookup function and keeps no
// segment lanes. Its metrics go
// to a registry of its own. The caller closes the store.
func OpenWarehouse(ctx context.Context, cfg config.Config, namespaces []*warmcache.Namespace, log *slog.Logger) (*pgstore.Store, error) {
	openCtx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	opts := StoreOptions(cfg)
	opts.MaxConns = commandConns
	opts.LookupFunction = pgstore.FunctionUse // commands create nothing
	opts.WriteFunction = pgstore.FunctionUse
	opts.SegmentLanes = pgstore.LanesOff // two connections have no lanes to spare
	return pgstore.Open(openCtx, opts, namespaces, prometheus.NewRegistry(), log)
}

// OpenRedis builds the Redis client of cfg alone, for a command that needs
// no other tier. It does not connect: the first call does. Its metrics are
// registered nowhere. The caller closes the cache.
func OpenRedis(cfg config.Config, log *slog.Logger) (*rediscache.Cache, error) {
	return newCache(cfg, func(*rediscache.Options) {}, nil, log)
}

// Migrator is the schema migrator of a warehouse over a connection of its
// own. It is not safe for concurrent use.
type Migrator struct {
	*schema.Migrator
	conn *pgx.Conn
}

// OpenMigrator connects to the warehouse of cfg, detects its dialect and
// returns the migrator of cfg's tables for it, logging each step to log.
// Errors wrap the connection's or schema.OpenMigrator's.
func OpenMigrator(ctx context.Context, cfg config.Config, log *slog.Logger) (*Migrator, error) {
	connectCtx, cancel := context.WithTimeout(ctx, migrateConnectTimeout)
	defer cancel()
	conn, err := pgx.Connect(connectCtx, cfg.Postgres.DSN)
	if err != nil {
		return nil, fmt.Errorf("migrate: connect: %w", err)
	}
	m, err := schema.OpenMigrator(ctx, conn, cfg.Tables, log)
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return &Migrator{Migrator: m, conn: conn}, nil
}

// Close closes the migrator's connection.
func (m *Migrator) Close(ctx context.Context) error {
	return m.conn.Close(context.WithoutCancel(ctx))
}

// DetectDialect asks the warehouse of cfg which dialect it speaks, over one
// connection that prepares nothing, so that it works through PgBouncer in
// transaction pooling too; ctx bounds it. A DSN that does not parse gives
// a *pgconn.ParseConfigError, a server that does not answer a
// *pgconn.ConnectError; the other errors are the detection's.
func DetectDialect(ctx context.Context, cfg config.Config) (dialect.Dialect, error) {
	cc, err := pgx.ParseConfig(cfg.Postgres.DSN)
	if err != nil {
		return dialect.Postgres, err
	}
	cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return dialect.Postgres, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return dialect.Detect(ctx, conn)
}

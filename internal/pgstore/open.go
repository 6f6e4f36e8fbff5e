package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/promreg"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// Open connects to the warehouse in opts.DSN, detects its dialect, chooses
// the exec modes (see Options.ExecMode) and builds the pool. It then checks
// every namespace against the catalog and prepares its statements once, and
// refuses to start, with an error that names the namespace, table and
// column, when a table or column is missing or has the wrong type, or when a
// writable namespace's write statements do not prepare (for example without
// a unique index on the key, or without the version sequence). It registers
// the store's metrics with reg, which must not be nil; log must not be nil
// either. The caller closes the Store.
func Open(ctx context.Context, opts Options, namespaces []*warmcache.Namespace, reg prometheus.Registerer, log *slog.Logger) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg, err := poolConfig(opts)
	if err != nil {
		return nil, err
	}
	for _, ns := range namespaces {
		if err := checkNamespace(ns); err != nil {
			return nil, err
		}
	}

	probe, err := probeServer(ctx, cfg.ConnConfig, opts, log)
	if err != nil {
		return nil, err
	}
	modes, err := ChooseExecModes(probe.dialect, opts)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.DefaultQueryExecMode = modes.Write
	if opts.Tracer != nil { // the pool's connections, not the probe's
		cfg.ConnConfig.Tracer = opts.Tracer
	}
	cfg.AfterConnect = applySettings(probe.settings)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: create pool: %w", err)
	}
	s := &Store{
		pool:    pool,
		dialect: probe.dialect,
		modes:   modes,
		tables:  make(map[string]*table, len(namespaces)),
		reg:     reg,
		log:     log,

		loadTimeout: opts.LoadStatementTimeout,
	}
	if err := s.prepareTables(ctx, namespaces, probe, opts.LookupFunction, opts.WriteFunction, log); err != nil {
		pool.Close()
		return nil, err
	}
	if err := s.openLanes(ctx, cfg, probe.segments, log); err != nil {
		s.pool.Close()
		return nil, err
	}
	if err := s.register(reg); err != nil {
		s.Close()
		return nil, err
	}
	log.Info("pgstore: opened warehouse pool",
		"dialect", probe.dialect.String(),
		"pooler", opts.Pooler,
		"read_exec_mode", ExecModeName(modes.Read),
		"write_exec_mode", ExecModeName(modes.Write),
		"max_conns", opts.MaxConns,
		"segment_lanes", s.laneCount(),
		"namespaces", len(namespaces))
	return s, nil
}

// poolConfig returns the pool's configuration from opts (with its
// defaults): the DSN's, with the pool's bounds and the connect timeout of
// opts.
func poolConfig(opts Options) (*pgxpool.Config, error) {
	if opts.DSN == "" {
		return nil, errors.New("pgstore: no DSN")
	}
	cfg, err := pgxpool.ParseConfig(opts.DSN)
	if err != nil {
		return nil, fmt.Errorf("pgstore: parse DSN: %w", err)
	}
	cfg.MaxConns = opts.MaxConns
	cfg.MinConns = opts.MinConns
	cfg.MaxConnLifetime = opts.MaxConnLifetime
	cfg.MaxConnIdleTime = opts.MaxConnIdleTime
	if opts.ConnectTimeout > 0 {
		cfg.ConnConfig.ConnectTimeout = opts.ConnectTimeout
	} else if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	return cfg, nil
}

// applySettings returns the AfterConnect hook that sets the session
// settings the probe chose on each new connection, or nil when there are
// none.
func applySettings(settings []string) func(context.Context, *pgx.Conn) error {
	if len(settings) == 0 {
		return nil
	}
	sql := strings.Join(settings, "; ")
	return func(ctx context.Context, c *pgx.Conn) error {
		if err := c.PgConn().Exec(ctx, sql).Close(); err != nil {
			return fmt.Errorf("pgstore: greenplum session settings: %w", err)
		}
		return nil
	}
}

// register gives each table its namespace's metrics and registers the
// store's collectors, the pool's among them, with reg.
func (s *Store) register(reg prometheus.Registerer) error {
	m := newMetrics()
	for name, t := range s.tables {
		t.metrics = m.forNamespace(name)
	}
	collectors := []prometheus.Collector{m.queries, m.duration, newPoolCollector(s.pools)}
	if err := promreg.Register(reg, "pgstore", collectors...); err != nil {
		return err
	}
	s.collectors = collectors
	return nil
}

// server is what Open learns from its first connection.
type server struct {
	dialect dialect.Dialect
	// onConflict says whether the server has INSERT ... ON CONFLICT
	// (PostgreSQL 9.5 and later, so Greenplum 7 but not 6).
	onConflict bool
	// settings are the session settings to send on each new connection.
	settings []string
	// segments counts a Greenplum cluster's primary segments, when the
	// store may keep segment lanes on it (Options.SegmentLanes); else 0.
	segments int
}

// probeServer connects once, outside the pool, to detect the dialect and,
// on Greenplum, to find which session settings the server has.
func probeServer(ctx context.Context, cc *pgx.ConnConfig, opts Options, log *slog.Logger) (server, error) {
	// The simple protocol prepares nothing, so the probe works through any
	// pooler whatever the DSN's default_query_exec_mode says.
	cc = cc.Copy()
	cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return server{}, fmt.Errorf("pgstore: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var srv server
	if srv.dialect, err = dialect.Detect(ctx, conn); err != nil {
		return server{}, err
	}
	var versionNum string
	if err := conn.QueryRow(ctx, "SHOW server_version_num", pgx.QueryExecModeSimpleProtocol).Scan(&versionNum); err != nil {
		return server{}, fmt.Errorf("pgstore: server version: %w", err)
	}
	n, err := strconv.Atoi(versionNum)
	if err != nil {
		return server{}, fmt.Errorf("pgstore: server version %q: %w", versionNum, err)
	}
	srv.onConflict = n >= 90500
	if srv.dialect != dialect.Greenplum {
		return srv, nil
	}
	if opts.Pooler == PoolerPgBouncer {
		// Through PgBouncer a SET would change whichever server connection
		// ran it, shared with other clients; check the role's settings.
		return srv, warnSessionSettings(ctx, conn, log)
	}
	for _, stmt := range SessionSettings(opts) {
		err := conn.PgConn().Exec(ctx, stmt).Close()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedObject { // an unknown setting
			log.Warn("pgstore: greenplum server lacks a session setting; skipping it", "statement", stmt)
			continue
		}
		if err != nil {
			return server{}, fmt.Errorf("pgstore: greenplum session setting %q: %w", stmt, err)
		}
		srv.settings = append(srv.settings, stmt)
	}
	if opts.SegmentLanes == LanesAuto {
		if srv.segments, err = dialect.Segments(ctx, conn); err != nil {
			return server{}, fmt.Errorf("pgstore: %w", err)
		}
	}
	return srv, nil
}

// warnSessionSettings logs a warning for each Greenplum setting whose
// server value is not the one key lookups need.
func warnSessionSettings(ctx context.Context, conn *pgx.Conn, log *slog.Logger) error {
	want := dialect.LookupSettings()
	got, err := dialect.ReadSettings(ctx, conn, dialect.SettingNames(want)...)
	if err != nil {
		return fmt.Errorf("pgstore: read greenplum settings: %w", err)
	}
	for _, w := range want {
		if setting, ok := got[w.Name]; ok && setting != w.Value {
			log.Warn("pgstore: greenplum setting differs from what key lookups need; set it for the service's role (ALTER ROLE ... SET), "+
				"since session settings do not pass through PgBouncer", "setting", w.Name, "value", setting, "want", w.Value)
		}
	}
	return nil
}

// openLanes gives the store segment lanes on a cluster of segments (none
// when 0), beside its shared pool, if a table may use them (laneReady).
func (s *Store) openLanes(ctx context.Context, cfg *pgxpool.Config, segments int, log *slog.Logger) error {
	sizes := laneSizes(segments, cfg.MaxConns)
	if len(sizes) == 0 {
		return nil
	}
	var ready []*table
	for _, t := range s.tables {
		why, err := s.laneReady(ctx, t, segments)
		if err != nil {
			return fmt.Errorf("pgstore: check the distribution of %s: %w", t.ns.Table, classify(err))
		}
		if why != "" {
			log.Info("pgstore: no segment lanes for the table; its statements share one pool", "namespace", t.ns.Name, "table", t.ns.Table, "why", why)
			continue
		}
		ready = append(ready, t)
	}
	if len(ready) == 0 {
		return nil
	}
	l, err := newLanes(ctx, cfg, segments, sizes)
	if err != nil {
		return err
	}
	s.lanes = l
	for _, t := range ready {
		t.lanes = true
	}
	s.warmLanes(ctx, ready[0], log)
	return nil
}

// warmLanes opens each lane's connections and sends each one a lookup of
// t that goes to the lane's segment, at once, so that the first requests
// do not wait for Greenplum to start a session and its segment's process
// (about 0.3 s each here). A lane that fails is logged and left to its
// first request.
func (s *Store) warmLanes(ctx context.Context, t *table, log *slog.Logger) {
	var wg sync.WaitGroup
	for seg, pool := range s.lanes.pools {
		k := keyOnSegment(t.ns, seg, s.lanes.segments)
		for range pool.Config().MaxConns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var found bool
				err := pool.QueryRow(ctx, "SELECT EXISTS ("+t.stmts.Lookup+")", s.modes.Read, keyArg(t.ns, k)).Scan(&found)
				if err != nil {
					log.Warn("pgstore: a segment lane did not warm up", "segment", seg, "err", err)
				}
			}()
		}
	}
	wg.Wait()
}

// keyOnSegment returns a key of ns that Greenplum puts on segment seg of
// segments: the first of 1, 2, 3... (as bigint or text) that hashes there.
func keyOnSegment(ns *warmcache.Namespace, seg, segments int) warmcache.Key {
	for i := int64(1); ; i++ {
		k := warmcache.Key{Int: i, Text: strconv.FormatInt(i, 10)}
		if segmentOf(ns, k, segments) == seg {
			return k
		}
	}
}

// laneCount is the number of segment lanes, 0 without.
func (s *Store) laneCount() int {
	if s.lanes == nil {
		return 0
	}
	return len(s.lanes.pools)
}

// pools returns the shared pool and the lanes' pools.
func (s *Store) pools() []*pgxpool.Pool {
	out := []*pgxpool.Pool{s.pool}
	if s.lanes != nil {
		out = append(out, s.lanes.pools...)
	}
	return out
}

package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/warmcache"
)

var _ warmcache.Warm = (*Store)(nil)

// Store is the warm tier over a pgx connection pool: it reads and writes the
// namespaces' tables on PostgreSQL or Greenplum, directly or through
// PgBouncer. A Store is safe for concurrent use.
type Store struct {
	pool       *pgxpool.Pool
	dialect    Dialect
	modes      ExecModes
	tables     map[string]*table
	reg        prometheus.Registerer
	collectors []prometheus.Collector
}

// table is one namespace's statements and metrics.
type table struct {
	ns      *warmcache.Namespace
	stmts   StatementSet
	metrics [numOps]opMetrics
}

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
	if len(probe.settings) > 0 {
		settings := strings.Join(probe.settings, "; ")
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			if err := c.PgConn().Exec(ctx, settings).Close(); err != nil {
				return fmt.Errorf("pgstore: greenplum session settings: %w", err)
			}
			return nil
		}
	}
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
	}
	if err := s.prepareTables(ctx, namespaces, probe, log); err != nil {
		pool.Close()
		return nil, err
	}
	m := newMetrics()
	for name, t := range s.tables {
		t.metrics = m.forNamespace(name)
	}
	for _, c := range []prometheus.Collector{m.queries, m.duration, newPoolCollector(pool)} {
		if err := reg.Register(c); err != nil {
			s.Close()
			return nil, fmt.Errorf("pgstore: register metrics: %w", err)
		}
		s.collectors = append(s.collectors, c)
	}
	log.Info("pgstore: opened warehouse pool",
		"dialect", probe.dialect.String(),
		"pooler", opts.Pooler,
		"read_exec_mode", ExecModeName(modes.Read),
		"write_exec_mode", ExecModeName(modes.Write),
		"max_conns", opts.MaxConns,
		"namespaces", len(namespaces))
	return s, nil
}

// server is what Open learns from its first connection.
type server struct {
	dialect Dialect
	// onConflict says whether the server has INSERT ... ON CONFLICT
	// (PostgreSQL 9.5 and later, so Greenplum 7 but not 6).
	onConflict bool
	// settings are the session settings to send on each new connection.
	settings []string
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
	if srv.dialect, err = DetectDialect(ctx, conn); err != nil {
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
	if srv.dialect != Greenplum {
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
		if errors.As(err, &pgErr) && pgErr.Code == "42704" { // undefined_object: unknown setting
			log.Warn("pgstore: greenplum server lacks a session setting; skipping it", "statement", stmt)
			continue
		}
		if err != nil {
			return server{}, fmt.Errorf("pgstore: greenplum session setting %q: %w", stmt, err)
		}
		srv.settings = append(srv.settings, stmt)
	}
	return srv, nil
}

// warnSessionSettings logs a warning for each Greenplum setting whose
// server value is not the one key lookups need.
func warnSessionSettings(ctx context.Context, conn *pgx.Conn, log *slog.Logger) error {
	want := map[string]string{"optimizer": "off", "gp_enable_direct_dispatch": "on", "plan_cache_mode": "auto"}
	rows, err := conn.Query(ctx, "SELECT name, setting FROM pg_settings WHERE name = ANY($1::text[])",
		pgx.QueryExecModeSimpleProtocol, []string{"optimizer", "gp_enable_direct_dispatch", "plan_cache_mode"})
	if err != nil {
		return fmt.Errorf("pgstore: read greenplum settings: %w", err)
	}
	var name, setting string
	_, err = pgx.ForEachRow(rows, []any{&name, &setting}, func() error {
		if setting != want[name] {
			log.Warn("pgstore: greenplum setting differs from what key lookups need; set it for the service's role (ALTER ROLE ... SET), "+
				"since session settings do not pass through PgBouncer", "setting", name, "value", setting, "want", want[name])
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pgstore: read greenplum settings: %w", err)
	}
	return nil
}

// Dialect returns the dialect the server speaks.
func (s *Store) Dialect() Dialect { return s.dialect }

// ExecMode returns the exec mode of reads, as an Options.ExecMode value such
// as "cache_statement".
func (s *Store) ExecMode() string { return ExecModeName(s.modes.Read) }

// WriteExecMode returns the exec mode of writes, which differs from
// ExecMode on Greenplum with ExecMode "auto".
func (s *Store) WriteExecMode() string { return ExecModeName(s.modes.Write) }

// Close closes the pool, waiting for acquired connections to be released,
// and unregisters the store's metrics.
func (s *Store) Close() {
	for _, c := range s.collectors {
		s.reg.Unregister(c)
	}
	s.collectors = nil
	s.pool.Close()
}

// Ping reports whether the warehouse answers, through a pooled connection.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("pgstore: ping: %w", err)
	}
	return nil
}

// Lookup reads key. An absent key is an Entry with Found false and a nil
// error; a NULL value column reads as the JSON null. Other errors are the warehouse's, wrapped; an unknown namespace
// wraps warmcache.ErrUnknownNamespace.
func (s *Store) Lookup(ctx context.Context, ns *warmcache.Namespace, key warmcache.Key) (e warmcache.Entry, err error) {
	t, err := s.table(ns)
	if err != nil {
		return warmcache.Entry{}, err
	}
	defer func(start time.Time) { t.metrics[opLookup].observe(start, err) }(time.Now())
	var value []byte
	var version int64
	err = s.pool.QueryRow(ctx, t.stmts.Lookup, s.modes.Read, keyArg(ns, key)).Scan(&value, &version)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return warmcache.Entry{}, nil
	case err != nil:
		return warmcache.Entry{}, fmt.Errorf("pgstore: lookup %s/%q: %w", ns.Name, key.Text, err)
	}
	return warmcache.Entry{Value: jsonValue(value), Version: version, Found: true}, nil
}

// LookupMany reads keys in one query. The result has the length and order of
// keys; absent keys have Found false. Errors are as for Lookup.
func (s *Store) LookupMany(ctx context.Context, ns *warmcache.Namespace, keys []warmcache.Key) (entries []warmcache.Entry, err error) {
	t, err := s.table(ns)
	if err != nil {
		return nil, err
	}
	entries = make([]warmcache.Entry, len(keys))
	if len(keys) == 0 {
		return entries, nil
	}
	defer func(start time.Time) { t.metrics[opLookupMany].observe(start, err) }(time.Now())

	// found maps each key's canonical text to its entry.
	found := make(map[string]warmcache.Entry, len(keys))
	var (
		arg     any
		intKey  int64
		textKey string
		value   []byte
		version int64
		dest    []any
	)
	if ns.KeyType == warmcache.KeyBigint {
		ints := make([]int64, len(keys))
		for i, k := range keys {
			ints[i] = k.Int
		}
		arg, dest = ints, []any{&intKey, &value, &version}
	} else {
		texts := make([]string, len(keys))
		for i, k := range keys {
			texts[i] = k.Text
		}
		arg, dest = texts, []any{&textKey, &value, &version}
	}
	rows, err := s.pool.Query(ctx, t.stmts.LookupMany, s.modes.Read, arg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: lookup %d keys in %s: %w", len(keys), ns.Name, err)
	}
	_, err = pgx.ForEachRow(rows, dest, func() error {
		k := textKey
		if ns.KeyType == warmcache.KeyBigint {
			k = strconv.FormatInt(intKey, 10)
		}
		found[k] = warmcache.Entry{Value: jsonValue(value), Version: version, Found: true}
		value = nil
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: lookup %d keys in %s: %w", len(keys), ns.Name, err)
	}
	for i, k := range keys {
		entries[i] = found[k.Text]
	}
	return entries, nil
}

// Put upserts value, a JSON document, for key and returns the stored entry:
// the value as the warehouse returns it on read (canonical JSON text for a
// jsonb column, an object rebuilt from the columns for the columns layout)
// and its new version, taken from the version sequence after the row lock so
// that versions grow per key in commit order. With ifMatch the row must
// exist at that version, or the error wraps warmcache.ErrVersionMismatch. A
// value the table rejects (a wrong type, a missing required field) gives an
// error that wraps warmcache.ErrInvalidValue. Other errors are the
// warehouse's, wrapped.
func (s *Store) Put(ctx context.Context, ns *warmcache.Namespace, key warmcache.Key, value []byte, ifMatch *int64) (e warmcache.Entry, err error) {
	t, err := s.table(ns)
	if err != nil {
		return warmcache.Entry{}, err
	}
	defer func(start time.Time) { t.metrics[opPut].observe(start, err) }(time.Now())
	if t.stmts.DeleteInsert {
		e, err = s.putDeleteInsert(ctx, t, key, value, ifMatch)
	} else {
		e, err = s.putUpsert(ctx, t, key, value, ifMatch)
	}
	if err != nil {
		return warmcache.Entry{}, writeError("put", ns, key, err)
	}
	return e, nil
}

// putUpsert writes with one statement: an upsert, or an update of the
// expected version.
func (s *Store) putUpsert(ctx context.Context, t *table, key warmcache.Key, value []byte, ifMatch *int64) (warmcache.Entry, error) {
	var row pgx.Row
	if ifMatch == nil {
		row = s.pool.QueryRow(ctx, t.stmts.Upsert, s.modes.Write, keyArg(t.ns, key), string(value))
	} else {
		row = s.pool.QueryRow(ctx, t.stmts.UpdateIfMatch, s.modes.Write, keyArg(t.ns, key), string(value), *ifMatch)
	}
	var e warmcache.Entry
	err := row.Scan(&e.Value, &e.Version)
	if errors.Is(err, pgx.ErrNoRows) {
		return warmcache.Entry{}, versionMismatch(key, *ifMatch)
	}
	if err != nil {
		return warmcache.Entry{}, err
	}
	e.Value, e.Found = jsonValue(e.Value), true
	return e, nil
}

// putDeleteInsert writes with DELETE + INSERT in one transaction, for tables
// that reject ON CONFLICT. The DELETE returns the old version for the
// ifMatch check.
func (s *Store) putDeleteInsert(ctx context.Context, t *table, key warmcache.Key, value []byte, ifMatch *int64) (e warmcache.Entry, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return warmcache.Entry{}, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(ctx) // the error that matters is err; a failed rollback closes the connection
		}
	}()
	rows, err := tx.Query(ctx, t.stmts.Remove, s.modes.Write, keyArg(t.ns, key))
	if err != nil {
		return warmcache.Entry{}, err
	}
	old, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return warmcache.Entry{}, err
	}
	if ifMatch != nil && (len(old) == 0 || old[0] != *ifMatch) {
		return warmcache.Entry{}, versionMismatch(key, *ifMatch)
	}
	err = tx.QueryRow(ctx, t.stmts.Insert, s.modes.Write, keyArg(t.ns, key), string(value)).Scan(&e.Value, &e.Version)
	if err != nil {
		return warmcache.Entry{}, err
	}
	if err = tx.Commit(ctx); err != nil {
		return warmcache.Entry{}, err
	}
	e.Value, e.Found = jsonValue(e.Value), true
	return e, nil
}

// Delete removes key and returns the version of the delete, taken from the
// version sequence, so newer than any version the key had. The error wraps
// warmcache.ErrNotFound when the key is absent, and
// warmcache.ErrVersionMismatch when ifMatch is not nil and differs from the
// row's version. Other errors are the warehouse's, wrapped.
func (s *Store) Delete(ctx context.Context, ns *warmcache.Namespace, key warmcache.Key, ifMatch *int64) (version int64, err error) {
	t, err := s.table(ns)
	if err != nil {
		return 0, err
	}
	defer func(start time.Time) { t.metrics[opDelete].observe(start, err) }(time.Now())
	var row pgx.Row
	if ifMatch == nil {
		row = s.pool.QueryRow(ctx, t.stmts.Delete, s.modes.Write, keyArg(ns, key))
	} else {
		row = s.pool.QueryRow(ctx, t.stmts.DeleteIfMatch, s.modes.Write, keyArg(ns, key), *ifMatch)
	}
	err = row.Scan(&version)
	if errors.Is(err, pgx.ErrNoRows) {
		err = s.deleteMiss(ctx, t, key, ifMatch)
	}
	if err != nil {
		return 0, writeError("delete", ns, key, err)
	}
	return version, nil
}

// deleteMiss explains a delete that removed no row: the key is absent, or
// it is at another version than ifMatch.
func (s *Store) deleteMiss(ctx context.Context, t *table, key warmcache.Key, ifMatch *int64) error {
	if ifMatch == nil {
		return fmt.Errorf("%w: key %q", warmcache.ErrNotFound, key.Text)
	}
	var current int64
	err := s.pool.QueryRow(ctx, t.stmts.Version, s.modes.Write, keyArg(t.ns, key)).Scan(&current)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: key %q", warmcache.ErrNotFound, key.Text)
	case err != nil:
		return err
	}
	return versionMismatch(key, *ifMatch)
}

// table returns the statements of ns, or an error that wraps
// warmcache.ErrUnknownNamespace when the store was not opened with it.
func (s *Store) table(ns *warmcache.Namespace) (*table, error) {
	t, ok := s.tables[ns.Name]
	if !ok {
		return nil, fmt.Errorf("pgstore: %w: %q", warmcache.ErrUnknownNamespace, ns.Name)
	}
	return t, nil
}

// keyArg returns key as the Go value of the key column's type.
func keyArg(ns *warmcache.Namespace, key warmcache.Key) any {
	if ns.KeyType == warmcache.KeyBigint {
		return key.Int
	}
	return key.Text
}

// jsonValue turns an SQL NULL value into the JSON null.
func jsonValue(b []byte) []byte {
	if b == nil {
		return []byte("null")
	}
	return b
}

func versionMismatch(key warmcache.Key, ifMatch int64) error {
	return fmt.Errorf("%w: key %q is not at version %d", warmcache.ErrVersionMismatch, key.Text, ifMatch)
}

// isRequestError reports whether err is an answer about the request rather
// than a failure of the warehouse.
func isRequestError(err error) bool {
	return errors.Is(err, warmcache.ErrNotFound) ||
		errors.Is(err, warmcache.ErrVersionMismatch) ||
		errors.Is(err, warmcache.ErrInvalidValue)
}

// writeError wraps the error of a write. Request errors pass unchanged. The
// server's data exceptions (SQLSTATE class 22, such as a field of the wrong
// type) and not-null violations become errors that wrap
// warmcache.ErrInvalidValue, with a message for the client. The rest are
// wrapped as warehouse errors.
func writeError(op string, ns *warmcache.Namespace, key warmcache.Key, err error) error {
	if isRequestError(err) {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "23502": // not_null_violation
			return fmt.Errorf("%w: field %q is required", warmcache.ErrInvalidValue, pgErr.ColumnName)
		case strings.HasPrefix(pgErr.Code, "22"): // data_exception
			return fmt.Errorf("%w: %s", warmcache.ErrInvalidValue, pgErr.Message)
		}
	}
	return fmt.Errorf("pgstore: %s %s/%q: %w", op, ns.Name, key.Text, err)
}

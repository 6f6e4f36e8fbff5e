package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/promreg"
	"github.com/warmcache/warmcache/internal/warmcache"
)

var _ warmcache.Warm = (*Store)(nil)

// Store is the warm tier over a pgx connection pool: it reads and writes the
// namespaces' tables on PostgreSQL or Greenplum, directly or through
// PgBouncer. A Store is safe for concurrent use.
type Store struct {
	pool    *pgxpool.Pool
	dialect dialect.Dialect
	modes   ExecModes
	tables  map[string]*table
	// loadTimeout is Options.LoadStatementTimeout.
	loadTimeout time.Duration
	reg         prometheus.Registerer
	collectors  []prometheus.Collector
	log         *slog.Logger
}

// table is one namespace's statements and metrics.
type table struct {
	ns      *warmcache.Namespace
	stmts   StatementSet
	metrics [numOps]opMetrics
	// functionGone is set when the lookup function was dropped while the
	// store ran: reads go on with LookupPositions until a restart creates
	// the function again.
	functionGone atomic.Bool
	// writeFunctionGone is functionGone for the write function: writes go
	// on in transactions of their own.
	writeFunctionGone atomic.Bool
	// maxRow bounds a row's key and value, in bytes, on a table whose
	// rows must fit one block of Greenplum's append-optimized row storage
	// (see dialect.RowBlockSize and checkRow). Zero means no bound.
	maxRow int
}

// rowOverhead is what a row of an append-optimized row table takes in its
// block besides its key and value: the tuple and block headers, the
// version and the alignment. Measured on Greenplum 7 with the default
// 32 KiB block, a bytea value of 32,700 bytes under a one-byte key was
// found by key and one of 32,740 bytes was not; the bound keeps a margin.
const rowOverhead = 256

// checkRow refuses a row whose key and value are over maxRow bytes (when
// maxRow is not zero) with an error that wraps warmcache.ErrTooLarge: on an
// append-optimized row table such a row spans blocks, and key lookups
// would not find it. A JSON value is counted as its text; jsonb may store
// it larger.
func checkRow(ns *warmcache.Namespace, maxRow int, key warmcache.Key, value []byte) error {
	if maxRow > 0 && len(key.Text)+len(value) > maxRow {
		return fmt.Errorf("%w: namespace %q: a key and value of more than %d bytes do not fit one block of its append-optimized row table, where lookups by key would not find them; store large values in a heap or column-oriented table",
			warmcache.ErrTooLarge, ns.Name, maxRow)
	}
	return nil
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
	collectors := []prometheus.Collector{m.queries, m.duration, newPoolCollector(s.pool)}
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

// Dialect returns the dialect the server speaks.
func (s *Store) Dialect() dialect.Dialect { return s.dialect }

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
		return fmt.Errorf("pgstore: ping: %w", classify(err))
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
	var expires *time.Time
	err = s.pool.QueryRow(ctx, t.stmts.Lookup, s.modes.Read, keyArg(ns, key)).Scan(t.dest(&expires, &value, &version)...)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return warmcache.Entry{}, nil
	case err != nil:
		return warmcache.Entry{}, fmt.Errorf("pgstore: lookup %s/%q: %w", ns.Name, key.Text, classify(err))
	}
	return warmcache.Entry{Value: jsonValue(value), Version: version, Found: true, ExpiresAt: expiresAt(expires)}, nil
}

// LookupMany reads keys in one query. The result has the length and order of
// keys; absent keys have Found false. On PostgreSQL it calls the table's
// lookup function (LookupCall), whose plan each session keeps, or without
// one runs LookupPositions (a join of the array with the table, one index
// probe per key), or for one key Lookup's statement. On Greenplum one key
// is read with Lookup's statement (`= $1`), which is dispatched to the
// key's segment alone, and several with one `= ANY($1)` (see
// lookupManyGreenplum). Errors are as for Lookup.
func (s *Store) LookupMany(ctx context.Context, ns *warmcache.Namespace, keys []warmcache.Key) (entries []warmcache.Entry, err error) {
	t, err := s.table(ns)
	if err != nil {
		return nil, err
	}
	// Without a lookup function (always on Greenplum), one key is read
	// with Lookup's statement.
	if len(keys) == 1 && (t.stmts.LookupCall == "" || t.functionGone.Load()) {
		e, err := s.Lookup(ctx, ns, keys[0])
		if err != nil {
			return nil, err
		}
		return []warmcache.Entry{e}, nil
	}
	entries = make([]warmcache.Entry, len(keys))
	if len(keys) == 0 {
		return entries, nil
	}
	defer func(start time.Time) { t.metrics[opLookupMany].observe(start, err) }(time.Now())
	read := s.lookupPositions
	if s.dialect == dialect.Greenplum {
		read = s.lookupManyGreenplum
	}
	if err := read(ctx, t, keys, entries); err != nil {
		return nil, fmt.Errorf("pgstore: lookup %d keys in %s: %w", len(keys), ns.Name, classify(err))
	}
	return entries, nil
}

// keyArray returns keys as the array parameter of ns's key type: []int64
// for bigint keys, []string for text keys.
func keyArray(ns *warmcache.Namespace, keys []warmcache.Key) any {
	if ns.KeyType == warmcache.KeyBigint {
		ints := make([]int64, len(keys))
		for i, k := range keys {
			ints[i] = k.Int
		}
		return ints
	}
	texts := make([]string, len(keys))
	for i, k := range keys {
		texts[i] = k.Text
	}
	return texts
}

// lookupPositions reads keys into entries, each row at its key's
// position: with LookupCall, or LookupPositions when the table has no
// lookup function or it was dropped since the store opened.
func (s *Store) lookupPositions(ctx context.Context, t *table, keys []warmcache.Key, entries []warmcache.Entry) error {
	arg := keyArray(t.ns, keys)
	if t.stmts.LookupCall != "" && !t.functionGone.Load() {
		err := s.readPositions(ctx, t, t.stmts.LookupCall, arg, entries)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.UndefinedFunction || !s.lookupFunctionGone(ctx, t) {
			return err
		}
		if t.functionGone.CompareAndSwap(false, true) {
			s.log.Warn("pgstore: the lookup function is gone; batched lookups are planned at every query until the service restarts and creates it again",
				"namespace", t.ns.Name, "function", t.stmts.lookupSignature)
		}
		clear(entries)
	}
	return s.readPositions(ctx, t, t.stmts.LookupPositions, arg, entries)
}

// readPositions runs sql, which returns a key's 1-based position in arg, its
// value as JSON text and its version, and places each row in entries.
func (s *Store) readPositions(ctx context.Context, t *table, sql string, arg any, entries []warmcache.Entry) error {
	rows, err := s.pool.Query(ctx, sql, s.modes.Read, arg)
	if err != nil {
		return err
	}
	var (
		pos     int64
		value   []byte
		version int64
		expires *time.Time
	)
	_, err = pgx.ForEachRow(rows, t.dest(&expires, &pos, &value, &version), func() error {
		if pos < 1 || pos > int64(len(entries)) {
			return fmt.Errorf("the warehouse answered position %d of %d keys", pos, len(entries))
		}
		entries[pos-1] = warmcache.Entry{Value: jsonValue(value), Version: version, Found: true, ExpiresAt: expiresAt(expires)}
		value, expires = nil, nil
		return nil
	})
	return err
}

// Put upserts value, a JSON document, for key and returns the stored entry:
// the value as the warehouse returns it on read (canonical JSON text for a
// jsonb column, an object rebuilt from the columns for the columns layout)
// and its new version: one drawn from the version sequence, or the row's
// old version + 1 when that is greater, decided under the row's lock, so
// that a key's versions grow strictly in commit order (see StatementSet).
// With ifMatch the row must exist at that version, or the error wraps
// warmcache.ErrVersionMismatch. A value the table rejects (a wrong type, a
// missing required field) gives an error that wraps
// warmcache.ErrInvalidValue. Other errors are the warehouse's, wrapped.
// Put is a Write of one upsert.
func (s *Store) Put(ctx context.Context, ns *warmcache.Namespace, key warmcache.Key, value []byte, ifMatch *int64) (warmcache.Entry, error) {
	entries, err := s.Write(ctx, ns, []warmcache.Write{{Key: key, Value: value, IfMatch: ifMatch}})
	if err != nil {
		return warmcache.Entry{}, err
	}
	return entries[0], nil
}

// Delete removes key and returns the version of the delete: one drawn from
// the version sequence, or the row's version + 1 when that is greater, so
// newer than any version the key had. The error wraps warmcache.ErrNotFound
// when the key is absent, and warmcache.ErrVersionMismatch when ifMatch is
// not nil and differs from the row's version. Other errors are the
// warehouse's, wrapped. Delete is a Write of one delete.
func (s *Store) Delete(ctx context.Context, ns *warmcache.Namespace, key warmcache.Key, ifMatch *int64) (int64, error) {
	entries, err := s.Write(ctx, ns, []warmcache.Write{{Key: key, Delete: true, IfMatch: ifMatch}})
	if err != nil {
		return 0, err
	}
	return entries[0].Version, nil
}

// querier runs statements on the pool or inside a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Write applies writes to ns in their order, atomically, and returns one
// entry per write as warmcache.Warm.Write describes. The writes run in one
// transaction on a connection of their own. Its first round trip opens it,
// takes the write lock of each key and then draws the versions (see
// StatementSet: this is what orders a key's versions across concurrent
// writers and deletes); then each write runs, and the commit. A failed
// write rolls the whole transaction back. Errors are as for Put and Delete.
func (s *Store) Write(ctx context.Context, ns *warmcache.Namespace, writes []warmcache.Write) (entries []warmcache.Entry, err error) {
	t, err := s.table(ns)
	if err != nil {
		return nil, err
	}
	if len(writes) == 0 {
		return nil, nil
	}
	for _, w := range writes {
		if !w.Delete {
			if err := checkRow(ns, t.maxRow, w.Key, w.Value); err != nil {
				return nil, err
			}
		}
	}
	o := opTransaction
	if len(writes) == 1 {
		o = opPut
		if writes[0].Delete {
			o = opDelete
		}
	}
	defer func(start time.Time) { t.metrics[o].observe(start, err) }(time.Now())
	if t.byFunction(writes) {
		entries, gone, err := s.writeByFunction(ctx, t, writes)
		if !gone {
			if err != nil {
				return nil, writeError(o.String(), ns, writeKey(writes), err)
			}
			return entries, nil
		}
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %s %s: connect: %w", o, ns.Name, classify(err))
	}
	defer conn.Release()
	defer func() {
		if err != nil {
			rollback(ctx, conn)
		}
	}()
	versions, err := s.begin(ctx, conn, t, writes)
	if err != nil {
		return nil, writeError(o.String()+" lock", ns, warmcache.Key{}, err)
	}
	entries = make([]warmcache.Entry, len(writes))
	var q querier = conn
	// A write that is one statement sends the commit with it.
	var pc *pipelinedCommit
	if w := writes[0]; len(writes) == 1 && (!t.stmts.AppendOptimized || (!w.Delete && !w.IfAbsent && w.IfMatch != nil)) {
		pc = &pipelinedCommit{conn: conn}
		q = pc
	}
	for i, w := range writes {
		if entries[i], err = s.writeOne(ctx, q, t, w, versions[i]); err != nil {
			return nil, writeError(o.String(), ns, w.Key, err)
		}
	}
	if pc != nil && pc.sent {
		return entries, nil
	}
	if _, err = conn.Exec(ctx, "COMMIT", s.modes.Write); err != nil {
		return nil, writeError(o.String()+" commit", ns, warmcache.Key{}, err)
	}
	return entries, nil
}

// begin opens the transaction of writes on conn in one round trip: BEGIN,
// the table's lock, shared with other writes and taken alone by a load,
// the write lock of each distinct key in the order of their hashes (so that
// two transactions of the same keys cannot deadlock), on PostgreSQL the
// lock of each key's row, and then one version per write, drawn once every
// lock is held. The versions ascend in the order of writes.
func (s *Store) begin(ctx context.Context, conn *pgxpool.Conn, t *table, writes []warmcache.Write) ([]int64, error) {
	locks := keyLocks(t, writes)
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(t.stmts.TableLock, lockHash(t.ns, nil))
	for _, l := range locks {
		b.Queue(t.stmts.KeyLock, l.hash)
	}
	rowLocks := s.dialect == dialect.Postgres && t.stmts.RowLock != ""
	if rowLocks {
		for _, l := range locks {
			b.Queue(t.stmts.RowLock, keyArg(t.ns, l.key))
		}
	}
	b.Queue(t.stmts.NextVersion, len(writes))
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	for range b.Len() - 1 { // all but NextVersion
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	if len(versions) != len(writes) {
		return nil, fmt.Errorf("drew %d versions for %d writes", len(versions), len(writes))
	}
	slices.Sort(versions)
	return versions, br.Close()
}

// lock is the write lock of a key: its hash (see lockHash) and the key.
type lock struct {
	hash int64
	key  warmcache.Key
}

// keyLocks returns the write locks of the distinct keys of writes, in the
// order in which every write takes them: by hash, then by key, so that two
// transactions of the same keys cannot deadlock.
func keyLocks(t *table, writes []warmcache.Write) []lock {
	locks := make([]lock, 0, len(writes))
	for _, w := range writes {
		locks = append(locks, lock{lockHash(t.ns, &w.Key), w.Key})
	}
	slices.SortFunc(locks, func(a, b lock) int {
		if c := cmp.Compare(a.hash, b.hash); c != 0 {
			return c
		}
		return strings.Compare(a.key.Text, b.key.Text)
	})
	return slices.CompactFunc(locks, func(a, b lock) bool { return a.key.Text == b.key.Text })
}

// lockHash is an advisory lock of ns's table: with key, the write lock of
// that key; without, the table's own lock, which writes share and a load
// takes alone. It is a 64-bit FNV-1a hash of the table's name and the
// key's text; two keys that share a hash only wait for each other.
func lockHash(ns *warmcache.Namespace, key *warmcache.Key) int64 {
	h := fnv.New64a()
	h.Write([]byte(ns.Table))
	if key == nil {
		h.Write([]byte{1})
	} else {
		h.Write([]byte{0})
		h.Write([]byte(key.Text))
	}
	return int64(h.Sum64())
}

// pipelinedCommit is a querier whose first QueryRow sends COMMIT in the
// same round trip as its statement, for a write of one statement; the
// calls after it (explaining a statement that found no row) run on their
// own, outside the committed transaction. Scanning the row ends the round
// trip: a failed statement makes the commit fail too, and leaves the
// transaction for the caller to roll back.
type pipelinedCommit struct {
	conn *pgxpool.Conn
	sent bool
}

func (p *pipelinedCommit) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return p.conn.Query(ctx, sql, args...)
}

func (p *pipelinedCommit) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return p.conn.Exec(ctx, sql, args...)
}

func (p *pipelinedCommit) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if p.sent {
		return p.conn.QueryRow(ctx, sql, args...)
	}
	p.sent = true
	b := &pgx.Batch{}
	b.Queue(sql, args[1:]...) // args[0] is the exec mode, which a batch takes from the pool
	b.Queue("COMMIT")
	br := p.conn.SendBatch(ctx, b)
	return committedRow{br: br, row: br.QueryRow()}
}

// committedRow scans a pipelined statement's row, then reads the commit's
// answer and closes the batch.
type committedRow struct {
	br  pgx.BatchResults
	row pgx.Row
}

func (r committedRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	_, commitErr := r.br.Exec()
	closeErr := r.br.Close()
	switch {
	case err != nil && !errors.Is(err, pgx.ErrNoRows):
		return err
	case commitErr != nil:
		return commitErr
	case closeErr != nil:
		return closeErr
	}
	return err
}

// rollback ends a failed write's transaction on conn. A connection whose
// rollback fails is closed, so that the pool never hands out one inside a
// transaction.
func rollback(ctx context.Context, conn *pgxpool.Conn) {
	if conn.Conn().PgConn().TxStatus() == 'I' {
		return
	}
	if _, err := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
		_ = conn.Conn().Close(context.WithoutCancel(ctx))
	}
}

// writeOne runs one write on q, inside the write's transaction, at a
// version drawn under the key's lock.
func (s *Store) writeOne(ctx context.Context, q querier, t *table, w warmcache.Write, version int64) (warmcache.Entry, error) {
	switch {
	case w.Delete:
		return s.deleteOne(ctx, q, t, w, version)
	case w.IfAbsent:
		return s.create(ctx, q, t, w, version)
	case t.stmts.AppendOptimized && w.IfMatch == nil:
		return s.putAppendOptimized(ctx, q, t, w, version)
	}
	var row pgx.Row
	if w.IfMatch == nil {
		row = q.QueryRow(ctx, t.stmts.Upsert, t.ttlArgs(w, s.modes.Write, keyArg(t.ns, w.Key), valueArg(t.ns, w.Value), version)...)
	} else {
		row = q.QueryRow(ctx, t.stmts.UpdateIfMatch, t.ttlArgs(w, s.modes.Write, keyArg(t.ns, w.Key), valueArg(t.ns, w.Value), *w.IfMatch, version)...)
	}
	var e warmcache.Entry
	var expires *time.Time
	err := row.Scan(t.dest(&expires, &e.Value, &e.Version)...)
	e.ExpiresAt = expiresAt(expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return warmcache.Entry{}, versionMismatch(w.Key, *w.IfMatch)
	}
	if err != nil {
		return warmcache.Entry{}, err
	}
	e.Value, e.Found = jsonValue(e.Value), true
	return e, nil
}

// create inserts a key that must not exist. The key's unique index refuses
// an existing key; an append-optimized table, which may have none, is
// probed first with Retire, which locks the key (on Greenplum the table)
// and, when it finds the key, fails the write and so is rolled back.
func (s *Store) create(ctx context.Context, q querier, t *table, w warmcache.Write, version int64) (e warmcache.Entry, err error) {
	exists := fmt.Errorf("%w: key %q exists", warmcache.ErrVersionMismatch, w.Key.Text)
	if t.stmts.Expiring {
		// An expired row is an absent key: it gives way to the new one.
		// Its delete is logged (for change capture and polling) at a
		// version drawn now, after the write's: the new row then takes a
		// version drawn after that one, so that the delete does not win
		// over the row it made room for.
		tag, err := q.Exec(ctx, t.stmts.PurgeExpired, s.modes.Write, keyArg(t.ns, w.Key))
		if err != nil {
			return warmcache.Entry{}, err
		}
		if tag.RowsAffected() > 0 {
			if err := q.QueryRow(ctx, t.stmts.NextVersion, s.modes.Write, 1).Scan(&version); err != nil {
				return warmcache.Entry{}, err
			}
		}
	}
	if t.stmts.AppendOptimized {
		rows, err := q.Query(ctx, t.stmts.Retire, s.modes.Write, keyArg(t.ns, w.Key), version)
		if err != nil {
			return warmcache.Entry{}, err
		}
		found, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return warmcache.Entry{}, err
		}
		if len(found) > 0 {
			return warmcache.Entry{}, exists
		}
	}
	var expires *time.Time
	err = q.QueryRow(ctx, t.stmts.Insert, t.ttlArgs(w, s.modes.Write, keyArg(t.ns, w.Key), valueArg(t.ns, w.Value), version)...).Scan(t.dest(&expires, &e.Value, &e.Version)...)
	e.ExpiresAt = expiresAt(expires)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation {
		return warmcache.Entry{}, exists
	}
	if err != nil {
		return warmcache.Entry{}, err
	}
	e.Value, e.Found = jsonValue(e.Value), true
	return e, nil
}

// putAppendOptimized writes to a table that rejects ON CONFLICT, inside the
// transaction q: an UPDATE of the key, then an INSERT when it updated no
// row. On Greenplum an UPDATE of an append-optimized table locks the table,
// so two writers of a new key cannot both insert it.
func (s *Store) putAppendOptimized(ctx context.Context, q querier, t *table, w warmcache.Write, version int64) (e warmcache.Entry, err error) {
	rows, err := q.Query(ctx, t.stmts.Update, t.ttlArgs(w, s.modes.Write, keyArg(t.ns, w.Key), valueArg(t.ns, w.Value), version)...)
	if err != nil {
		return warmcache.Entry{}, err
	}
	updated, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (warmcache.Entry, error) {
		var e warmcache.Entry
		var expires *time.Time
		err := r.Scan(t.dest(&expires, &e.Value, &e.Version)...)
		e.ExpiresAt = expiresAt(expires)
		return e, err
	})
	if err != nil {
		return warmcache.Entry{}, err
	}
	if len(updated) > 0 {
		e = updated[0]
	} else {
		var expires *time.Time
		err = q.QueryRow(ctx, t.stmts.Insert, t.ttlArgs(w, s.modes.Write, keyArg(t.ns, w.Key), valueArg(t.ns, w.Value), version)...).Scan(t.dest(&expires, &e.Value, &e.Version)...)
		if err != nil {
			return warmcache.Entry{}, err
		}
		e.ExpiresAt = expiresAt(expires)
	}
	e.Value, e.Found = jsonValue(e.Value), true
	return e, nil
}

// deleteOne removes a key and returns an absent entry at the delete's
// version: one statement, or on an append-optimized table Retire then
// Remove inside the transaction q.
func (s *Store) deleteOne(ctx context.Context, q querier, t *table, w warmcache.Write, next int64) (warmcache.Entry, error) {
	var version int64
	var err error
	if t.stmts.AppendOptimized {
		version, err = s.deleteAppendOptimized(ctx, q, t, w.Key, w.IfMatch, next)
	} else {
		var row pgx.Row
		if w.IfMatch == nil {
			row = q.QueryRow(ctx, t.stmts.Delete, s.modes.Write, keyArg(t.ns, w.Key), next)
		} else {
			row = q.QueryRow(ctx, t.stmts.DeleteIfMatch, s.modes.Write, keyArg(t.ns, w.Key), *w.IfMatch, next)
		}
		err = row.Scan(&version)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		err = s.deleteMiss(ctx, q, t, w.Key, w.IfMatch)
		switch {
		case !errors.Is(err, warmcache.ErrNotFound) || !w.AbsentOK:
		case w.IfMatch == nil:
			return warmcache.Entry{}, nil
		default:
			// Where an absent key is no error, an expected version it
			// cannot have is a failed precondition.
			err = versionMismatch(w.Key, *w.IfMatch)
		}
	}
	if err != nil {
		return warmcache.Entry{}, err
	}
	return warmcache.Entry{Version: version}, nil
}

// deleteAppendOptimized deletes from a table that rejects DELETE ...
// RETURNING: Retire gives the row the delete's version and returns it,
// then Remove deletes it, inside the transaction q. No row retired is
// pgx.ErrNoRows.
func (s *Store) deleteAppendOptimized(ctx context.Context, q querier, t *table, key warmcache.Key, ifMatch *int64, next int64) (int64, error) {
	var rows pgx.Rows
	var err error
	if ifMatch == nil {
		rows, err = q.Query(ctx, t.stmts.Retire, s.modes.Write, keyArg(t.ns, key), next)
	} else {
		rows, err = q.Query(ctx, t.stmts.RetireIfMatch, s.modes.Write, keyArg(t.ns, key), *ifMatch, next)
	}
	if err != nil {
		return 0, err
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, err
	}
	if len(versions) == 0 {
		return 0, pgx.ErrNoRows
	}
	if _, err = q.Exec(ctx, t.stmts.Remove, s.modes.Write, keyArg(t.ns, key)); err != nil {
		return 0, err
	}
	return slices.Max(versions), nil
}

// deleteMiss explains a delete that removed no row: the key is absent, or
// it is at another version than ifMatch.
func (s *Store) deleteMiss(ctx context.Context, q querier, t *table, key warmcache.Key, ifMatch *int64) error {
	if ifMatch == nil {
		return fmt.Errorf("%w: key %q", warmcache.ErrNotFound, key.Text)
	}
	var current int64
	err := q.QueryRow(ctx, t.stmts.Version, s.modes.Write, keyArg(t.ns, key)).Scan(&current)
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

// valueArg returns value as the parameter of ns's value column: text for
// the JSON layouts, which the statements cast to json or jsonb, and bytes,
// never nil (pgx sends a nil slice as NULL), for the bytes layout's bytea.
func valueArg(ns *warmcache.Namespace, value []byte) any {
	if ns.Layout != warmcache.LayoutBytes {
		return string(value)
	}
	if value == nil {
		return []byte{}
	}
	return value
}

// dest returns the scan destinations of a statement of t that returns
// cols, followed by the row's expiry when the table has an expiry column
// (see StatementSet.Expiring).
func (t *table) dest(expires **time.Time, cols ...any) []any {
	if t.stmts.Expiring {
		return append(cols, expires)
	}
	return cols
}

// ttlArgs returns the arguments of a write statement of t, followed by the
// write's TTL in milliseconds (NULL for none) when the table has an expiry
// column. A write's ExpiresAt, without a TTL, becomes the TTL left until
// it on this clock.
func (t *table) ttlArgs(w warmcache.Write, args ...any) []any {
	if !t.stmts.Expiring {
		return args
	}
	ttl := w.TTL
	if ttl <= 0 && !w.ExpiresAt.IsZero() {
		ttl = max(time.Until(w.ExpiresAt), 0)
	}
	if ttl <= 0 && w.ExpiresAt.IsZero() {
		return append(args, (*int64)(nil))
	}
	return append(args, max(ttl.Milliseconds(), 0))
}

// expiresAt returns a row's expiry column as Entry.ExpiresAt: zero for
// NULL (never). It is cut to the millisecond, the precision every tier
// keeps, so that all of them agree on it: a row written elsewhere with a
// finer expiry reads as absent up to a millisecond early.
func expiresAt(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Truncate(time.Millisecond)
}

// jsonValue turns an SQL NULL value into the JSON null. The bytes layout
// reads a NULL as no bytes (see valueExpr), so its values never are nil.
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
	return warmcache.Classify(err) == warmcache.ClassClient
}

// writeError wraps the error of a write, classified once (see classify):
// request errors pass unchanged, the server's data and constraint errors
// become client errors with a message for the client, the warehouse's
// failures wrap warmcache.ErrUnavailable, and the rest are bugs.
func writeError(op string, ns *warmcache.Namespace, key warmcache.Key, err error) error {
	err = classify(err)
	if class := warmcache.Classify(err); class == warmcache.ClassClient || class == warmcache.ClassConflict {
		return err
	}
	return fmt.Errorf("pgstore: %s %s/%q: %w", op, ns.Name, key.Text, err)
}

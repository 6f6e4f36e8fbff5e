package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// Put upserts value, the value's bytes, for key and returns the stored
// entry: the value as the warehouse returns it on read (canonical JSON text
// for a jsonb column, an object rebuilt from the columns for the columns
// layout, the same bytes for the bytes layout)
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
	pool := s.pool
	if len(writes) == 1 {
		pool = s.poolFor(t, writes[0].Key)
	}
	conn, err := pool.Acquire(ctx)
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
	r := t.entryRow()
	err := row.Scan(r.dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return warmcache.Entry{}, versionMismatch(w.Key, *w.IfMatch)
	}
	if err != nil {
		return warmcache.Entry{}, err
	}
	return r.entry(), nil
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
	r := t.entryRow()
	err = q.QueryRow(ctx, t.stmts.Insert, t.ttlArgs(w, s.modes.Write, keyArg(t.ns, w.Key), valueArg(t.ns, w.Value), version)...).Scan(r.dest...)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation {
		return warmcache.Entry{}, exists
	}
	if err != nil {
		return warmcache.Entry{}, err
	}
	return r.entry(), nil
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
	r := t.entryRow()
	updated, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (warmcache.Entry, error) {
		if err := row.Scan(r.dest...); err != nil {
			return warmcache.Entry{}, err
		}
		return r.entry(), nil
	})
	if err != nil {
		return warmcache.Entry{}, err
	}
	if len(updated) > 0 {
		return updated[0], nil
	}
	err = q.QueryRow(ctx, t.stmts.Insert, t.ttlArgs(w, s.modes.Write, keyArg(t.ns, w.Key), valueArg(t.ns, w.Value), version)...).Scan(r.dest...)
	if err != nil {
		return warmcache.Entry{}, err
	}
	return r.entry(), nil
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

func versionMismatch(key warmcache.Key, ifMatch int64) error {
	return fmt.Errorf("%w: key %q is not at version %d", warmcache.ErrVersionMismatch, key.Text, ifMatch)
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

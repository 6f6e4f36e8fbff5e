package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// A write function is a PL/pgSQL function of a table, on PostgreSQL and on
// Greenplum's heap tables, that does in one statement what a write
// otherwise does in a transaction of its own (see StatementSet): it takes
// the table's shared lock, the write lock of each key and, on PostgreSQL,
// the lock of each key's row, draws the version, and upserts, updates if
// the version matches, or deletes. Called alone it is one round trip, and
// its implicit transaction commits with it; the writes of a transaction
// are one BEGIN, one call per write and the COMMIT, sent together. Like
// the lookup function, it keeps the plans of its statements in each server
// session, whichever client PgBouncer gives the session to; a statement
// sent alone through PgBouncer is planned at every call. On Greenplum the
// call runs on the coordinator, and each statement in it, the version
// passed as a variable, goes to the key's segment alone, as the statement
// sent by itself does. What it gains: docs/warehouse.md#the-write-function.
//
// A write that did not apply raises writeNotFound or writeMismatch, so
// that a transaction of several writes is rolled back whole by its own
// round trip; a delete of an absent key that may be absent returns no row.

// writeFunctionPrefix begins the name of every write function; the rest is
// a digest of its definition, as for the lookup function.
const writeFunctionPrefix = "warmcache_write_"

// writeFunctionQuote is the dollar quote around a write function's body.
const writeFunctionQuote = "$warmcache_write$"

// The SQLSTATEs a write function raises when its write did not apply: the
// key is absent, or it is not at the expected version. They are in a class
// of their own, which no server uses.
const (
	writeNotFound = "WC404"
	writeMismatch = "WC412"
)

// setWriteFunction fills in the write function of s from its write
// statements, in schema (unqualified when empty). With rowLocks
// (PostgreSQL) a write alone updates first, and the update's own wait for
// the row's lock orders it with the row's other writers; only a write
// that finds no row to update, and a delete, take the key's write lock,
// and they draw their version after it. The first call of a transaction
// of several writes locks every key and row of the transaction before any
// write, so that two transactions cannot deadlock. On Greenplum, where a
// row lock locks the whole table, the key's advisory lock alone orders its
// writers, and the version is drawn on the coordinator once it is held, as
// in the transaction of statements. The ordering argument:
// docs/consistency.md#how-reads-and-writes-work. Tables whose names
// contain a dollar sign, and append-optimized ones, get none.
//
// The function returns one row of OUT parameters: the stored value where
// the warehouse rewrites it (not in the bytes layout, which stores the
// bytes it was given), the version (0 for a delete of an absent key that
// may be absent) and, with Expiring, the expiry.
func (s *StatementSet) setWriteFunction(ns *warmcache.Namespace, schema string, rowLocks bool) {
	s.dropWriteFunction()
	if s.AppendOptimized || s.Upsert == "" || s.RowLock == "" {
		return
	}
	// The function's variables are named wc$...: no quoted identifier of
	// the table may then be taken for one.
	for _, stmt := range []string{s.Upsert, s.UpdateIfMatch, s.Delete, s.DeleteIfMatch, s.RowLock} {
		if strings.Contains(stmt, "wc$") || strings.Contains(stmt, writeFunctionQuote) {
			return
		}
	}
	p := newSQLParts(ns)
	keyType := string(ns.KeyType)
	valueType := "text"
	if ns.Layout == warmcache.LayoutBytes {
		valueType = "bytea"
	}
	w := writeBody{p: p, ns: ns, stmts: s, returnsValue: ns.Layout != warmcache.LayoutBytes}
	var body string
	if rowLocks {
		body = w.updateFirst()
	} else {
		body = w.lockFirst()
	}
	args := fmt.Sprintf("wc$key %s, wc$value %s, wc$if_match bigint, wc$delete boolean, wc$ttl bigint, wc$absent_ok boolean, wc$table_lock bigint, wc$key_locks bigint[], wc$row_keys %s[]",
		keyType, valueType, keyType)
	args += ", OUT wc$out_version bigint"
	if w.returnsValue {
		args += ", OUT wc$out_value " + valueType
	}
	if s.Expiring {
		args += ", OUT wc$out_expires timestamptz"
	}
	definition := fmt.Sprintf("(%s)\nLANGUAGE plpgsql VOLATILE AS %s%s%s", args, writeFunctionQuote, body, writeFunctionQuote)
	digest := sha256.Sum256([]byte(definition))
	name := pgx.Identifier{writeFunctionPrefix + hex.EncodeToString(digest[:8])}
	if schema != "" {
		name = pgx.Identifier{schema, name[0]}
	}
	fn := name.Sanitize()
	s.writeSignature = fmt.Sprintf("%s(%s, %s, bigint, boolean, bigint, boolean, bigint, bigint[], %s[])", fn, keyType, valueType, keyType)
	s.writeBody = body
	s.WriteFunction = "CREATE OR REPLACE FUNCTION " + fn + definition
	s.WriteCall = fmt.Sprintf("SELECT * FROM %s($1::%s, $2::%s, $3::bigint, $4::boolean, $5::bigint, $6::boolean, $7::bigint, $8::bigint[], $9::%s[])",
		fn, keyType, valueType, keyType)
	s.FoldCall = fmt.Sprintf("SELECT w.* FROM unnest($1::%[2]s[], $2::%[3]s[], $3::bigint[], $4::boolean[], $5::bigint[], $6::boolean[], $8::bigint[])"+
		" WITH ORDINALITY AS a(key, value, if_match, del, ttl, absent_ok, lock, i),"+
		" LATERAL %[1]s(a.key, a.value, a.if_match, a.del, a.ttl, a.absent_ok, $7::bigint, ARRAY[a.lock], '{}'::%[2]s[]) AS w ORDER BY a.i",
		fn, keyType, valueType)
	s.writeReturnsValue = w.returnsValue
}

// writeBody builds the body of a table's write function from its
// statements.
type writeBody struct {
	p            sqlParts
	ns           *warmcache.Namespace
	stmts        *StatementSet
	returnsValue bool
}

// The parts of a write function's body that both dialects share.
const (
	writeDeclare   = "\nDECLARE\n  wc$version bigint;\n  wc$now timestamptz;\n  wc$current bigint;\n  wc$lock bigint;\n  wc$row %s;\nBEGIN\n"
	writeTableLock = "    PERFORM pg_advisory_xact_lock_shared(wc$table_lock);\n"
	writeKeyLocks  = "FOREACH wc$lock IN ARRAY wc$key_locks LOOP\n      PERFORM pg_advisory_xact_lock(wc$lock);\n    END LOOP;\n"
	writeRaise     = "RAISE EXCEPTION '%s' USING ERRCODE = '%s';\n"
)

var (
	raiseMismatch = fmt.Sprintf(writeRaise, "the key is not at the expected version", writeMismatch)
	raiseNotFound = fmt.Sprintf(writeRaise, "the key does not exist", writeNotFound)
)

// in rewrites a statement's parameters as the function's variables (or
// expressions), and its clock as clock.
func (w writeBody) in(stmt, clock string, params ...string) string {
	pairs := []string{writeClock, clock}
	for i, v := range params {
		pairs = append(pairs, fmt.Sprintf("$%d", i+1), v)
	}
	return strings.NewReplacer(pairs...).Replace(stmt)
}

// into replaces the RETURNING clause of a write of a row with the columns
// the OUT parameters take, and stores them there.
func (w writeBody) into(stmt string) string {
	cols, outs := []string{"t." + w.p.version}, []string{"wc$out_version"}
	if w.returnsValue {
		cols, outs = append(cols, valueExpr(w.ns, "t.")), append(outs, "wc$out_value")
	}
	if w.stmts.Expiring {
		cols, outs = append(cols, "t."+w.p.exp), append(outs, "wc$out_expires")
	}
	return stmt[:strings.LastIndex(stmt, " RETURNING ")] + " RETURNING " + strings.Join(cols, ", ") + " INTO " + strings.Join(outs, ", ")
}

// deleteMiss is the end of a delete that removed no row: the absent key
// that may be absent answers version 0, else the key is absent or not at
// the expected version.
func (w writeBody) deleteMiss(clock string) string {
	var b strings.Builder
	b.WriteString("  IF wc$if_match IS NULL THEN\n    IF wc$absent_ok THEN\n      wc$out_version := 0;\n      RETURN;\n    END IF;\n    " + raiseNotFound + "  END IF;\n  ")
	b.WriteString(w.in(w.stmts.Version, clock, "wc$key") + " INTO wc$current;\n")
	b.WriteString("  IF NOT FOUND AND NOT wc$absent_ok THEN\n    " + raiseNotFound + "  END IF;\n  " + raiseMismatch)
	return b.String()
}

// updateFirst is the body on PostgreSQL. A write alone (no row keys)
// updates the key's row first, its version drawn in the statement: when
// the row was locked, PostgreSQL waits for its writer, reads the row
// again and evaluates the assignment again, and GREATEST keeps the version
// above the row's. Only when no live row was updated does it take the
// key's write lock and insert (ON CONFLICT, for a row that another writer
// inserted meanwhile), the version drawn under that lock; a delete takes
// the lock first. The first call of a transaction (row keys given) locks
// every key and row of the transaction first, as the statements do.
func (w writeBody) updateFirst() string {
	s, p := w.stmts, w.p
	nextval := "nextval(" + quoteLiteral(VersionSequence) + ")"
	// A write waits for its row inside its statement, so its statement
	// judges expiries by the clock, not by a time taken before the wait.
	clock := "clock_timestamp()"
	plain := strings.Replace(s.UpdateIfMatch, " AND "+p.atVersion("$3"), "", 1)
	var b strings.Builder
	fmt.Fprintf(&b, writeDeclare, p.keyType)
	b.WriteString("  IF wc$table_lock IS NULL THEN\n    wc$key_locks := NULL;\n  ELSE\n" + writeTableLock)
	fmt.Fprintf(&b, "    IF cardinality(wc$row_keys) > 0 THEN\n      %s      FOREACH wc$row IN ARRAY wc$row_keys LOOP\n        PERFORM 1 FROM %s AS t WHERE t.%s = wc$row FOR UPDATE;\n      END LOOP;\n      wc$key_locks := NULL;\n    END IF;\n  END IF;\n",
		strings.ReplaceAll(writeKeyLocks, "\n    ", "\n      "), p.table, p.key)
	if s.Expiring {
		// A row lock held by a transaction that then leaves the row as it
		// was does not make the waiting update judge the row's expiry
		// again: where rows expire, every write takes its key's lock
		// first, and a read made while it waits past an expiry agrees
		// with it.
		b.WriteString("  IF wc$key_locks IS NOT NULL THEN\n    " + writeKeyLocks + "    wc$key_locks := NULL;\n  END IF;\n")
	}
	b.WriteString("  IF NOT wc$delete THEN\n    IF wc$if_match IS NULL THEN\n      ")
	b.WriteString(w.into(w.in(plain, clock, "wc$key", "wc$value", "wc$if_match", nextval, "wc$ttl")) + ";\n    ELSE\n      ")
	b.WriteString(w.into(w.in(s.UpdateIfMatch, clock, "wc$key", "wc$value", "wc$if_match", nextval, "wc$ttl")) + ";\n    END IF;\n")
	b.WriteString("    IF FOUND THEN\n      RETURN;\n    END IF;\n    IF wc$if_match IS NOT NULL THEN\n      " + raiseMismatch + "    END IF;\n  END IF;\n")
	b.WriteString("  IF wc$key_locks IS NOT NULL THEN\n    " + writeKeyLocks + "  END IF;\n")
	b.WriteString("  IF NOT wc$delete THEN\n    ")
	b.WriteString(w.into(w.in(s.Upsert, clock, "wc$key", "wc$value", nextval, "wc$ttl")) + ";\n    RETURN;\n  END IF;\n")
	b.WriteString("  IF wc$if_match IS NULL THEN\n    ")
	b.WriteString(w.in(s.Delete, clock, "wc$key", nextval) + " INTO wc$out_version;\n  ELSE\n    ")
	b.WriteString(w.in(s.DeleteIfMatch, clock, "wc$key", "wc$if_match", nextval) + " INTO wc$out_version;\n  END IF;\n")
	b.WriteString("  IF FOUND THEN\n    RETURN;\n  END IF;\n")
	b.WriteString(w.deleteMiss(clock) + "END\n")
	return b.String()
}

// lockFirst is the body on Greenplum: the table's and the keys' locks,
// then the version, drawn on the coordinator and passed to the write as a
// variable, so that the write goes to the key's segment alone; the clock
// is taken once the locks are held.
func (w writeBody) lockFirst() string {
	s := w.stmts
	clock := "wc$now"
	var b strings.Builder
	fmt.Fprintf(&b, writeDeclare, w.p.keyType)
	b.WriteString("  IF wc$table_lock IS NOT NULL THEN\n" + writeTableLock + "    " + writeKeyLocks + "  END IF;\n")
	b.WriteString("  wc$version := nextval(" + quoteLiteral(VersionSequence) + ");\n  wc$now := clock_timestamp();\n")
	b.WriteString("  IF wc$delete THEN\n    IF wc$if_match IS NULL THEN\n      ")
	b.WriteString(w.in(s.Delete, clock, "wc$key", "wc$version") + " INTO wc$out_version;\n    ELSE\n      ")
	b.WriteString(w.in(s.DeleteIfMatch, clock, "wc$key", "wc$if_match", "wc$version") + " INTO wc$out_version;\n    END IF;\n")
	b.WriteString("  ELSIF wc$if_match IS NULL THEN\n    ")
	b.WriteString(w.into(w.in(s.Upsert, clock, "wc$key", "wc$value", "wc$version", "wc$ttl")) + ";\n  ELSE\n    ")
	b.WriteString(w.into(w.in(s.UpdateIfMatch, clock, "wc$key", "wc$value", "wc$if_match", "wc$version", "wc$ttl")) + ";\n  END IF;\n")
	b.WriteString("  IF FOUND THEN\n    RETURN;\n  END IF;\n  IF NOT wc$delete THEN\n    " + raiseMismatch + "  END IF;\n")
	b.WriteString(w.deleteMiss(clock) + "END\n")
	return b.String()
}

// dropWriteFunction leaves s without a write function: writes run their
// statements in a transaction of their own.
func (s *StatementSet) dropWriteFunction() {
	s.WriteFunction, s.WriteCall, s.FoldCall, s.writeSignature, s.writeBody = "", "", "", "", ""
	s.writeReturnsValue = false
}

// WriteSignature returns the signature of the write function, as
// to_regprocedure takes it; empty without one.
func (s StatementSet) WriteSignature() string { return s.writeSignature }

// useWriteFunction decides whether a table writes through its write
// function, as useLookupFunction decides for lookups, and leaves stmts
// without it when not.
func useWriteFunction(ctx context.Context, conn *pgxpool.Conn, ns *warmcache.Namespace, schema string, stmts *StatementSet, setting FunctionMode, rowLocks bool, log *slog.Logger) {
	if setting == FunctionOff || !ns.Writable {
		stmts.dropWriteFunction()
		return
	}
	stmts.setWriteFunction(ns, schema, rowLocks)
	if stmts.WriteCall == "" {
		return
	}
	fn := tableFunction{kind: "write", flag: "pg-write-function", without: "each write takes a transaction of its own",
		signature: stmts.writeSignature, body: stmts.writeBody, create: stmts.WriteFunction}
	if !fn.serves(ctx, conn, ns, setting == FunctionAuto, log) {
		stmts.dropWriteFunction()
	}
}

// byFunction reports whether writes go through t's write function: it
// exists, and no write only creates (IfAbsent, which runs its own purge of
// an expired row first).
func (t *table) byFunction(writes []warmcache.Write) bool {
	if t.stmts.WriteCall == "" || t.writeFunctionGone.Load() {
		return false
	}
	for _, w := range writes {
		if w.IfAbsent {
			return false
		}
	}
	return true
}

// writeFunctionArgs returns the arguments of a call of t's write function
// for w, with the locks to take (none for nil: a later write of a
// transaction whose first write took them all). With rowsFirst (the first
// write of a transaction of several) the call locks every key and row of
// locks before it writes; without, locks holds w's key alone, and the call
// locks it only where it needs it (see setWriteFunction).
func (s *Store) writeFunctionArgs(t *table, w warmcache.Write, locks []lock, rowsFirst bool) []any {
	value, ttl := t.writeValue(w)
	var tableLock *int64
	var keyLocks []int64
	var rowKeys any = keyArray(t.ns, nil)
	if locks != nil {
		h := lockHash(t.ns, nil)
		tableLock = &h
		keyLocks = make([]int64, len(locks))
		keys := make([]warmcache.Key, len(locks))
		for i, l := range locks {
			keyLocks[i], keys[i] = l.hash, l.key
		}
		if rowsFirst {
			rowKeys = keyArray(t.ns, keys)
		}
	}
	return []any{s.modes.Write, keyArg(t.ns, w.Key), value, w.IfMatch, w.Delete, ttl, w.AbsentOK, tableLock, keyLocks, rowKeys}
}

// writeValue returns the value and TTL arguments of w for t's write
// function: the value as valueArg gives it and the TTL in milliseconds, or
// nil (NULL) for a delete, and for a TTL without expiry.
func (t *table) writeValue(w warmcache.Write) (value any, ttl *int64) {
	if w.Delete {
		return nil, nil
	}
	if a := t.ttlArgs(w); len(a) == 1 {
		if ms, ok := a[0].(int64); ok {
			ttl = &ms
		}
	}
	return valueArg(t.ns, w.Value), ttl
}

// writeByFunction runs writes through t's write function: one call for
// one write, else BEGIN, one call per write and COMMIT in one round trip.
// gone reports that the function no longer exists, and then nothing was
// written.
func (s *Store) writeByFunction(ctx context.Context, t *table, writes []warmcache.Write) (entries []warmcache.Entry, gone bool, err error) {
	locks := keyLocks(t, writes)
	entries = make([]warmcache.Entry, len(writes))
	if len(writes) == 1 {
		rows, err := s.poolFor(t, writes[0].Key).Query(ctx, t.stmts.WriteCall, s.writeFunctionArgs(t, writes[0], locks, false)...)
		if err == nil {
			entries[0], err = readWriteResult(t, writes[0], rows)
		}
		if err != nil {
			return nil, s.writeFunctionMissing(ctx, t, err), writeResultError(writes[0], err)
		}
		return entries, false, nil
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, false, err
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	for i, w := range writes {
		var l []lock
		if i == 0 {
			l = locks
		}
		b.Queue(t.stmts.WriteCall, s.writeFunctionArgs(t, w, l, true)[1:]...) // a batch takes its exec mode from the pool
	}
	b.Queue("COMMIT")
	br := conn.SendBatch(ctx, b)
	err = func() error {
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return err
		}
		for i, w := range writes {
			rows, err := br.Query()
			if err == nil {
				entries[i], err = readWriteResult(t, w, rows)
			}
			if err != nil {
				return &writeAt{w: w, err: err}
			}
		}
		tag, err := br.Exec()
		if err == nil && tag.String() != "COMMIT" {
			err = fmt.Errorf("the transaction ended with %s", tag)
		}
		return err
	}()
	if err != nil {
		rollback(ctx, conn)
		var at *writeAt
		if errors.As(err, &at) {
			return nil, s.writeFunctionMissing(ctx, t, at.err), writeResultError(at.w, at.err)
		}
		return nil, false, err
	}
	return entries, false, nil
}

// writeAt is the error of one write of a transaction.
type writeAt struct {
	w   warmcache.Write
	err error
}

func (e *writeAt) Error() string { return e.err.Error() }
func (e *writeAt) Unwrap() error { return e.err }

// readWriteResult reads the row of one call of the write function (see
// writeResult).
func readWriteResult(t *table, w warmcache.Write, rows pgx.Rows) (warmcache.Entry, error) {
	r := newWriteResult(t)
	if _, err := pgx.ForEachRow(rows, r.dest, func() error { return nil }); err != nil {
		return warmcache.Entry{}, err
	}
	return r.entry(t, w), nil
}

// writeResult reads the OUT parameters of a call of t's write function:
// the version, the value where the function returns it and the expiry
// with Expiring (entryRow's order is value, version, expiry).
type writeResult struct {
	*entryRow
	dest []any
}

func newWriteResult(t *table) writeResult {
	r := t.entryRow()
	dest := slices.Clone(r.dest)
	if t.stmts.writeReturnsValue {
		dest[0], dest[1] = dest[1], dest[0]
	} else {
		dest = dest[1:]
	}
	return writeResult{r, dest}
}

// entry returns the row last scanned as w's outcome: the stored entry
// (with w's own value where the function returns none), or a delete's
// version, 0 for an absent key that may be absent.
func (r writeResult) entry(t *table, w warmcache.Write) warmcache.Entry {
	switch {
	case w.Delete && r.version == 0:
		return warmcache.Entry{}
	case w.Delete:
		return warmcache.Entry{Version: r.version}
	case !t.stmts.writeReturnsValue:
		r.value = valueArg(t.ns, w.Value).([]byte)
	}
	return r.entryRow.entry()
}

// writeResultError turns the write function's refusal of w into the
// core's error; other errors pass unchanged.
func writeResultError(w warmcache.Write, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case writeNotFound:
		return fmt.Errorf("%w: key %q", warmcache.ErrNotFound, w.Key.Text)
	case writeMismatch:
		if w.IfMatch == nil {
			return fmt.Errorf("%w: key %q", warmcache.ErrVersionMismatch, w.Key.Text)
		}
		return versionMismatch(w.Key, *w.IfMatch)
	}
	return err
}

// writeFunctionMissing reports whether err says that t's write function
// is gone, and then marks it so: writes go on in transactions of their own
// until a restart creates it again.
func (s *Store) writeFunctionMissing(ctx context.Context, t *table, err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.UndefinedFunction || !s.functionDropped(ctx, t.stmts.writeSignature) {
		return false
	}
	if t.writeFunctionGone.CompareAndSwap(false, true) {
		s.log.Warn("pgstore: the write function is gone; each write takes a transaction of its own until the service restarts and creates it again",
			"namespace", t.ns.Name, "function", t.stmts.writeSignature)
	}
	return true
}

// writeKey is the key a write's error names: the key of a write alone, none
// for a transaction (the error of one of its writes names its key).
func writeKey(writes []warmcache.Write) warmcache.Key {
	if len(writes) == 1 {
		return writes[0].Key
	}
	return warmcache.Key{}
}

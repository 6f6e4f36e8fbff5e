package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
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
// (PostgreSQL) it locks each key's row too; on Greenplum, where a row lock
// locks the whole table, the key's advisory lock alone orders its writers,
// as in the transaction of statements. Tables whose names contain a dollar
// sign, and append-optimized ones, get none.
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
	// inFunction rewrites a statement's parameters as the function's
	// variables, and its clock as the time taken once the locks are held.
	inFunction := func(stmt string, params ...string) string {
		pairs := []string{writeClock, "wc$now"}
		for i, v := range params {
			pairs = append(pairs, fmt.Sprintf("$%d", i+1), v)
		}
		return strings.NewReplacer(pairs...).Replace(stmt)
	}
	into := " INTO wc$out_value, wc$out_version"
	if s.Expiring {
		into += ", wc$out_expires"
	}
	var b strings.Builder
	b.WriteString("\nDECLARE\n  wc$version bigint;\n  wc$now timestamptz;\n  wc$current bigint;\n  wc$lock bigint;\n  wc$row " + keyType + ";\nBEGIN\n")
	b.WriteString("  IF wc$table_lock IS NOT NULL THEN\n")
	b.WriteString("    PERFORM pg_advisory_xact_lock_shared(wc$table_lock);\n")
	b.WriteString("    FOREACH wc$lock IN ARRAY wc$key_locks LOOP\n      PERFORM pg_advisory_xact_lock(wc$lock);\n    END LOOP;\n")
	if rowLocks {
		fmt.Fprintf(&b, "    FOREACH wc$row IN ARRAY wc$row_keys LOOP\n      PERFORM 1 FROM %s AS t WHERE t.%s = wc$row FOR UPDATE;\n    END LOOP;\n", p.table, p.key)
	}
	b.WriteString("  END IF;\n")
	b.WriteString("  wc$version := nextval(" + quoteLiteral(VersionSequence) + ");\n  wc$now := clock_timestamp();\n")
	b.WriteString("  IF wc$delete THEN\n    IF wc$if_match IS NULL THEN\n      ")
	b.WriteString(inFunction(s.Delete, "wc$key", "wc$version") + " INTO wc$out_version;\n    ELSE\n      ")
	b.WriteString(inFunction(s.DeleteIfMatch, "wc$key", "wc$if_match", "wc$version") + " INTO wc$out_version;\n    END IF;\n")
	b.WriteString("  ELSIF wc$if_match IS NULL THEN\n    ")
	b.WriteString(inFunction(s.Upsert, "wc$key", "wc$value", "wc$version", "wc$ttl") + into + ";\n  ELSE\n    ")
	b.WriteString(inFunction(s.UpdateIfMatch, "wc$key", "wc$value", "wc$if_match", "wc$version", "wc$ttl") + into + ";\n  END IF;\n")
	b.WriteString("  IF FOUND THEN\n    RETURN NEXT;\n    RETURN;\n  END IF;\n")
	b.WriteString("  IF NOT wc$delete THEN\n    RAISE EXCEPTION 'the key is not at the expected version' USING ERRCODE = '" + writeMismatch + "';\n  END IF;\n")
	b.WriteString("  IF wc$if_match IS NULL THEN\n    IF wc$absent_ok THEN\n      RETURN;\n    END IF;\n")
	b.WriteString("    RAISE EXCEPTION 'the key does not exist' USING ERRCODE = '" + writeNotFound + "';\n  END IF;\n  ")
	b.WriteString(inFunction(s.Version, "wc$key") + " INTO wc$current;\n")
	b.WriteString("  IF NOT FOUND AND NOT wc$absent_ok THEN\n    RAISE EXCEPTION 'the key does not exist' USING ERRCODE = '" + writeNotFound + "';\n  END IF;\n")
	b.WriteString("  RAISE EXCEPTION 'the key is not at the expected version' USING ERRCODE = '" + writeMismatch + "';\nEND\n")
	body := b.String()

	args := fmt.Sprintf("wc$key %s, wc$value %s, wc$if_match bigint, wc$delete boolean, wc$ttl bigint, wc$absent_ok boolean, wc$table_lock bigint, wc$key_locks bigint[], wc$row_keys %s[]",
		keyType, valueType, keyType)
	columns := "wc$out_value " + valueType + ", wc$out_version bigint"
	if s.Expiring {
		columns += ", wc$out_expires timestamptz"
	}
	definition := fmt.Sprintf("(%s)\nRETURNS TABLE (%s)\nLANGUAGE plpgsql VOLATILE AS %s%s%s", args, columns, writeFunctionQuote, body, writeFunctionQuote)
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
}

// dropWriteFunction leaves s without a write function: writes run their
// statements in a transaction of their own.
func (s *StatementSet) dropWriteFunction() {
	s.WriteFunction, s.WriteCall, s.writeSignature, s.writeBody = "", "", "", ""
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
// transaction whose first write took them all).
func (s *Store) writeFunctionArgs(t *table, w warmcache.Write, locks []lock) []any {
	var value, ttl any // NULL for a delete
	if !w.Delete {
		value = valueArg(t.ns, w.Value)
		if a := t.ttlArgs(w); len(a) == 1 {
			ttl = a[0]
		}
	}
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
		rowKeys = keyArray(t.ns, keys)
	}
	return []any{s.modes.Write, keyArg(t.ns, w.Key), value, w.IfMatch, w.Delete, ttl, w.AbsentOK, tableLock, keyLocks, rowKeys}
}

// writeByFunction runs writes through t's write function: one call for
// one write, else BEGIN, one call per write and COMMIT in one round trip.
// gone reports that the function no longer exists, and then nothing was
// written.
func (s *Store) writeByFunction(ctx context.Context, t *table, writes []warmcache.Write) (entries []warmcache.Entry, gone bool, err error) {
	locks := keyLocks(t, writes)
	entries = make([]warmcache.Entry, len(writes))
	if len(writes) == 1 {
		rows, err := s.pool.Query(ctx, t.stmts.WriteCall, s.writeFunctionArgs(t, writes[0], locks)...)
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
		b.Queue(t.stmts.WriteCall, s.writeFunctionArgs(t, w, l)[1:]...) // a batch takes its exec mode from the pool
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

// readWriteResult reads the row of one call of the write function: the
// stored entry, a delete's version, or no row for an absent key that may
// be absent.
func readWriteResult(t *table, w warmcache.Write, rows pgx.Rows) (warmcache.Entry, error) {
	r := t.entryRow()
	found := false
	_, err := pgx.ForEachRow(rows, r.dest, func() error { found = true; return nil })
	if err != nil || !found {
		return warmcache.Entry{}, err
	}
	if w.Delete {
		return warmcache.Entry{Version: r.version}, nil
	}
	return r.entry(), nil
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

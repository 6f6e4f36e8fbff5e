package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// A lookup function is a PL/pgSQL function whose body is a table's
// LookupPositions. PostgreSQL plans a statement sent as the unnamed
// statement every time it runs, and through PgBouncer in transaction
// pooling every statement is sent so (named ones do not survive the next
// transaction). Planning the join of the key array with a hash-partitioned
// table costs about as much as running it. A PL/pgSQL function keeps the
// plan of its query in each server session, whichever client PgBouncer
// gives the session to, so the store plans only the call. What that
// gains, measured with pgbench through PgBouncer and end to end:
// docs/warehouse.md#the-lookup-function.

// lookupFunctionPrefix begins the name of every lookup function; the rest
// is a digest of its definition, so a namespace whose SQL changes gets a
// new function, and instances with the same SQL share one.
const lookupFunctionPrefix = "warmcache_lookup_"

// lookupFunctionQuote is the dollar quote around a function body; a
// statement that contains it (through a quoted column name) gets no
// function.
const lookupFunctionQuote = "$warmcache_lookup$"

// setLookupFunction fills in the lookup function of s from
// s.LookupPositions, in schema (unqualified when empty).
func (s *StatementSet) setLookupFunction(ns *warmcache.Namespace, schema string) {
	s.dropLookupFunction()
	if s.LookupPositions == "" || strings.Contains(s.LookupPositions, lookupFunctionQuote) {
		return
	}
	keyArray := string(ns.KeyType) + "[]"
	// The body references every column through its table's alias, so no
	// output column can be taken for one, and it needs no
	// #variable_conflict option, with which the function was slower
	// (docs/warehouse.md#the-lookup-function).
	body := "\nBEGIN\nRETURN QUERY " + s.LookupPositions + ";\nEND\n"
	// Everything after the name: a function whose definition changes in
	// any way gets a new name, since Open creates only missing ones.
	// The value column is text (JSON) or, for the bytes layout, bytea.
	valueType := "text"
	if ns.Layout == warmcache.LayoutBytes {
		valueType = "bytea"
	}
	columns, selected := "warmcache_position bigint, warmcache_value "+valueType+", warmcache_version bigint", "warmcache_position, warmcache_value, warmcache_version"
	if s.Expiring {
		columns += ", warmcache_expires timestamptz"
		selected += ", warmcache_expires"
	}
	definition := fmt.Sprintf("(%s)\nRETURNS TABLE (%s)\nLANGUAGE plpgsql STABLE AS %s%s%s",
		keyArray, columns, lookupFunctionQuote, body, lookupFunctionQuote)
	digest := sha256.Sum256([]byte(definition))
	name := pgx.Identifier{lookupFunctionPrefix + hex.EncodeToString(digest[:8])}
	if schema != "" {
		name = pgx.Identifier{schema, name[0]}
	}
	fn := name.Sanitize()
	s.lookupSignature = fn + "(" + keyArray + ")"
	s.lookupBody = body
	s.LookupFunction = "CREATE OR REPLACE FUNCTION " + fn + definition
	s.LookupCall = fmt.Sprintf("SELECT %s FROM %s($1::%s)", selected, fn, keyArray)
}

// dropLookupFunction leaves s without a lookup function: keys are read
// with LookupPositions.
func (s *StatementSet) dropLookupFunction() {
	s.LookupFunction, s.LookupCall, s.lookupSignature, s.lookupBody = "", "", "", ""
}

// LookupSignature returns the signature of the lookup function, as
// to_regprocedure takes it; empty without one.
func (s StatementSet) LookupSignature() string { return s.lookupSignature }

// errLookupFunctionMissing says that the lookup function does not exist
// and may not be created.
var errLookupFunctionMissing = errors.New("the function does not exist")

// checkLookupFunction reports whether the lookup function of stmts exists,
// is the one the store would create, and may be run by the session's role.
// A function of that name with another definition (another body, SECURITY
// DEFINER, its own settings) is refused rather than run or replaced: the
// store runs only the code it would have written.
func checkLookupFunction(ctx context.Context, conn *pgxpool.Conn, stmts StatementSet) (exists bool, err error) {
	return checkFunction(ctx, conn, stmts.lookupSignature, stmts.lookupBody)
}

// checkFunction reports whether the function of signature exists with
// body, in PL/pgSQL, without settings of its own or SECURITY DEFINER, and
// may be run by the session's role, as checkLookupFunction describes.
func checkFunction(ctx context.Context, conn *pgxpool.Conn, signature, body string) (exists bool, err error) {
	var same, executable bool
	err = conn.QueryRow(ctx, `SELECT p.prosrc = $2 AND l.lanname = 'plpgsql' AND NOT p.prosecdef AND p.proconfig IS NULL,
has_function_privilege(p.oid, 'EXECUTE')
FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang WHERE p.oid = to_regprocedure($1)`,
		pgx.QueryExecModeSimpleProtocol, signature, body).Scan(&same, &executable)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, err
	case !same:
		return true, errors.New("a function of that name exists with another definition; drop it to have the service create its own")
	case !executable:
		return true, errors.New("the service's role may not execute it; grant EXECUTE on it")
	}
	return true, nil
}

// ensureFunction makes sure the function of signature and body can serve,
// creating it with the statement createSQL when it is missing and create
// allows. Instances that start together may race to create it: one that
// fails finds it made by another.
func ensureFunction(ctx context.Context, conn *pgxpool.Conn, signature, body, createSQL string, create bool) error {
	if exists, err := checkFunction(ctx, conn, signature, body); exists || err != nil {
		return err
	}
	if !create {
		return errLookupFunctionMissing
	}
	_, err := conn.Exec(ctx, createSQL, pgx.QueryExecModeSimpleProtocol)
	if err == nil {
		return nil
	}
	if exists, again := checkFunction(ctx, conn, signature, body); exists {
		return again
	}
	return err
}

// useLookupFunction decides whether a table reads through its lookup
// function, in the table's schema: not on Greenplum (whose statements have
// no LookupPositions), nor with the setting off, nor when the function
// cannot serve (see tableFunction.serves), which is logged. It leaves
// stmts without the function when not.
func useLookupFunction(ctx context.Context, conn *pgxpool.Conn, ns *warmcache.Namespace, schema string, stmts *StatementSet, setting FunctionMode, log *slog.Logger) {
	if setting == FunctionOff {
		stmts.dropLookupFunction()
		return
	}
	stmts.setLookupFunction(ns, schema)
	if stmts.LookupCall == "" {
		return
	}
	fn := tableFunction{kind: "lookup", flag: "pg-lookup-function", without: "batched lookups are planned at every query",
		signature: stmts.lookupSignature, body: stmts.lookupBody, create: stmts.LookupFunction}
	if !fn.serves(ctx, conn, ns, setting == FunctionAuto, log) {
		stmts.dropLookupFunction()
	}
}

// lookupFunctionGone reports whether the lookup function of t no longer
// exists, after a call failed with undefined_function (which a statement
// inside it may also raise).
func (s *Store) lookupFunctionGone(ctx context.Context, t *table) bool {
	return s.functionDropped(ctx, t.stmts.lookupSignature)
}

// functionDropped reports whether the function of signature no longer exists.
func (s *Store) functionDropped(ctx context.Context, signature string) bool {
	var oid *uint32
	err := s.pool.QueryRow(ctx, "SELECT to_regprocedure($1)::oid", pgx.QueryExecModeSimpleProtocol, signature).Scan(&oid)
	return err == nil && oid == nil
}

// tableFunction is a PL/pgSQL function of a table that its statements may
// go through (the lookup or the write function): its kind, the flag that
// turns it off, what the table does without it, and its signature, body
// and CREATE statement.
type tableFunction struct {
	kind, flag, without     string
	signature, body, create string
}

// serves reports whether fn can serve ns's table, creating it when it is
// missing and create allows (see ensureFunction); when it cannot, it logs
// why and what the table does without it.
func (fn tableFunction) serves(ctx context.Context, conn *pgxpool.Conn, ns *warmcache.Namespace, create bool, log *slog.Logger) bool {
	err := ensureFunction(ctx, conn, fn.signature, fn.body, fn.create, create)
	switch {
	case err == nil:
		return true
	case errors.Is(err, errLookupFunctionMissing):
		log.Info("pgstore: no "+fn.kind+" function; "+fn.without+" (serve creates it)",
			"namespace", ns.Name, "function", fn.signature)
	default:
		log.Warn("pgstore: "+fn.without+": the "+fn.kind+" function cannot serve; grant CREATE on the table's schema, or set --"+fn.flag+"=off",
			"namespace", ns.Name, "table", ns.Table, "function", fn.signature, "error", err)
	}
	return false
}

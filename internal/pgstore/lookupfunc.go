package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
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
// gives the session to, so the store plans only the call. Measured with
// pgbench through PgBouncer on the 1M-row, 8-partition benchmark table (32
// clients, 2 cores): 16 keys per statement read about 16k keys/s as the
// join and 30–35k keys/s through the function; one key, 6.8k/s as the
// single-key Lookup and 8.5k/s through the function. See docs/warehouse.md,
// "The lookup function".

// lookupFunctionPrefix begins the name of every lookup function; the rest
// is a digest of its definition, so a namespace whose SQL changes gets a
// new function, and instances with the same SQL share one.
const lookupFunctionPrefix = "warmcache_lookup_"

// lookupFunctionQuote is the dollar quote around a function body; a
// statement that contains it (through a quoted column name) gets no
// function.
const lookupFunctionQuote = "$warmcache_lookup$"

// LookupFunction says whether a Store reads keys on PostgreSQL through a
// lookup function of each table, created when missing (see
// Options.LookupFunction).
type LookupFunction string

// The lookup function settings.
const (
	LookupFunctionAuto LookupFunction = "auto"
	LookupFunctionOff  LookupFunction = "off"
)

// AllLookupFunctions returns every lookup function setting, auto first.
func AllLookupFunctions() []LookupFunction {
	return []LookupFunction{LookupFunctionAuto, LookupFunctionOff}
}

// ParseLookupFunction returns the setting called s, or an error that lists
// them.
func ParseLookupFunction(s string) (LookupFunction, error) {
	if f := LookupFunction(s); slices.Contains(AllLookupFunctions(), f) {
		return f, nil
	}
	return "", fmt.Errorf("lookup function %q is not auto or off", s)
}

// setLookupFunction fills in s.LookupFunction, s.LookupCall and
// s.lookupSignature from s.LookupPositions, for a table in the schema of
// ns.Table (or the first schema of the search path when it names none).
func (s *StatementSet) setLookupFunction(ns *warmcache.Namespace) {
	if s.LookupPositions == "" || strings.Contains(s.LookupPositions, lookupFunctionQuote) {
		return
	}
	keyArray := string(ns.KeyType) + "[]"
	// Everything after the name: a function whose definition changes in
	// any way gets a new name, since Open creates only missing ones. The
	// body references every column through its table's alias, so no
	// output column can be taken for one, and it needs no
	// #variable_conflict option, with which the function measured half as
	// fast.
	definition := fmt.Sprintf(`(%s)
RETURNS TABLE (warmcache_position bigint, warmcache_value text, warmcache_version bigint)
LANGUAGE plpgsql STABLE AS %s
BEGIN
RETURN QUERY %s;
END
%s`, keyArray, lookupFunctionQuote, s.LookupPositions, lookupFunctionQuote)
	digest := sha256.Sum256([]byte(definition))
	name := pgx.Identifier{lookupFunctionPrefix + hex.EncodeToString(digest[:8])}
	if schema, _, ok := strings.Cut(ns.Table, "."); ok {
		name = pgx.Identifier{schema, name[0]}
	}
	fn := name.Sanitize()
	s.lookupSignature = fn + "(" + keyArray + ")"
	s.LookupFunction = "CREATE OR REPLACE FUNCTION " + fn + definition
	s.LookupCall = fmt.Sprintf("SELECT warmcache_position, warmcache_value, warmcache_version FROM %s($1::%s)", fn, keyArray)
}

// dropLookupFunction leaves s without a lookup function: keys are read
// with LookupPositions.
func (s *StatementSet) dropLookupFunction() {
	s.LookupFunction, s.LookupCall, s.lookupSignature = "", "", ""
}

// ensureLookupFunction creates the lookup function of stmts unless it
// exists. Instances that start together may race to create it: one that
// fails finds it made by another.
func ensureLookupFunction(ctx context.Context, conn *pgxpool.Conn, stmts StatementSet) error {
	exists := func() (bool, error) {
		var oid *uint32
		err := conn.QueryRow(ctx, "SELECT to_regprocedure($1)::oid", pgx.QueryExecModeSimpleProtocol, stmts.lookupSignature).Scan(&oid)
		return oid != nil, err
	}
	if ok, err := exists(); err != nil || ok {
		return err
	}
	_, err := conn.Exec(ctx, stmts.LookupFunction, pgx.QueryExecModeSimpleProtocol)
	if err == nil {
		return nil
	}
	if ok, again := exists(); again == nil && ok {
		return nil
	}
	return err
}

// useLookupFunction decides whether t reads through its lookup function:
// not on Greenplum (which reads batches with LookupMany), nor with the
// setting off, nor when the function cannot be created (such as without
// the CREATE privilege on the schema), which is logged. It leaves stmts
// without the function when not.
func useLookupFunction(ctx context.Context, conn *pgxpool.Conn, ns *warmcache.Namespace, stmts *StatementSet, setting LookupFunction, log *slog.Logger) {
	if stmts.LookupCall == "" {
		return
	}
	if setting == LookupFunctionOff || stmts.LookupPositions == "" {
		stmts.dropLookupFunction()
		return
	}
	if err := ensureLookupFunction(ctx, conn, *stmts); err != nil {
		log.Warn("pgstore: batched lookups are planned at every query: the lookup function could not be created; grant CREATE on the table's schema, or set --pg-lookup-function=off",
			"namespace", ns.Name, "table", ns.Table, "function", stmts.lookupSignature, "error", err)
		stmts.dropLookupFunction()
	}
}

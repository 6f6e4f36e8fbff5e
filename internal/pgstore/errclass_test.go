package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// Every error is sorted into one class: the client's data, the warehouse
// failing, the caller going away, or a bug of the service's own SQL.
func TestClassifyError(t *testing.T) {
	pg := func(code string) error {
		return fmt.Errorf("pgstore: put: %w", &pgconn.PgError{Code: code, Message: "m"})
	}
	canceled := func(routine, message string) error {
		return fmt.Errorf("pgstore: load: %w", &pgconn.PgError{Code: pgerrcode.QueryCanceled, Routine: routine, Message: message})
	}
	copyFailed := canceled("CopyGetData", `COPY from stdin failed: unable to encode "abc" into binary format for int8 (OID 20): cannot find encode plan`)
	for _, tc := range []struct {
		name string
		err  error
		want warmcache.Class
	}{
		{"check violation", pg(pgerrcode.CheckViolation), warmcache.ClassClient},
		{"not null", pg(pgerrcode.NotNullViolation), warmcache.ClassClient},
		{"unique violation", pg(pgerrcode.UniqueViolation), warmcache.ClassClient},
		{"invalid text representation", pg(pgerrcode.InvalidTextRepresentation), warmcache.ClassClient},
		{"NUL in jsonb", pg(pgerrcode.UntranslatableCharacter), warmcache.ClassClient},
		{"invalid UTF-8", pg(pgerrcode.CharacterNotInRepertoire), warmcache.ClassClient},
		{"numeric overflow", pg(pgerrcode.NumericValueOutOfRange), warmcache.ClassClient},
		{"index row too large", pg(pgerrcode.ProgramLimitExceeded), warmcache.ClassClient},
		{"deadlock", pg(pgerrcode.DeadlockDetected), warmcache.ClassConflict},
		{"serialization failure", pg(pgerrcode.SerializationFailure), warmcache.ClassConflict},
		{"feature not supported", pg(pgerrcode.FeatureNotSupported), warmcache.ClassBug},
		{"syntax error", pg(pgerrcode.SyntaxError), warmcache.ClassBug},
		{"undefined table", pg(pgerrcode.UndefinedTable), warmcache.ClassBug},
		{"undefined column", pg(pgerrcode.UndefinedColumn), warmcache.ClassBug},
		{"undefined object", pg(pgerrcode.UndefinedObject), warmcache.ClassBug},
		{"internal error", pg(pgerrcode.InternalError), warmcache.ClassBug},
		{"too many connections", pg(pgerrcode.TooManyConnections), warmcache.ClassUnavailable},
		{"disk full", pg(pgerrcode.DiskFull), warmcache.ClassUnavailable},
		{"admin shutdown", pg(pgerrcode.AdminShutdown), warmcache.ClassUnavailable},
		{"cannot connect now", pg(pgerrcode.CannotConnectNow), warmcache.ClassUnavailable},
		{"connection failure", pg(pgerrcode.ConnectionFailure), warmcache.ClassUnavailable},
		{"statement timeout", pg(pgerrcode.QueryCanceled), warmcache.ClassUnavailable},
		{"statement timeout (routine)", canceled("ProcessInterrupts", "canceling statement due to statement timeout"), warmcache.ClassUnavailable},
		{"cancel request", canceled("ProcessInterrupts", "canceling statement due to user request"), warmcache.ClassUnavailable},
		{"COPY the client ended: a value it could not encode", copyFailed, warmcache.ClassBug},
		{"COPY the client ended, without a routine", canceled("", "COPY from stdin failed: x"), warmcache.ClassBug},
		{"COPY the client ended for the client's lines", errors.Join(copyFailed, fmt.Errorf("%w: line 3", warmcache.ErrInvalidValue)), warmcache.ClassClient},
		{"COPY the client ended at its deadline", errors.Join(copyFailed, context.DeadlineExceeded), warmcache.ClassUnavailable},
		{"lock timeout", pg(pgerrcode.LockNotAvailable), warmcache.ClassUnavailable},
		{"io error", pg(pgerrcode.IOError), warmcache.ClassUnavailable},
		{"greenplum segment unreachable (a code within class 58)", pg("58M01"), warmcache.ClassUnavailable},
		{"a data exception pgerrcode does not name", pg("22ZZZ"), warmcache.ClassClient},
		{"a vendor code of class 08", pg("08M01"), warmcache.ClassUnavailable},
		{"connection cut", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), warmcache.ClassUnavailable},
		{"deadline", fmt.Errorf("acquire: %w", context.DeadlineExceeded), warmcache.ClassUnavailable},
		{"cancelled", fmt.Errorf("acquire: %w", context.Canceled), warmcache.ClassCanceled},
		{"core client error", fmt.Errorf("%w: x", warmcache.ErrVersionMismatch), warmcache.ClassClient},
		{"nil", nil, warmcache.ClassNone},
	} {
		if got := pgstore.ClassifyError(tc.err); got != tc.want {
			t.Errorf("%s: class %d, want %d", tc.name, got, tc.want)
		}
	}
	if errors.Is(pgstore.ClassifyErrorWrap(pg(pgerrcode.FeatureNotSupported)), warmcache.ErrUnavailable) {
		t.Error("feature_not_supported wrapped as unavailable: it is a bug (500)")
	}
	if !errors.Is(pgstore.ClassifyErrorWrap(pg(pgerrcode.CheckViolation)), warmcache.ErrInvalidValue) {
		t.Error("a check violation is not wrapped as an invalid value")
	}
	if !errors.Is(pgstore.ClassifyErrorWrap(pg(pgerrcode.AdminShutdown)), warmcache.ErrUnavailable) {
		t.Error("admin shutdown is not wrapped as unavailable")
	}
	if errors.Is(pgstore.ClassifyErrorWrap(copyFailed), warmcache.ErrUnavailable) {
		t.Error("a COPY the client ended is wrapped as unavailable: it would count against the circuit breaker")
	}
	clientLines := errors.Join(copyFailed, fmt.Errorf("%w: line 3", warmcache.ErrInvalidValue))
	if got := pgstore.ClassifyErrorWrap(clientLines); got != clientLines {
		t.Errorf("a COPY ended for the client's lines is wrapped again as %v, want it unchanged", got)
	}
}

// The warehouse answers 57014 both to a statement timeout and to a COPY
// that the client ended; on both dialects, the first is the warehouse
// running out of time and the second never is.
func TestClassifyQueryCanceled(t *testing.T) {
	for _, w := range testenv.Warehouses() {
		t.Run(w.Name, func(t *testing.T) {
			dsn := w.NewDatabase(t)
			withConn(t, dsn, func(ctx context.Context, conn *pgx.Conn) {
				_, err := conn.Exec(ctx, "SET statement_timeout = 10; SELECT pg_sleep(5)", pgx.QueryExecModeSimpleProtocol)
				if got := pgstore.ClassifyError(err); !isQueryCanceled(err) || got != warmcache.ClassUnavailable {
					t.Errorf("statement timeout %v: class %d, want 57014 and %d (unavailable)", err, got, warmcache.ClassUnavailable)
				}
			})
			// The COPY runs on a session of its own: on Greenplum a segment
			// may still hold the timeout after a RESET on the coordinator.
			withConn(t, dsn, func(ctx context.Context, conn *pgx.Conn) {
				if _, err := conn.Exec(ctx, "CREATE TEMPORARY TABLE copied (key bigint)", pgx.QueryExecModeSimpleProtocol); err != nil {
					t.Fatal(err)
				}
				_, err := conn.CopyFrom(ctx, pgx.Identifier{"copied"}, []string{"key"}, pgx.CopyFromRows([][]any{{"abc"}}))
				if got := pgstore.ClassifyError(err); !isQueryCanceled(err) || got != warmcache.ClassBug {
					t.Errorf("COPY of a value pgx cannot encode %v: class %d, want 57014 and %d (a bug)", err, got, warmcache.ClassBug)
				}
				if errors.Is(pgstore.ClassifyErrorWrap(err), warmcache.ErrUnavailable) {
					t.Errorf("COPY of a value pgx cannot encode %v is wrapped as unavailable", err)
				}
			})
		})
	}
}

// isQueryCanceled reports whether err carries SQLSTATE 57014.
func isQueryCanceled(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.QueryCanceled
}

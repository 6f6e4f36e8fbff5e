package pgstore

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// ClassifyError sorts an error of the warehouse into the core's classes
// (see warmcache.Class) by its SQLSTATE (named with pgerrcode) or, for
// errors without one, by the driver's error type. Errors already sorted
// (wrapping a core sentinel or a context error) keep the class that
// warmcache.Classify gives them. A COPY that the service ended itself (see
// copyAbandoned) takes the class of its reason: the core sentinel or
// context error the error also wraps, or else a bug.
func ClassifyError(err error) warmcache.Class {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if copyAbandoned(pgErr) {
			return warmcache.Classify(err)
		}
		return classifyCode(pgErr.Code)
	}
	if class := warmcache.Classify(err); class != warmcache.ClassBug {
		return class
	}
	if pgconn.Timeout(err) {
		return warmcache.ClassUnavailable
	}
	var scanErr pgx.ScanArgError
	var scanErrP *pgx.ScanArgError
	if errors.As(err, &scanErr) || errors.As(err, &scanErrP) {
		return warmcache.ClassBug
	}
	// Without a SQLSTATE the error comes from the connection: a dial that
	// failed, a socket that closed, a pool that is closed.
	return warmcache.ClassUnavailable
}

// classifyCode sorts a SQLSTATE by its class, the first two characters,
// so that codes a server adds within a class (Greenplum's 58M01 when a
// segment cannot be reached) sort with their class. The classes are named
// by the pgerrcode constant of the class's generic code.
func classifyCode(code string) warmcache.Class {
	switch code {
	case pgerrcode.AdminShutdown, pgerrcode.CrashShutdown, pgerrcode.CannotConnectNow,
		pgerrcode.DatabaseDropped, pgerrcode.IdleSessionTimeout,
		pgerrcode.QueryCanceled,      // 57014: the statement timeout or a cancel request
		pgerrcode.LockNotAvailable,   // 55P03: the lock timeout
		pgerrcode.InvalidCatalogName: // 3D000: the database is gone
		return warmcache.ClassUnavailable
	}
	switch sqlClass(code) {
	case sqlClass(pgerrcode.DataException), // 22: wrong type, bad JSON text, NUL, overflow
		sqlClass(pgerrcode.IntegrityConstraintViolation), // 23: not null, check, unique, foreign key
		sqlClass(pgerrcode.ProgramLimitExceeded):         // 54: a value too large for an index row
		return warmcache.ClassClient
	case sqlClass(pgerrcode.TransactionRollback): // 40: serialization failure, deadlock
		return warmcache.ClassConflict
	case sqlClass(pgerrcode.ConnectionException), // 08
		sqlClass(pgerrcode.InsufficientResources),             // 53: too many connections, out of memory, disk full
		sqlClass(pgerrcode.SystemError),                       // 58: I/O error, Greenplum segments unreachable
		sqlClass(pgerrcode.InvalidAuthorizationSpecification): // 28: the service's credentials are refused
		return warmcache.ClassUnavailable
	}
	// 0A (feature not supported), 42 (syntax error, undefined table or
	// column), 25 (transaction state), XX (internal), the rest of 55 and 57,
	// and the other classes come from the service's own statements or
	// schema: a bug.
	return warmcache.ClassBug
}

// copyAbandoned reports whether pgErr is the server's answer to a COPY FROM
// STDIN that the client ended with CopyFail. PostgreSQL and Greenplum give
// it SQLSTATE 57014, query_canceled, the code of the statement timeout the
// service sets and of a cancel request, but nothing timed out and nobody
// asked the server to stop: the client gave up its own COPY, for the
// reason its message carries ("COPY from stdin failed: <reason>"). pgx
// ends a COPY so when a source's Err reports an error, or when it cannot
// encode a value in the binary format of the column type it described
// (such as a text key for a bigint column), which is the client's input or
// the service's own bug, never the warehouse failing. The server raises it
// in CopyGetData, the routine that reads COPY data from the client (also
// on Greenplum 7); a server that does not report the routine is recognised
// by the message's English text.
func copyAbandoned(pgErr *pgconn.PgError) bool {
	if pgErr.Code != pgerrcode.QueryCanceled {
		return false
	}
	if pgErr.Routine != "" {
		return pgErr.Routine == "CopyGetData"
	}
	return strings.HasPrefix(pgErr.Message, "COPY from stdin failed")
}

// sqlClass returns the class of a SQLSTATE: its first two characters.
func sqlClass(code string) string {
	if len(code) < 2 {
		return code
	}
	return code[:2]
}

// classify wraps err with the core sentinel of its class, once: an error
// that already wraps a sentinel passes unchanged. Client errors carry the
// server's message, written for the client; an unavailable warehouse keeps
// the driver's error for the log only; a bug and a cancellation pass as
// they are.
func classify(err error) error {
	class := ClassifyError(err)
	if class == warmcache.ClassNone || class == warmcache.ClassCanceled || class == warmcache.ClassBug {
		return err
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || copyAbandoned(pgErr) {
		// The class comes from the error's chain, not from a SQLSTATE.
		if class == warmcache.ClassUnavailable && !errors.Is(err, warmcache.ErrUnavailable) {
			return fmt.Errorf("%w: %w", warmcache.ErrUnavailable, err)
		}
		return err // already wraps a core sentinel
	}
	switch class {
	case warmcache.ClassClient:
		switch {
		case pgErr.Code == pgerrcode.NotNullViolation && pgErr.ColumnName != "":
			return fmt.Errorf("%w: field %q is required", warmcache.ErrInvalidValue, pgErr.ColumnName)
		case sqlClass(pgErr.Code) == sqlClass(pgerrcode.ProgramLimitExceeded):
			return fmt.Errorf("%w: %s", warmcache.ErrTooLarge, pgErr.Message)
		}
		return fmt.Errorf("%w: %s", warmcache.ErrInvalidValue, pgErr.Message)
	case warmcache.ClassConflict:
		return fmt.Errorf("%w: %s", warmcache.ErrConflict, pgErr.Message)
	}
	return fmt.Errorf("%w: %w", warmcache.ErrUnavailable, err)
}

// isRequestError reports whether err is an answer about the request rather
// than a failure of the warehouse.
func isRequestError(err error) bool {
	return warmcache.Classify(err) == warmcache.ClassClient
}

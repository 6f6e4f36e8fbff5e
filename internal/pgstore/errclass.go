package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// Class is what an error of the warehouse says about whose fault it is.
type Class int

// The classes of ClassifyError.
const (
	// ClassNone is a nil error.
	ClassNone Class = iota
	// ClassClient is a request the warehouse rejected for its data: a
	// value of the wrong type, a violated constraint, text that is not
	// valid in the server's encoding, a number out of range. The client
	// gets a 4xx; the warehouse answered, so the circuit breaker counts a
	// success.
	ClassClient
	// ClassConflict is a transaction the warehouse rolled back for a
	// concurrent one (serialization failure, deadlock). Retrying may
	// succeed; the warehouse is healthy.
	ClassConflict
	// ClassUnavailable is the warehouse failing: a connection that cannot
	// be made or broke, no resources (connections, memory, disk), an
	// administrator or crash shutdown, a statement or lock timeout. Only
	// this class opens the circuit breaker.
	ClassUnavailable
	// ClassCanceled is the caller going away. It says nothing about the
	// warehouse.
	ClassCanceled
	// ClassBug is an error of the service's own SQL or of an unexpected
	// answer (feature not supported, syntax error, undefined object, a row
	// that does not scan): a 500, never a 503, and no breaker failure.
	ClassBug
)

// ClassifyError sorts err into exactly one Class by its SQLSTATE (named
// with pgerrcode) or, for errors without one, by the driver's error type.
// Errors already sorted by the core (wrapping one of its sentinels) keep
// the class the sentinel says.
func ClassifyError(err error) Class {
	if err == nil {
		return ClassNone
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return classifyCode(pgErr.Code)
	}
	switch {
	case errors.Is(err, warmcache.ErrUnavailable):
		return ClassUnavailable
	case errors.Is(err, warmcache.ErrConflict):
		return ClassConflict
	case errors.Is(err, warmcache.ErrInvalidValue), errors.Is(err, warmcache.ErrInvalidKey),
		errors.Is(err, warmcache.ErrTooLarge), errors.Is(err, warmcache.ErrNotFound),
		errors.Is(err, warmcache.ErrVersionMismatch), errors.Is(err, warmcache.ErrUnknownNamespace):
		return ClassClient
	case errors.Is(err, context.Canceled):
		return ClassCanceled
	case errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err):
		return ClassUnavailable
	}
	var scanErr pgx.ScanArgError
	var scanErrP *pgx.ScanArgError
	if errors.As(err, &scanErr) || errors.As(err, &scanErrP) {
		return ClassBug
	}
	// Without a SQLSTATE the error comes from the connection: a dial that
	// failed, a socket that closed, a pool that is closed.
	return ClassUnavailable
}

// classifyCode sorts a SQLSTATE by its class, the first two characters,
// so that codes a server adds within a class (Greenplum's 58M01 when a
// segment cannot be reached) sort with their class. The classes are named
// by the pgerrcode constant of the class's generic code.
func classifyCode(code string) Class {
	switch code {
	case pgerrcode.AdminShutdown, pgerrcode.CrashShutdown, pgerrcode.CannotConnectNow,
		pgerrcode.DatabaseDropped, pgerrcode.IdleSessionTimeout,
		pgerrcode.QueryCanceled,      // 57014: the statement timeout
		pgerrcode.LockNotAvailable,   // 55P03: the lock timeout
		pgerrcode.InvalidCatalogName: // 3D000: the database is gone
		return ClassUnavailable
	}
	switch sqlClass(code) {
	case sqlClass(pgerrcode.DataException), // 22: wrong type, bad JSON text, NUL, overflow
		sqlClass(pgerrcode.IntegrityConstraintViolation), // 23: not null, check, unique, foreign key
		sqlClass(pgerrcode.ProgramLimitExceeded):         // 54: a value too large for an index row
		return ClassClient
	case sqlClass(pgerrcode.TransactionRollback): // 40: serialization failure, deadlock
		return ClassConflict
	case sqlClass(pgerrcode.ConnectionException), // 08
		sqlClass(pgerrcode.InsufficientResources),             // 53: too many connections, out of memory, disk full
		sqlClass(pgerrcode.SystemError),                       // 58: I/O error, Greenplum segments unreachable
		sqlClass(pgerrcode.InvalidAuthorizationSpecification): // 28: the service's credentials are refused
		return ClassUnavailable
	}
	// 0A (feature not supported), 42 (syntax error, undefined table or
	// column), 25 (transaction state), XX (internal), the rest of 55 and 57,
	// and the other classes come from the service's own statements or
	// schema: a bug.
	return ClassBug
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
	if class == ClassNone || class == ClassCanceled || class == ClassBug {
		return err
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		if class == ClassUnavailable && !errors.Is(err, warmcache.ErrUnavailable) {
			return fmt.Errorf("%w: %w", warmcache.ErrUnavailable, err)
		}
		return err // already wraps a core sentinel
	}
	switch class {
	case ClassClient:
		switch {
		case pgErr.Code == pgerrcode.NotNullViolation && pgErr.ColumnName != "":
			return fmt.Errorf("%w: field %q is required", warmcache.ErrInvalidValue, pgErr.ColumnName)
		case sqlClass(pgErr.Code) == sqlClass(pgerrcode.ProgramLimitExceeded):
			return fmt.Errorf("%w: %s", warmcache.ErrTooLarge, pgErr.Message)
		}
		return fmt.Errorf("%w: %s", warmcache.ErrInvalidValue, pgErr.Message)
	case ClassConflict:
		return fmt.Errorf("%w: %s", warmcache.ErrConflict, pgErr.Message)
	}
	return fmt.Errorf("%w: %w", warmcache.ErrUnavailable, err)
}

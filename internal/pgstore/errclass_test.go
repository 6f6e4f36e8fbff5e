package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/warmcache/warmcache/internal/pgstore"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// Every error is sorted into one class: the client's data, the warehouse
// failing, the caller going away, or a bug of the service's own SQL.
func TestClassifyError(t *testing.T) {
	pg := func(code string) error {
		return fmt.Errorf("pgstore: put: %w", &pgconn.PgError{Code: code, Message: "m"})
	}
	for _, tc := range []struct {
		name string
		err  error
		want pgstore.Class
	}{
		{"check violation", pg(pgerrcode.CheckViolation), pgstore.ClassClient},
		{"not null", pg(pgerrcode.NotNullViolation), pgstore.ClassClient},
		{"unique violation", pg(pgerrcode.UniqueViolation), pgstore.ClassClient},
		{"invalid text representation", pg(pgerrcode.InvalidTextRepresentation), pgstore.ClassClient},
		{"NUL in jsonb", pg(pgerrcode.UntranslatableCharacter), pgstore.ClassClient},
		{"invalid UTF-8", pg(pgerrcode.CharacterNotInRepertoire), pgstore.ClassClient},
		{"numeric overflow", pg(pgerrcode.NumericValueOutOfRange), pgstore.ClassClient},
		{"index row too large", pg(pgerrcode.ProgramLimitExceeded), pgstore.ClassClient},
		{"deadlock", pg(pgerrcode.DeadlockDetected), pgstore.ClassConflict},
		{"serialization failure", pg(pgerrcode.SerializationFailure), pgstore.ClassConflict},
		{"feature not supported", pg(pgerrcode.FeatureNotSupported), pgstore.ClassBug},
		{"syntax error", pg(pgerrcode.SyntaxError), pgstore.ClassBug},
		{"undefined table", pg(pgerrcode.UndefinedTable), pgstore.ClassBug},
		{"undefined column", pg(pgerrcode.UndefinedColumn), pgstore.ClassBug},
		{"undefined object", pg(pgerrcode.UndefinedObject), pgstore.ClassBug},
		{"internal error", pg(pgerrcode.InternalError), pgstore.ClassBug},
		{"too many connections", pg(pgerrcode.TooManyConnections), pgstore.ClassUnavailable},
		{"disk full", pg(pgerrcode.DiskFull), pgstore.ClassUnavailable},
		{"admin shutdown", pg(pgerrcode.AdminShutdown), pgstore.ClassUnavailable},
		{"cannot connect now", pg(pgerrcode.CannotConnectNow), pgstore.ClassUnavailable},
		{"connection failure", pg(pgerrcode.ConnectionFailure), pgstore.ClassUnavailable},
		{"statement timeout", pg(pgerrcode.QueryCanceled), pgstore.ClassUnavailable},
		{"lock timeout", pg(pgerrcode.LockNotAvailable), pgstore.ClassUnavailable},
		{"io error", pg(pgerrcode.IOError), pgstore.ClassUnavailable},
		{"greenplum segment unreachable (a code within class 58)", pg("58M01"), pgstore.ClassUnavailable},
		{"a data exception pgerrcode does not name", pg("22ZZZ"), pgstore.ClassClient},
		{"a vendor code of class 08", pg("08M01"), pgstore.ClassUnavailable},
		{"connection cut", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), pgstore.ClassUnavailable},
		{"deadline", fmt.Errorf("acquire: %w", context.DeadlineExceeded), pgstore.ClassUnavailable},
		{"cancelled", fmt.Errorf("acquire: %w", context.Canceled), pgstore.ClassCanceled},
		{"core client error", fmt.Errorf("%w: x", warmcache.ErrVersionMismatch), pgstore.ClassClient},
		{"nil", nil, pgstore.ClassNone},
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
}

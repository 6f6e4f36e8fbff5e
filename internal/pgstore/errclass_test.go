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
}

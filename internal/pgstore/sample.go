package pgstore

import (
	"fmt"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// SampleStatement returns the SQL that reads up to $1 rows of ns as the
// service returns them: the key, the value's bytes and the version.
// The rows are the first the table yields, in no particular order. It needs
// no database and fails when the namespace is incomplete.
func SampleStatement(ns *warmcache.Namespace) (string, error) {
	if err := checkNamespace(ns); err != nil {
		return "", err
	}
	return fmt.Sprintf("SELECT %s, %s, %s FROM %s LIMIT $1::integer",
		ident(ns.KeyColumn), valueExpr(ns, ""), ident(ns.VersionColumn), tableIdent(ns.Table)), nil
}

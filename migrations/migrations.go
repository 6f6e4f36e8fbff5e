// Package migrations holds warmcache's versioned schema as SQL templates,
// embedded in the binary.
//
// Each migration is a pair of text/template files, NNNN_name.up.sql and
// NNNN_name.down.sql, where NNNN is the version. A migration whose name
// starts with "namespace_" runs once for every managed namespace, with that
// namespace's table description as data; any other migration runs once for
// the whole database. Package internal/schema renders the templates for a
// dialect: it is the only place where the clauses of PostgreSQL and
// Greenplum differ, so the templates read the same for both.
package migrations

import (
	"embed"
	"io/fs"
)

//go:embed *.sql
var files embed.FS

// FS returns the migration templates. The result is read-only and safe for
// concurrent use.
func FS() fs.FS { return files }

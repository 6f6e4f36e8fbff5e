package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/auth"
)

// Namespace returns one entry of a namespaces file: the namespace name over
// table, keyed by the column key of keyType (bigint or text), with the
// packed value column value and the version column version (the columns
// that `warmcache migrate up` creates), followed by settings, one YAML line
// each, such as "ttl: 5m".
func Namespace(name, table, keyType string, settings ...string) string {
	return entry(name, table, keyType, "packed", settings)
}

// BytesNamespace returns the entry of a namespace of opaque byte values, as
// a Dapr state store needs: the namespace name over table, keyed by the
// text column key, with the bytes value column value and the version column
// version, followed by settings as in Namespace.
func BytesNamespace(name, table string, settings ...string) string {
	return entry(name, table, "text", "bytes", settings)
}

// entry returns one entry of a namespaces file whose value column, value,
// has layout.
func entry(name, table, keyType, layout string, settings []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  - name: %s\n    table: %s\n    key: {column: key, type: %s}\n"+
		"    value: {layout: %s, column: value}\n    version_column: version\n", name, table, keyType, layout)
	for _, s := range settings {
		b.WriteString("    " + s + "\n")
	}
	return b.String()
}

// Lifetimes are the lifetimes of the suites' namespaces, entries 5 minutes
// and absent entries 30 seconds, followed by more settings.
func Lifetimes(more ...string) []string {
	return append([]string{"ttl: 5m", "negative_ttl: 30s"}, more...)
}

// Writable are the settings of a namespace that the service writes and
// whose table migrate up creates, with Lifetimes, followed by more.
func Writable(more ...string) []string {
	return Lifetimes(append([]string{"writable: true", "managed: true"}, more...)...)
}

// NamespacesYAML returns a namespaces file of entries (from Namespace).
func NamespacesYAML(entries ...string) string {
	return "namespaces:\n" + strings.Join(entries, "")
}

// APIKey is one key of a keys file.
type APIKey struct {
	ID         string
	Token      string // the file holds its SHA-256
	Scopes     string // a YAML list, such as "[read, write]"
	Namespaces string // a YAML list, such as "[widgets]" or `["*"]`
	Extra      string // more settings, one YAML line each, such as "rate: 0.001"
}

// KeysYAML returns a keys file (--keys-file) of keys.
func KeysYAML(keys ...APIKey) string {
	var b strings.Builder
	b.WriteString("api_keys:\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "  - id: %s\n    sha256: %s\n    scopes: %s\n    namespaces: %s\n",
			k.ID, auth.HashToken(k.Token), k.Scopes, k.Namespaces)
		for _, line := range strings.Split(k.Extra, "\n") {
			if line != "" {
				b.WriteString("    " + line + "\n")
			}
		}
	}
	return b.String()
}

// WriteFile writes content to a file called name in a directory of the
// test's own (mode 0600) and returns its path.
func WriteFile(t testing.TB, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// SocketDir returns a new directory for unix sockets, removed when the test
// ends. It is made under the system's temporary directory rather than
// t.TempDir, whose long paths would not fit a socket's (at most 107 bytes).
func SocketDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// SeedWidgets inserts widgets 1..n into the widgets table that migrate up
// created in dsn, each {"widget":{"id":"<i>","debug":"on"}} at a version of
// its own.
func SeedWidgets(t testing.TB, dsn string, n int) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `INSERT INTO widgets (key, value, version)
		SELECT i, jsonb_build_object('widget', jsonb_build_object('id', i::text, 'debug', 'on')), nextval('warmcache_version_seq')
		FROM generate_series(1, $1::int) AS i`, n)
	if err != nil {
		t.Fatal(err)
	}
}

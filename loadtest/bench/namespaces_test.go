package bench_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/loadtest/bench"
)

// TestNamespacesLoad shows that what a tool adds to the widgets namespace
// lands in it, and its other namespaces after it, as the service reads the
// file.
func TestNamespacesLoad(t *testing.T) {
	file := filepath.Join(t.TempDir(), "namespaces.yaml")
	body := bench.Namespaces("    near_ttl: 30s\n    storage:\n      partitions: 8\n",
		"  - {name: other, table: other, key: {column: key, type: bigint}, value: {layout: packed, column: value}}\n")
	if err := os.WriteFile(file, body, 0o644); err != nil {
		t.Fatal(err)
	}
	namespaces, _, err := config.LoadNamespacesFile(file)
	if err != nil {
		t.Fatalf("%v in\n%s", err, body)
	}
	if len(namespaces) != 2 || namespaces[0].Name != "widgets" || namespaces[1].Name != "other" {
		t.Fatalf("namespaces %+v, want widgets then other", namespaces)
	}
	if w := namespaces[0]; w.NearTTL == 0 || w.TTL == 0 || !w.Writable {
		t.Errorf("widgets %+v: want its near_ttl, ttl and writable", w)
	}
}

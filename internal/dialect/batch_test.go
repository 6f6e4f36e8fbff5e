package dialect_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/warmcache/warmcache/internal/dialect"
	"github.com/warmcache/warmcache/internal/golden"
)

// TestGreenplumBatchLookup pins Greenplum's batched read: one `= ANY` of
// the key column's exact array type, whatever the key type and the value
// expression, with no per-segment grouping and no per-key statements.
func TestGreenplumBatchLookup(t *testing.T) {
	var b strings.Builder
	for _, tt := range []struct {
		name, table, key, keyType string
		columns                   []string
	}{
		{"packed, bigint key", "widgets", "key", "bigint", []string{"key", "value::text", "version"}},
		{"packed, text key, schema-qualified", `app."Sessions"`, "id", "text", []string{"id", "doc::text", "version"}},
		{"columns layout", "people", "id", "bigint",
			[]string{"id", `json_build_object('name', "name", 'age', age)::text`, "version"}},
	} {
		sql := dialect.GreenplumBatchLookup(tt.table, tt.key, tt.keyType, tt.columns...)
		if want := fmt.Sprintf("%s = ANY($1::%s[])", tt.key, tt.keyType); !strings.HasSuffix(sql, want) {
			t.Errorf("%s: %q does not end with %q: the keys must reach the planner with the column's exact type", tt.name, sql, want)
		}
		if strings.Count(sql, "$") != 1 {
			t.Errorf("%s: %q takes more than the one array parameter", tt.name, sql)
		}
		fmt.Fprintf(&b, "-- %s\n%s\n\n", tt.name, sql)
	}
	golden.Check(t, "greenplum_batch_lookup", []byte(b.String()))
}

func TestTargetedBatchKeys(t *testing.T) {
	for _, tt := range []struct{ segments, want int }{
		{0, 0}, {-1, 0}, {1, 2}, {3, 8}, {64, 191},
	} {
		if got := dialect.TargetedBatchKeys(tt.segments); got != tt.want {
			t.Errorf("TargetedBatchKeys(%d) = %d, want %d", tt.segments, got, tt.want)
		}
	}
}

package dialect_test

import (
	"testing"

	"github.com/warmcache/warmcache/internal/dialect"
)

func TestTargetedBatchKeys(t *testing.T) {
	for _, tt := range []struct{ segments, want int }{
		{0, 0}, {-1, 0}, {1, 2}, {3, 8}, {64, 191},
	} {
		if got := dialect.TargetedBatchKeys(tt.segments); got != tt.want {
			t.Errorf("TargetedBatchKeys(%d) = %d, want %d", tt.segments, got, tt.want)
		}
	}
}

package consistency_test

import (
	"testing"

	"github.com/warmcache/warmcache/e2e/internal/harness"
)

// warmcacheBin is the warmcache binary that the linearizability and race
// tests run, built once by TestMain.
var warmcacheBin string

func TestMain(m *testing.M) { harness.Main(m, "consistency", &warmcacheBin) }

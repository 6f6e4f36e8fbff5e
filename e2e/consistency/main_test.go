package consistency_test

import (
	"testing"

	"github.com/warmcache/warmcache/internal/testproc"
)

// warmcacheBin is the warmcache binary that the linearizability and race
// tests run, built once by TestMain.
var warmcacheBin string

func TestMain(m *testing.M) {
	testproc.MainWithBinary("consistency", func(bin string) int {
		warmcacheBin = bin
		return m.Run()
	})
}

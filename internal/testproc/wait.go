package testproc

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// Eventually polls cond every 10ms until it holds, and fails the test when
// it does not within limit. It returns how long it waited.
func Eventually(t testing.TB, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		<-tick.C
	}
	return time.Since(start)
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers, such as a
// server's log that a test reads when it fails.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TailBytes returns the last n bytes written.
func (b *SyncBuffer) TailBytes(n int) string { return TailBytes(b.String(), n) }

// TailLines returns the last n lines written.
func (b *SyncBuffer) TailLines(n int) string { return TailLines(b.String(), n) }

// TailBytes returns the last n bytes of a log s.
func TailBytes(s string, n int) string { return s[max(0, len(s)-n):] }

// TailLines returns the last n lines of a log s.
func TailLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

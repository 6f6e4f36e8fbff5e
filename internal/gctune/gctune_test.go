package gctune_test

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/warmcache/warmcache/internal/gctune"
	"github.com/warmcache/warmcache/internal/testproc"
)

func TestPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name                 string
		live, scanned, floor uint64
		base, want           int
	}{
		{"live heap at the floor keeps the base", 64 * mib, 64 * mib, 64 * mib, 100, 100},
		{"live heap over the floor keeps the base", 200 * mib, 200 * mib, 64 * mib, 100, 100},
		{"half the floor still reaches it with the base", 32 * mib, 32 * mib, 64 * mib, 100, 100},
		{"a small live heap is raised to the floor", 8 * mib, 8 * mib, 64 * mib, 100, 700},
		{"stacks and globals count in the goal", 8 * mib, 14 * mib, 64 * mib, 100, 400},
		{"rounded up", 6 * mib, 6 * mib, 64 * mib, 100, 967},
		{"scanned is at least the live heap", 8 * mib, 0, 64 * mib, 100, 700},
		{"the runtime's 4 MiB minimum scales with GOGC", 1 * mib, 2 * mib, 64 * mib, 100, 1600},
		{"a higher base wins", 8 * mib, 8 * mib, 64 * mib, 2000, 2000},
		{"no collection yet", 0, 0, 64 * mib, 100, 100},
		{"bounded", 1, 1, 1 << 40, 100, 100_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := gctune.PercentFor(tc.live, tc.scanned, tc.floor, tc.base); got != tc.want {
				t.Errorf("PercentFor(%d, %d, %d, %d) = %d, want %d", tc.live, tc.scanned, tc.floor, tc.base, got, tc.want)
			}
		})
	}
}

// gogc reads the GOGC in effect from the runtime's own metric.
func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

func TestTunerRaisesGOGCWhileTheHeapIsSmall(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math64))

	// The test's live heap is a few MiB: 1 GiB is far above it.
	tu := gctune.Start(1 << 30)
	if tu == nil {
		t.Fatal("Start returned nil with GOGC=100 and no memory limit")
	}
	// The end of each collection tunes GOGC.
	runtime.GC()
	testproc.Eventually(t, 10*time.Second, "GOGC above 100 after a collection", func() bool { return gogc() > 100 })
	if got, want := gogc(), tu.Percent(); got != want {
		t.Errorf("GOGC in effect = %d, want the Tuner's %d", got, want)
	}
	// And keeps it tuned after more.
	runtime.GC()
	runtime.GC()
	testproc.Eventually(t, 10*time.Second, "GOGC above 100 after more collections", func() bool { return gogc() > 100 })

	tu.Stop()
	if got := gogc(); got != 100 {
		t.Errorf("after Stop, GOGC = %d, want the base 100", got)
	}
	runtime.GC()
	runtime.GC()
	if got := gogc(); got != 100 {
		t.Errorf("collections after Stop set GOGC to %d, want it left at 100", got)
	}
}

const math64 = 1<<63 - 1

func TestStartWithoutRoom(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	if tu := gctune.Start(0); tu != nil {
		t.Error("Start(0) returned a Tuner, want nil: no floor")
	}
	debug.SetGCPercent(-1)
	if tu := gctune.Start(64 << 20); tu != nil {
		t.Error("Start with GOGC=off returned a Tuner, want nil")
	}
	debug.SetGCPercent(100)

	// Under a memory limit the floor is half of it at most.
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(1 << 40))
	tu := gctune.Start(1 << 50)
	if tu == nil {
		t.Fatal("Start under a 1 TiB limit returned nil")
	}
	defer tu.Stop()
	if got, want := tu.Floor(), int64(1<<39); got != want {
		t.Errorf("Floor() under a 1 TiB limit = %d, want half the limit, %d", got, want)
	}
	var nilTuner *gctune.Tuner
	nilTuner.Stop() // a nil Tuner does nothing
	if p, f := nilTuner.Percent(), nilTuner.Floor(); p != -1 || f != 0 {
		t.Errorf("nil Tuner's Percent(), Floor() = %d, %d, want -1, 0", p, f)
	}
}

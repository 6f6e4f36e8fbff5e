package cowmap

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestLoadOrAddAddsEachKeyOnce(t *testing.T) {
	var m Map[string, *int]
	if _, ok := m.Load("a"); ok {
		t.Fatal("an empty map holds a")
	}
	var made atomic.Int32
	var wg sync.WaitGroup
	got := make([]*int, 64)
	for i := range got {
		wg.Go(func() {
			got[i] = m.LoadOrAdd([]string{"a", "b"}[i%2], func() *int { made.Add(1); return new(int) })
		})
	}
	wg.Wait()
	if n := made.Load(); n != 2 {
		t.Errorf("newValue ran %d times for 2 keys, want 2", n)
	}
	for i, v := range got {
		if v != got[i%2] {
			t.Fatalf("call %d got another value than call %d for the same key", i, i%2)
		}
	}
	if v, ok := m.Load("b"); !ok || v != got[1] {
		t.Errorf("Load(b) = %p, %v; want %p, true", v, ok, got[1])
	}
	if got[0] == got[1] {
		t.Error("two keys share one value")
	}
}

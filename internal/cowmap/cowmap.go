// Package cowmap is a map that readers use without a lock, for keys that
// are added rarely and never removed, such as the metric series of each
// route or method a server has seen: an addition copies the map and
// replaces it.
package cowmap

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Map maps keys to values. Its zero value is empty and ready to use; a
// Map is safe for concurrent use and must not be copied.
type Map[K comparable, V any] struct {
	mu      sync.Mutex // held to add a key
	current atomic.Pointer[map[K]V]
}

// Load returns the value of k, and whether k is in the map, without a
// lock.
func (m *Map[K, V]) Load(k K) (V, bool) {
	if cur := m.current.Load(); cur != nil {
		v, ok := (*cur)[k]
		return v, ok
	}
	var zero V
	return zero, false
}

// LoadOrAdd returns the value of k, adding the one that newValue returns
// when k is not in the map yet. newValue runs at most once per added key,
// under the map's lock.
func (m *Map[K, V]) LoadOrAdd(k K, newValue func() V) V {
	if v, ok := m.Load(k); ok {
		return v
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.current.Load()
	next := make(map[K]V, 1)
	if old != nil {
		if v, ok := (*old)[k]; ok {
			return v
		}
		maps.Copy(next, *old)
	}
	v := newValue()
	next[k] = v
	m.current.Store(&next)
	return v
}

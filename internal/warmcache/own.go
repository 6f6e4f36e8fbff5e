package warmcache

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// maxOwnWrites bounds the writes ownWrites remembers: about 3 MiB, and at
// 2,000 writes a second 16 s of them, well past the lag of change capture
// and a poll's interval.
const maxOwnWrites = 1 << 15

// ownWrites remembers this instance's recent writes whose cache update
// landed: stored by the hot tier, which had met no new server since the
// write began, and published to the other instances' near caches. Change
// capture and polling bring each write back as a change of the warehouse;
// Apply skips a change of a key at or below such a write's version,
// instead of reading the row again (polling) and storing it again in the
// hot tier and telling every instance again. The caches already follow
// the write: the hot tier holds its version or a newer one (or, after an
// eviction or an expiry, nothing, where a change only replaces), and every
// near cache was told. Once the hot tier meets a new server, a Redis that
// may have restarted empty, nothing is skipped: there a command sent
// before the restart and delivered after it can have stored an older
// version, which the change replaces. A key in doubt is never skipped,
// since the change is what settles its doubt. The oldest writes are
// forgotten first; a forgotten write's change is applied, as any change is.
type ownWrites struct {
	mu      sync.Mutex
	version map[string]ownWrite // namespace \x00 key -> the highest version written
	ring    []string            // the keys of version, oldest first from next
	next    int
	skipped *prometheus.CounterVec
}

// ownWrite is the highest version of a key that a write of this instance
// stored, and the hot tier's count of servers met when it landed.
type ownWrite struct {
	version, servers uint64
}

func newOwnWrites() *ownWrites {
	return &ownWrites{
		version: make(map[string]ownWrite),
		ring:    make([]string, 0, maxOwnWrites),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmcache_own_changes_skipped_total",
			Help: "Changes that change capture or polling brought back from this instance's own writes, whose cache update had landed, and so were not applied again.",
		}, []string{"namespace"}),
	}
}

func ownKey(ns *Namespace, key Key) string { return ns.Name + "\x00" + key.Text }

// record remembers that the cache updates of keys at the versions of
// entries landed, when the hot tier had met servers servers.
func (o *ownWrites) record(ns *Namespace, keys []Key, entries []Entry, servers uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, key := range keys {
		k := ownKey(ns, key)
		w := ownWrite{version: uint64(entries[i].Version), servers: servers}
		if v, ok := o.version[k]; ok {
			if v.version > w.version && v.servers == servers {
				w.version = v.version
			}
			o.version[k] = w
			continue
		}
		if len(o.ring) < cap(o.ring) {
			o.ring = append(o.ring, k)
		} else {
			// The slot's key may have been forgotten already, or written
			// again since: either way it goes now.
			delete(o.version, o.ring[o.next])
			o.ring[o.next] = k
			o.next = (o.next + 1) % len(o.ring)
		}
		o.version[k] = w
	}
}

// covers reports whether a change of key at version is one of this
// instance's writes whose update landed, or older than one, while the hot
// tier has met servers servers, as many as when the write landed. A change
// at exactly the write's version is the write coming back, and the write
// is forgotten.
func (o *ownWrites) covers(ns *Namespace, key Key, version int64, servers uint64) bool {
	k := ownKey(ns, key)
	o.mu.Lock()
	defer o.mu.Unlock()
	w, ok := o.version[k]
	if !ok || w.servers != servers || version < 0 || w.version < uint64(version) {
		return false
	}
	if w.version == uint64(version) {
		delete(o.version, k)
	}
	return true
}

// ownChanges returns changes without those that this instance's own writes
// cover (see ownWrites), counting them.
func (s *Service) ownChanges(ns *Namespace, changes []Change) []Change {
	now := s.opts.Now()
	servers := s.hotServers()
	kept := changes[:0:0]
	skipped := 0
	for _, c := range changes {
		if s.own.covers(ns, c.Key, c.Entry.Version, servers) && !s.doubts.has(ns, c.Key, now) {
			skipped++
			continue
		}
		kept = append(kept, c)
	}
	if skipped > 0 {
		s.own.skipped.WithLabelValues(ns.Name).Add(float64(skipped))
	}
	return kept
}

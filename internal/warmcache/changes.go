package warmcache

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"
)

// Change is one row written in the warehouse by a writer the service does
// not see: a batch load, an ETL job, a DBA's UPDATE.
type Change struct {
	Key Key
	// Entry is the row as written: present with its value and version, or
	// absent at the version of its delete (above the deleted row's).
	Entry Entry
	// Refresh says that the value is not known (only that the key changed
	// at Entry.Version or later): the warehouse is read for it, and a key
	// the warehouse no longer has is left to its delete's own change.
	Refresh bool
}

// ChangedKey is a key of a namespace that a writer changed at a version,
// as the warehouse reports it to the watermark poll.
type ChangedKey struct {
	Namespace string
	// Key is the key's text.
	Key     string
	Version int64
}

// Generations retires every cached entry of a namespace at once, in one
// step, by moving the namespace to a new generation.
type Generations interface {
	// Bump moves ns to its next generation on every instance and returns
	// when this instance uses it.
	Bump(ctx context.Context, ns *Namespace) error
}

// applyChunkKeys bounds the keys of one warehouse read or one hot-tier
// pipeline of Apply, and applyTimeout bounds each.
const (
	applyChunkKeys = 500
	applyTimeout   = 5 * time.Second
	// refreshBytes bounds the values of one warehouse read of changed keys.
	refreshBytes = 2 << 20
)

// Apply brings the caches up to date with changes of ns made outside the
// service: the hot tier is filled under the version rules (never
// backwards), this instance's near cache drops the keys, and the other
// instances are told to drop them. Changes marked Refresh are read from the
// warehouse first. Apply returns only when the hot tier stored every change,
// or an error (wrapping ErrUnavailable) when it could not: then some changes
// may be applied and others not, and the caller applies them all again.
// Apply is safe for concurrent use.
func (s *Service) Apply(ctx context.Context, ns *Namespace, changes []Change) error {
	for start := 0; start < len(changes); start += applyChunkKeys {
		if err := s.applyChunk(ctx, ns, changes[start:min(start+applyChunkKeys, len(changes))]); err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) applyChunk(ctx context.Context, ns *Namespace, changes []Change) error {
	keys := make([]Key, 0, len(changes))
	entries := make([]Entry, 0, len(changes))
	var refresh []Key
	changes, echoed := s.echoed(ns, changes)
	for _, c := range changes {
		if c.Refresh {
			refresh = append(refresh, c.Key)
			continue
		}
		keys, entries = append(keys, c.Key), append(entries, c.Entry)
	}
	if echoed > 0 {
		s.metrics.hotWrites.WithLabelValues(ns.Name, string(updateChange), "echo").Add(float64(echoed))
	}
	if err := s.retire(ctx, ns, updateChange, s.fills(ns, keys, entries), stamp{}); err != nil {
		return err
	}
	// Changed keys whose values are unknown are read from the warehouse in
	// reads sized to about refreshBytes of values: one key at first, as
	// many as fit once the values' size is known.
	n := 1
	for len(refresh) > 0 {
		part := refresh[:min(n, len(refresh))]
		refresh = refresh[len(part):]
		wctx, cancel := context.WithTimeout(ctx, applyTimeout)
		read, err := s.warm.LookupMany(wctx, ns, part)
		cancel()
		if err != nil {
			return fmt.Errorf("%w: read changed keys of %q: %w", ErrUnavailable, ns.Name, err)
		}
		var found []Key
		var values []Entry
		size := 0
		for i, e := range read {
			size += len(e.Value)
			if e.Found {
				found, values = append(found, part[i]), append(values, e)
			}
		}
		if err := s.retire(ctx, ns, updateChange, s.fills(ns, found, values), stamp{}); err != nil {
			return err
		}
		n = max(1, min(applyChunkKeys, refreshBytes/(size/len(part)+1)))
	}
	return nil
}

// echoWait bounds how long Apply waits for this instance's writes of
// changed keys, still under way, to tell their versions, and echoPoll is
// how often it looks.
const (
	echoWait = 5 * time.Millisecond
	echoPoll = 100 * time.Microsecond
)

// echoed returns changes without the echoes of this instance's own writes
// (see echoes), and how many it left out. Capture often brings a write's
// row back before the write's answer reached the service: a change of a
// key that this instance is writing waits, at most echoWait, until that
// write tells its version or ends.
func (s *Service) echoed(ns *Namespace, changes []Change) ([]Change, int) {
	kept := make([]Change, 0, len(changes))
	var waiting []int // indexes in kept of changes whose key a write is writing
	for _, c := range changes {
		switch {
		case s.trust.echoes.take(ns, c.Key, c.Entry.Version):
		case s.trust.doubts.writing(ns, c.Key):
			waiting = append(waiting, len(kept))
			kept = append(kept, c)
		default:
			kept = append(kept, c)
		}
	}
	// The wait is on the system's clock, whatever Options.Now says: it
	// bounds a real sleep.
	echo := make([]bool, len(kept))
	for deadline := time.Now().Add(cmp.Or(s.trust.echoes.wait, echoWait)); len(waiting) > 0 && time.Now().Before(deadline); {
		time.Sleep(echoPoll)
		waiting = slices.DeleteFunc(waiting, func(i int) bool {
			echo[i] = s.trust.echoes.take(ns, kept[i].Key, kept[i].Entry.Version)
			return echo[i] || !s.trust.doubts.writing(ns, kept[i].Key)
		})
	}
	out := kept[:0]
	for i, c := range kept {
		if !echo[i] {
			out = append(out, c)
		}
	}
	return out, len(changes) - len(out)
}

// Invalidate makes the caches answer the given keys of a namespace from the
// warehouse as it is now, or, with all, every key of the namespace (by
// moving it to a new generation). It is for pipelines that wrote the
// warehouse in a way that neither change capture nor polling sees, such as
// rows rewritten at their old versions. A key the warehouse has is filled
// from it; one it does not have is cached as absent, replacing what the hot
// tier held. It returns how many keys it invalidated (zero with all).
// Errors wrap ErrUnknownNamespace, ErrInvalidKey, ErrTooLarge or
// ErrUnavailable.
func (s *Service) Invalidate(ctx context.Context, namespace string, rawKeys []string, all bool) (int, error) {
	ns, err := s.Namespace(namespace)
	if err != nil {
		return 0, err
	}
	if all {
		if s.opts.Generations == nil {
			return 0, fmt.Errorf("%w: namespace generations are not available", ErrUnavailable)
		}
		if err := s.opts.Generations.Bump(ctx, ns); err != nil {
			return 0, fmt.Errorf("%w: bump the generation of %q: %w", ErrUnavailable, ns.Name, err)
		}
		return 0, nil
	}
	if len(rawKeys) > s.opts.MaxBatchKeys {
		return 0, fmt.Errorf("%w: %d keys in one request, at most %d", ErrTooLarge, len(rawKeys), s.opts.MaxBatchKeys)
	}
	keys := make([]Key, 0, len(rawKeys))
	seen := make(map[string]bool, len(rawKeys))
	for _, raw := range rawKeys {
		k, err := ns.ParseKey(raw)
		if err != nil {
			return 0, err
		}
		if !seen[k.Text] {
			seen[k.Text] = true
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return 0, nil
	}
	wctx, cancel := context.WithTimeout(ctx, s.opts.WarmTimeout)
	read, err := s.warm.LookupMany(wctx, ns, keys)
	cancel()
	if err != nil {
		return 0, fmt.Errorf("%w: warehouse read: %w", ErrUnavailable, err)
	}
	// An absent key replaces what the hot tier holds: an absent entry at
	// the cached version wins over a present entry at that version.
	hctx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	cached, hits, err := s.hot.GetMany(hctx, ns, keys)
	if err != nil {
		return 0, fmt.Errorf("%w: hot tier read: %w", ErrUnavailable, err)
	}
	entries := make([]Entry, len(keys))
	for i, e := range read {
		entries[i] = e
		if !e.Found && hits[i] {
			entries[i] = Entry{Version: cached[i].Version}
		}
	}
	if err := s.retire(ctx, ns, updateInvalidate, s.fills(ns, keys, entries), stamp{}); err != nil {
		return 0, err
	}
	return len(keys), nil
}

package capture

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// PollStore is what the watermark poll reads from the warehouse (see
// pgstore's ChangeStatements for the SQL and its indexes).
type PollStore interface {
	// Changed returns the keys of ns whose version is above after, oldest
	// first, at most limit of them.
	Changed(ctx context.Context, ns *warmcache.Namespace, after int64, limit int) ([]warmcache.ChangedKey, error)
	// Newest returns the highest version of ns's table.
	Newest(ctx context.Context, ns *warmcache.Namespace) (int64, error)
	// Deleted returns the delete log's keys whose version is above after.
	Deleted(ctx context.Context, after int64, limit int) ([]warmcache.ChangedKey, error)
	// NewestDeleted returns the delete log's highest version.
	NewestDeleted(ctx context.Context) (int64, error)
	// PruneDeleted removes the delete log's rows older than age.
	PruneDeleted(ctx context.Context, age time.Duration) (int64, error)
}

// Applier brings the caches up to date with changes made outside the
// service; *warmcache.Service is one.
type Applier interface {
	Apply(ctx context.Context, ns *warmcache.Namespace, changes []warmcache.Change) error
}

// pollBatch bounds the rows of one poll query, and maxSeen the keys a
// watermark remembers inside its overlap window.
const (
	pollBatch    = 5000
	maxSeen      = 1 << 20
	pruneEvery   = 10 * time.Minute
	deleteLogAge = time.Hour
)

// Poller polls the warehouse for rows written outside the service: every
// interval, each namespace's rows whose version is above a watermark (an
// index range scan on the version column), and the delete log's. Versions
// are taken from the sequence before the writing transaction commits, so a
// transaction can commit after one with a higher version; the watermark
// therefore lags by an overlap window: each poll reads again the versions
// that appeared within the window, and applies only the keys it has not
// applied at that version yet. A transaction that takes longer than the
// window between taking its version and committing is missed.
//
// A Poller starts at the newest version, so changes made while no instance
// polled are not seen; bump the namespace's generation after such a gap.
type Poller struct {
	store      PollStore
	apply      Applier
	namespaces []*warmcache.Namespace
	byName     map[string]*warmcache.Namespace
	interval   time.Duration
	overlap    time.Duration
	log        *slog.Logger
	now        func() time.Time

	marks     map[string]*watermark // by namespace name; deletes under ""
	lastRound atomic.Int64          // unix nanoseconds when the last complete round started
	lastPrune time.Time

	m *metrics
}

// watermark is the poll position of one table.
type watermark struct {
	started bool
	high    int64 // the highest version applied
	history []mark
	seen    map[string]int64 // key -> version applied within the window
	// maxSeen bounds seen; a key applied beyond it is applied again when
	// the overlap window reads it again.
	maxSeen int
}

func newWatermark() *watermark { return &watermark{seen: map[string]int64{}, maxSeen: maxSeen} }

// start sets the watermark to high, the newest version when polling starts,
// as of now: the overlap window reads again from there until it has passed.
func (w *watermark) start(now time.Time, high int64) {
	w.high, w.started = high, true
	w.record(now)
}

type mark struct {
	at   time.Time
	high int64
}

// from returns the version to read above at now: the high watermark as it
// was one overlap ago, and forgets what is older.
func (w *watermark) from(now time.Time, overlap time.Duration) int64 {
	cut := now.Add(-overlap)
	i := 0
	for i+1 < len(w.history) && !w.history[i+1].at.After(cut) {
		i++
	}
	w.history = w.history[i:]
	if len(w.history) == 0 {
		return w.high
	}
	from := w.history[0].high
	for k, v := range w.seen {
		if v <= from {
			delete(w.seen, k)
		}
	}
	return from
}

func (w *watermark) record(now time.Time) {
	w.history = append(w.history, mark{at: now, high: w.high})
}

// applied reports whether key was applied at version or later within the
// window.
func (w *watermark) applied(key string, version int64) bool {
	v, ok := w.seen[key]
	return ok && v >= version
}

func (w *watermark) remember(key string, version int64) {
	if _, ok := w.seen[key]; ok || len(w.seen) < w.maxSeen {
		w.seen[key] = max(w.seen[key], version)
	}
	w.high = max(w.high, version)
}

// newPoller returns a Poller of namespaces that applies what it finds with
// apply. interval zero means 1s, overlap zero means 10s.
func newPoller(store PollStore, apply Applier, namespaces []*warmcache.Namespace, interval, overlap time.Duration, m *metrics, log *slog.Logger) *Poller {
	if interval <= 0 {
		interval = defaultPollInterval
	}
	if overlap <= 0 {
		overlap = defaultPollOverlap
	}
	p := &Poller{store: store, apply: apply, namespaces: namespaces, byName: map[string]*warmcache.Namespace{},
		interval: interval, overlap: overlap, log: log, now: time.Now, marks: map[string]*watermark{}, m: m}
	for _, ns := range namespaces {
		p.byName[ns.Name] = ns
		p.marks[ns.Name] = newWatermark()
	}
	p.marks[""] = newWatermark()
	return p
}

// Run polls every interval until ctx ends.
func (p *Poller) Run(ctx context.Context) {
	p.lastRound.Store(p.now().UnixNano())
	p.m.pollAge(func() float64 { return p.now().Sub(time.Unix(0, p.lastRound.Load())).Seconds() })
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		start := p.now()
		if err := p.Round(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			p.log.Warn("capture: poll failed; retrying", slog.Any("err", err))
		} else {
			p.lastRound.Store(start.UnixNano())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Round polls every namespace and the delete log once and applies what
// changed. On an error it stops; the watermarks of what was not applied
// stay where they were, so the next round reads it again.
func (p *Poller) Round(ctx context.Context) error {
	now := p.now()
	ctx, cancel := context.WithTimeout(ctx, max(10*p.interval, 30*time.Second))
	defer cancel()
	for _, ns := range p.namespaces {
		w := p.marks[ns.Name]
		if !w.started {
			v, err := p.store.Newest(ctx, ns)
			if err != nil {
				return err
			}
			w.start(now, v)
		}
		after := w.from(now, p.overlap)
		for {
			rows, err := p.store.Changed(ctx, ns, after, pollBatch)
			if err != nil {
				return err
			}
			var changes []warmcache.Change
			for _, r := range rows {
				if w.applied(r.Key, r.Version) {
					continue
				}
				k, err := ns.ParseKey(r.Key)
				if err != nil {
					continue
				}
				changes = append(changes, warmcache.Change{Key: k, Entry: warmcache.Entry{Version: r.Version}, Refresh: true})
			}
			if err := p.apply.Apply(ctx, ns, changes); err != nil {
				return err
			}
			p.m.changes.WithLabelValues(ns.Name, "poll", "upsert").Add(float64(len(changes)))
			for _, r := range rows {
				w.remember(r.Key, r.Version)
			}
			if len(rows) < pollBatch {
				break
			}
			after = rows[len(rows)-1].Version
		}
		w.record(now)
	}
	if err := p.deletes(ctx, now); err != nil {
		return err
	}
	if now.Sub(p.lastPrune) > pruneEvery {
		p.lastPrune = now
		if n, err := p.store.PruneDeleted(ctx, deleteLogAge); err != nil {
			p.log.Warn("capture: delete log not pruned", slog.Any("err", err))
		} else if n > 0 {
			p.log.Info("capture: delete log pruned", slog.Int64("rows", n))
		}
	}
	return nil
}

// deletes applies the delete log's new rows: each key becomes absent at
// the version of its delete.
func (p *Poller) deletes(ctx context.Context, now time.Time) error {
	w := p.marks[""]
	if !w.started {
		v, err := p.store.NewestDeleted(ctx)
		if err != nil {
			return err
		}
		w.start(now, v)
	}
	after := w.from(now, p.overlap)
	for {
		rows, err := p.store.Deleted(ctx, after, pollBatch)
		if err != nil {
			return err
		}
		byNS := map[string][]warmcache.Change{}
		for _, r := range rows {
			ns := p.byName[r.Namespace]
			if ns == nil || w.applied(r.Namespace+"\x00"+r.Key, r.Version) {
				continue
			}
			k, err := ns.ParseKey(r.Key)
			if err != nil {
				continue
			}
			byNS[r.Namespace] = append(byNS[r.Namespace], warmcache.Change{Key: k, Entry: warmcache.Entry{Version: r.Version}})
		}
		for name, changes := range byNS {
			if err := p.apply.Apply(ctx, p.byName[name], changes); err != nil {
				return err
			}
			p.m.changes.WithLabelValues(name, "poll", "delete").Add(float64(len(changes)))
		}
		for _, r := range rows {
			w.remember(r.Namespace+"\x00"+r.Key, r.Version)
		}
		if len(rows) < pollBatch {
			break
		}
		after = rows[len(rows)-1].Version
	}
	w.record(now)
	return nil
}

package capture

// The fakes of this file stand for what change capture reads and writes through
// its own interfaces: the warehouse's poll and generation queries
// (PollStore, GenerationStore) and the caches (Applier). They keep their
// state in memory and are safe for concurrent use.

import (
	"bytes"
	"cmp"
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/warmcache"
)

// items and users are the namespaces of the tests: a bigint key with a
// packed value, and a text key in a schema-qualified table with columns.
func testNamespaces() (items, users *warmcache.Namespace) {
	items = &warmcache.Namespace{Name: "items", Table: "items", KeyColumn: "key", KeyType: warmcache.KeyBigint,
		Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version"}
	users = &warmcache.Namespace{Name: "users", Table: "crm.users", KeyColumn: "id", KeyType: warmcache.KeyText,
		Layout: warmcache.LayoutColumns, Columns: []warmcache.Column{{Name: "name", Type: "text"}}, VersionColumn: "rev"}
	return items, users
}

// applyCall is one call of fakeApplier.Apply.
type applyCall struct {
	ns      string
	changes []warmcache.Change
	err     error
}

// fakeApplier records every call of Apply; fail, when set, is asked for
// the result of each call (n counts the calls from 0).
type fakeApplier struct {
	mu    sync.Mutex
	calls []applyCall
	fail  func(n int, ns *warmcache.Namespace, changes []warmcache.Change) error
}

func (a *fakeApplier) Apply(_ context.Context, ns *warmcache.Namespace, changes []warmcache.Change) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var err error
	if a.fail != nil {
		err = a.fail(len(a.calls), ns, changes)
	}
	a.calls = append(a.calls, applyCall{ns: ns.Name, changes: slices.Clone(changes), err: err})
	return err
}

func (a *fakeApplier) setFail(f func(n int, ns *warmcache.Namespace, changes []warmcache.Change) error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fail = f
}

// applied returns the changes of the calls that succeeded, in order of
// the calls, each call's changes sorted by key.
func (a *fakeApplier) applied(ns string) []warmcache.Change {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []warmcache.Change
	for _, c := range a.calls {
		if c.ns == ns && c.err == nil {
			out = append(out, sortedChanges(c.changes)...)
		}
	}
	return out
}

func (a *fakeApplier) callCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.calls)
}

func sortedChanges(changes []warmcache.Change) []warmcache.Change {
	out := slices.Clone(changes)
	slices.SortFunc(out, func(a, b warmcache.Change) int {
		return cmp.Or(cmp.Compare(a.Key.Text, b.Key.Text), cmp.Compare(a.Entry.Version, b.Entry.Version))
	})
	return out
}

// appliedOnce fails the test unless want are the changes applied to ns,
// each once.
func appliedOnce(t *testing.T, a *fakeApplier, ns string, want ...warmcache.Change) {
	t.Helper()
	got := sortedChanges(a.applied(ns))
	want = sortedChanges(want)
	if !slices.EqualFunc(got, want, equalChange) {
		t.Errorf("applied to %s:\n got %v\nwant %v", ns, got, want)
	}
}

func equalChange(a, b warmcache.Change) bool {
	return a.Key == b.Key && a.Refresh == b.Refresh && a.Entry.Found == b.Entry.Found &&
		a.Entry.Version == b.Entry.Version && bytes.Equal(a.Entry.Value, b.Entry.Value)
}

// refresh is the change of a key known to have changed at version.
func refresh(ns *warmcache.Namespace, key string, version int64) warmcache.Change {
	return warmcache.Change{Key: mustKey(ns, key), Entry: warmcache.Entry{Version: version}, Refresh: true}
}

// absent is the change of a key deleted at version.
func absent(ns *warmcache.Namespace, key string, version int64) warmcache.Change {
	return warmcache.Change{Key: mustKey(ns, key), Entry: warmcache.Entry{Version: version}}
}

// present is the change of a key written with value at version.
func present(ns *warmcache.Namespace, key, value string, version int64) warmcache.Change {
	return warmcache.Change{Key: mustKey(ns, key), Entry: warmcache.Entry{Found: true, Value: []byte(value), Version: version}}
}

func mustKey(ns *warmcache.Namespace, raw string) warmcache.Key {
	k, err := ns.ParseKey(raw)
	if err != nil {
		panic(err)
	}
	return k
}

// fakePollStore is a warehouse of tables with one row per key, and a
// delete log. err, when set for a method's name, is what that method
// returns until it is cleared.
type fakePollStore struct {
	mu      sync.Mutex
	rows    map[string]map[string]int64 // namespace -> key -> version
	deleted []warmcache.ChangedKey
	err     map[string]error
	calls   map[string]int
	afters  []int64 // the after of each Changed call
	prunes  []time.Duration
	// onCall, when set, is called at the start of each call with the
	// method's name.
	onCall func(method string)
}

func newFakePollStore() *fakePollStore {
	return &fakePollStore{rows: map[string]map[string]int64{}, err: map[string]error{}, calls: map[string]int{}}
}

var _ PollStore = (*fakePollStore)(nil)

// write commits a row of ns at version.
func (s *fakePollStore) write(ns, key string, version int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rows[ns] == nil {
		s.rows[ns] = map[string]int64{}
	}
	s.rows[ns][key] = version
}

// remove commits the delete of a row of ns, logged at version.
func (s *fakePollStore) remove(ns, key string, version int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.rows[ns], key)
	s.deleted = append(s.deleted, warmcache.ChangedKey{Namespace: ns, Key: key, Version: version})
}

func (s *fakePollStore) setErr(method string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err[method] = err
}

func (s *fakePollStore) count(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

func (s *fakePollStore) call(method string) error {
	if s.onCall != nil {
		s.onCall(method)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[method]++
	return s.err[method]
}

// above returns rows above after, oldest first, at most limit.
func above(rows []warmcache.ChangedKey, after int64, limit int) []warmcache.ChangedKey {
	var out []warmcache.ChangedKey
	for _, r := range rows {
		if r.Version > after {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b warmcache.ChangedKey) int { return cmp.Compare(a.Version, b.Version) })
	return out[:min(limit, len(out))]
}

func (s *fakePollStore) Changed(_ context.Context, ns *warmcache.Namespace, after int64, limit int) ([]warmcache.ChangedKey, error) {
	if err := s.call("Changed"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.afters = append(s.afters, after)
	var rows []warmcache.ChangedKey
	for k, v := range s.rows[ns.Name] {
		rows = append(rows, warmcache.ChangedKey{Key: k, Version: v})
	}
	return above(rows, after, limit), nil
}

func (s *fakePollStore) Newest(_ context.Context, ns *warmcache.Namespace) (int64, error) {
	if err := s.call("Newest"); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var newest int64
	for _, v := range s.rows[ns.Name] {
		newest = max(newest, v)
	}
	return newest, nil
}

func (s *fakePollStore) Deleted(_ context.Context, after int64, limit int) ([]warmcache.ChangedKey, error) {
	if err := s.call("Deleted"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return above(s.deleted, after, limit), nil
}

func (s *fakePollStore) NewestDeleted(context.Context) (int64, error) {
	if err := s.call("NewestDeleted"); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var newest int64
	for _, r := range s.deleted {
		newest = max(newest, r.Version)
	}
	return newest, nil
}

func (s *fakePollStore) PruneDeleted(_ context.Context, age time.Duration) (int64, error) {
	if err := s.call("PruneDeleted"); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prunes = append(s.prunes, age)
	return 0, nil
}

// fakeGenerationStore is the warehouse's table of generations.
type fakeGenerationStore struct {
	mu    sync.Mutex
	gens  map[string]int64
	err   error // returned by Generations and BumpGeneration while set
	bumps []string
	// onRead, when set, is called at the start of each Generations.
	onRead func()
}

var _ GenerationStore = (*fakeGenerationStore)(nil)

func (s *fakeGenerationStore) Generations(context.Context) (map[string]int64, error) {
	if s.onRead != nil {
		s.onRead()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	out := make(map[string]int64, len(s.gens))
	for k, v := range s.gens {
		out[k] = v
	}
	return out, nil
}

func (s *fakeGenerationStore) BumpGeneration(_ context.Context, name string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, s.err
	}
	if s.gens == nil {
		s.gens = map[string]int64{}
	}
	s.gens[name]++
	s.bumps = append(s.bumps, name)
	return s.gens[name], nil
}

func (s *fakeGenerationStore) set(name string, gen int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gens == nil {
		s.gens = map[string]int64{}
	}
	s.gens[name] = gen
}

func (s *fakeGenerationStore) setErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// hotGenerations is the hot tier's side of the generations: it moves a
// namespace only forwards, as rediscache's SetGeneration does.
type hotGenerations struct {
	mu    sync.Mutex
	gens  map[string]int64
	moved []string // the namespaces whose near caches were dropped
}

func (h *hotGenerations) move(name string, gen int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gens == nil {
		h.gens = map[string]int64{}
	}
	if gen <= h.gens[name] {
		return false
	}
	h.gens[name] = gen
	return true
}

func (h *hotGenerations) dropped(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.moved = append(h.moved, name)
}

func (h *hotGenerations) gen(name string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gens[name]
}

func (h *hotGenerations) drops() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.moved)
}

// testLog returns a logger that writes to buf, or discards when buf is
// nil.
func testLog(buf *syncBuffer) *slog.Logger {
	var w io.Writer = io.Discard
	if buf != nil {
		w = buf
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// testMetrics returns the metrics of one instance on a new registry.
func testMetrics(t *testing.T) (*metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

package warmcache_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/loadfmt"
	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// tableWarm is an in-memory warehouse with the non-key query and the bulk
// load, for the Query and Load protocol. Values are compared as text.
type tableWarm struct {
	mu       sync.Mutex
	rows     map[string]warmcache.Entry
	keys     []warmcache.Key
	version  int64
	queryErr error
	lastLoad []warmcache.LoadRow // the rows the last Load saw
}

func newTableWarm() *tableWarm { return &tableWarm{rows: map[string]warmcache.Entry{}} }

func (w *tableWarm) LookupMany(ctx context.Context, ns *warmcache.Namespace, keys []warmcache.Key) ([]warmcache.Entry, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]warmcache.Entry, len(keys))
	for i, k := range keys {
		out[i] = w.rows[k.Text]
	}
	return out, nil
}

func (w *tableWarm) Write(ctx context.Context, ns *warmcache.Namespace, writes []warmcache.Write) ([]warmcache.Entry, error) {
	return nil, errors.New("not used")
}

func (w *tableWarm) Ping(context.Context) error { return nil }

// Query matches when the value contains match as a substring, which is
// enough to test the protocol around it.
func (w *tableWarm) Query(ctx context.Context, ns *warmcache.Namespace, match []byte, limit int, after *warmcache.Key) ([]warmcache.QueryRow, error) {
	if w.queryErr != nil {
		return nil, w.queryErr
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	inner := strings.TrimSuffix(strings.TrimPrefix(string(match), "{"), "}")
	var out []warmcache.QueryRow
	for _, k := range w.keys {
		if after != nil && k.Int <= after.Int {
			continue
		}
		e := w.rows[k.Text]
		if strings.Contains(string(e.Value), inner) && len(out) < limit {
			out = append(out, warmcache.QueryRow{Key: k, Entry: e})
		}
	}
	return out, nil
}

// Load commits only when the rows end without error.
func (w *tableWarm) Load(ctx context.Context, ns *warmcache.Namespace, rows warmcache.LoadRows) (warmcache.LoadCounts, error) {
	var seen []warmcache.LoadRow
	for rows.Next() {
		seen = append(seen, rows.Row())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastLoad = seen
	if err := rows.Err(); err != nil {
		return warmcache.LoadCounts{}, err
	}
	var c warmcache.LoadCounts
	for _, r := range seen {
		cur, ok := w.rows[r.Key.Text]
		switch {
		case ok && string(cur.Value) == string(r.Value):
			c.Unchanged++
			continue
		case ok:
			c.Updated++
		default:
			c.Inserted++
			w.keys = append(w.keys, r.Key)
		}
		w.version++
		w.rows[r.Key.Text] = warmcache.Entry{Value: r.Value, Version: w.version, Found: true}
		c.Changed = append(c.Changed, r.Key)
	}
	return c, nil
}

// countingHot is a hot tier that counts its calls and can fail the first
// fills.
type countingHot struct {
	mu        sync.Mutex
	entries   map[string]warmcache.Entry
	calls     int
	failFills int
}

func (h *countingHot) GetMany(ctx context.Context, ns *warmcache.Namespace, keys []warmcache.Key) ([]warmcache.Entry, []bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	es, hits := make([]warmcache.Entry, len(keys)), make([]bool, len(keys))
	for i, k := range keys {
		es[i], hits[i] = h.entries[k.Text]
	}
	return es, hits, nil
}

func (h *countingHot) FillMany(ctx context.Context, ns *warmcache.Namespace, fills []warmcache.Fill) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	if h.failFills > 0 {
		h.failFills--
		return errors.New("hot tier down")
	}
	for _, f := range fills {
		if cur, ok := h.entries[f.Key.Text]; ok && cur.Version >= f.Entry.Version {
			continue
		}
		h.entries[f.Key.Text] = f.Entry
	}
	return nil
}

func (h *countingHot) Ping(context.Context) error { return nil }

func newQLService(t *testing.T, hot warmcache.Hot, warm warmcache.Warm, nss ...*warmcache.Namespace) *warmcache.Service {
	t.Helper()
	svc, err := warmcache.NewService(hot, warm, nss, prometheus.NewRegistry(), slog.New(slog.DiscardHandler), warmcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func itemsNamespace() *warmcache.Namespace {
	return &warmcache.Namespace{Name: "items", Table: "items", KeyColumn: "key", KeyType: warmcache.KeyBigint,
		Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version", Writable: true}
}

func TestQueryPagesWithoutHotTier(t *testing.T) {
	warm := newTableWarm()
	for i := 1; i <= 25; i++ {
		k := warmcache.Key{Text: strconv.Itoa(i), Int: int64(i)}
		warm.keys = append(warm.keys, k)
		color := "red"
		if i%2 == 0 {
			color = "blue"
		}
		warm.rows[k.Text] = warmcache.Entry{Value: []byte(`{"color":"` + color + `"}`), Version: int64(i), Found: true}
	}
	hot := &countingHot{entries: map[string]warmcache.Entry{}}
	svc := newQLService(t, hot, warm, itemsNamespace())
	var got []string
	cursor := ""
	for pages := 1; ; pages++ {
		page, err := svc.Query(context.Background(), "items", []byte(` {"color": "red"} `), 5, cursor)
		if err != nil {
			t.Fatalf("Query page %d: %v", pages, err)
		}
		for _, r := range page.Rows {
			got = append(got, r.Key.Text)
		}
		if page.Next == "" {
			if pages != 3 {
				t.Fatalf("%d pages, want 3", pages)
			}
			break
		}
		if body, _, _ := strings.Cut(page.Next, "."); strings.Contains(body, strconv.Itoa(int(page.Rows[len(page.Rows)-1].Key.Int))) {
			t.Errorf("cursor %q shows the key in clear text", page.Next)
		}
		cursor = page.Next
	}
	want := "1,3,5,7,9,11,13,15,17,19,21,23,25"
	if strings.Join(got, ",") != want {
		t.Fatalf("keys = %s, want %s", strings.Join(got, ","), want)
	}
	if hot.calls != 0 {
		t.Fatalf("the hot tier was called %d times by queries, want 0", hot.calls)
	}
}

func TestQueryErrors(t *testing.T) {
	warm := newTableWarm()
	svc := newQLService(t, &countingHot{entries: map[string]warmcache.Entry{}}, warm, itemsNamespace())
	timedOut := newTableWarm()
	timedOut.queryErr = errors.Join(errors.New("pgstore: statement timeout"), context.DeadlineExceeded)
	slow := newQLService(t, &countingHot{entries: map[string]warmcache.Entry{}}, timedOut, itemsNamespace())
	plain := newQLService(t, &countingHot{entries: map[string]warmcache.Entry{}}, memtier.NewWarm(), itemsNamespace())
	tests := []struct {
		name      string
		svc       *warmcache.Service
		namespace string
		match     string
		limit     int
		cursor    string
		want      error
	}{
		{"unknown namespace", svc, "nope", `{}`, 0, "", warmcache.ErrUnknownNamespace},
		{"array match", svc, "items", `[1]`, 0, "", warmcache.ErrInvalidValue},
		{"invalid JSON", svc, "items", `{"a":`, 0, "", warmcache.ErrInvalidValue},
		{"no match", svc, "items", ``, 0, "", warmcache.ErrInvalidValue},
		{"negative limit", svc, "items", `{}`, -1, "", warmcache.ErrInvalidValue},
		{"limit over the maximum", svc, "items", `{}`, warmcache.MaxQueryLimit + 1, "", warmcache.ErrTooLarge},
		{"forged cursor", svc, "items", `{}`, 0, "bm90LWEtY3Vyc29y", warmcache.ErrInvalidValue},
		{"cursor not base64", svc, "items", `{}`, 0, "%%%", warmcache.ErrInvalidValue},
		// base64url of "k2:5" with a tag of 16 zero bytes, and the old
		// unsigned form of key 5: neither was signed by this service.
		{"cursor with a forged tag", svc, "items", `{}`, 0, "azI6NQ.AAAAAAAAAAAAAAAAAAAAAA", warmcache.ErrInvalidValue},
		{"unsigned cursor", svc, "items", `{}`, 0, "azE6NQ", warmcache.ErrInvalidValue},
		{"NUL in match", svc, "items", `{"a":"\u0000"}`, 0, "", warmcache.ErrInvalidValue},
		{"invalid UTF-8 in match", svc, "items", "{\"a\":\"\xff\"}", 0, "", warmcache.ErrInvalidValue},
		{"huge exponent in match", svc, "items", `{"a":1e999999999}`, 0, "", warmcache.ErrInvalidValue},
		{"number of 2000 digits in match", svc, "items", `{"a":` + strings.Repeat("9", 2000) + `}`, 0, "", warmcache.ErrInvalidValue},
		{"match too deep", svc, "items", strings.Repeat(`{"a":`, 33) + `1` + strings.Repeat(`}`, 33), 0, "", warmcache.ErrInvalidValue},
		{"statement timeout", slow, "items", `{}`, 0, "", context.DeadlineExceeded},
		{"warehouse without queries", plain, "items", `{}`, 0, "", warmcache.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.svc.Query(context.Background(), tt.namespace, []byte(tt.match), tt.limit, tt.cursor)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Query error = %v, want %v", err, tt.want)
			}
		})
	}
}

// sliceReader is a RecordReader over records and per-record errors.
type sliceReader struct {
	recs []warmcache.LoadRecord
	errs []error
	i    int
}

func (r *sliceReader) Read() (warmcache.LoadRecord, error) {
	if r.i >= len(r.recs) {
		return warmcache.LoadRecord{}, io.EOF
	}
	r.i++
	return r.recs[r.i-1], r.errs[r.i-1]
}

func TestLoadRefreshesHotTier(t *testing.T) {
	warm := newTableWarm()
	hot := &countingHot{entries: map[string]warmcache.Entry{}}
	svc := newQLService(t, hot, warm, itemsNamespace())
	ctx := context.Background()

	res, err := svc.Load(ctx, "items", loadfmt.NewNDJSON(strings.NewReader(
		`{"key":1,"value":{"v":1}}`+"\n"+`{"key":"2","value":{"v":2}}`+"\n\n"+`{"key":3,"value":{"v":3}}`+"\n"), 0))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if res.Lines != 3 || res.Inserted != 3 || res.Refreshed != 3 || res.NotRefreshed != 0 {
		t.Fatalf("Load = %+v, want 3 lines inserted and refreshed", res)
	}
	// A reader caches key 2 at its current version; the reload changes it
	// while the hot tier fails twice, and the refresh retries.
	if _, err := svc.Get(ctx, "items", "2"); err != nil {
		t.Fatal(err)
	}
	hot.mu.Lock()
	hot.failFills = 2
	hot.mu.Unlock()
	res, err = svc.Load(ctx, "items", loadfmt.NewNDJSON(strings.NewReader(
		`{"key":1,"value":{"v":1}}`+"\n"+`{"key":2,"value":{"v":"two"}}`), 0))
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	if res.Unchanged != 1 || res.Updated != 1 || res.Refreshed != 1 {
		t.Fatalf("reload = %+v, want 1 unchanged, 1 updated and refreshed", res)
	}
	item, err := svc.Get(ctx, "items", "2")
	if err != nil || string(item.Entry.Value) != `{"v":"two"}` || item.Source != warmcache.SourceHot {
		t.Fatalf("Get after reload = %+v (%s), %v; want the new value from the hot tier", item, item.Entry.Value, err)
	}
}

func TestLoadBadLines(t *testing.T) {
	warm := newTableWarm()
	svc := newQLService(t, &countingHot{entries: map[string]warmcache.Entry{}}, warm, itemsNamespace())
	src := strings.Join([]string{
		`{"key":1,"value":{"ok":true}}`,
		`{"key":"x","value":{}}`,
		`{"key":3,"value":{"ok":true}}`,
		`not json`,
		`{"key":5,"value":{"ok":tru}}`,
		`{"key":6,"value":{"ok":true}}`,
	}, "\n")
	res, err := svc.Load(context.Background(), "items", loadfmt.NewNDJSON(strings.NewReader(src), 0))
	var le *warmcache.LoadError
	if !errors.As(err, &le) || !errors.Is(err, warmcache.ErrInvalidValue) {
		t.Fatalf("Load error = %v, want a *LoadError wrapping ErrInvalidValue", err)
	}
	var lines []int64
	for _, l := range le.Lines {
		lines = append(lines, l.Line)
	}
	if !slices.Equal(lines, []int64{2, 4, 5}) || le.Count != 3 || res.Lines != 6 {
		t.Fatalf("bad lines %v (count %d) of %d lines, want 2, 4, 5 of 6", lines, le.Count, res.Lines)
	}
	if !strings.Contains(err.Error(), "line 2: invalid key") {
		t.Errorf("error %q does not name line 2's problem", err)
	}
	if len(warm.rows) != 0 {
		t.Fatalf("the warehouse holds %d rows after a load with bad lines, want 0", len(warm.rows))
	}
	if warm.lastLoad != nil {
		t.Errorf("the loader was called with %d rows; a load with bad lines must not reach the warehouse", len(warm.lastLoad))
	}
}

// brokenReader yields good records, then fails as a client that stalls or
// disconnects does.
type brokenReader struct {
	n, after int
	err      error
}

func (b *brokenReader) Read() (warmcache.LoadRecord, error) {
	if b.n == b.after {
		return warmcache.LoadRecord{}, b.err
	}
	b.n++
	return warmcache.LoadRecord{Line: int64(b.n), Key: strconv.Itoa(b.n), Value: []byte(`{"ok":true}`)}, nil
}

// A source that breaks off after good records never reaches the
// warehouse: the records are spooled, and the read error is returned as
// it is, for the transport to answer.
func TestLoadBrokenSourceWritesNothing(t *testing.T) {
	warm := newTableWarm()
	svc := newQLService(t, &countingHot{entries: map[string]warmcache.Entry{}}, warm, itemsNamespace())
	stalled := errors.New("i/o timeout")
	_, err := svc.Load(context.Background(), "items", &brokenReader{after: 1000, err: stalled})
	if !errors.Is(err, stalled) {
		t.Fatalf("Load error = %v, want the source's error", err)
	}
	if warm.lastLoad != nil || len(warm.rows) != 0 {
		t.Fatalf("the loader saw %d rows and the warehouse holds %d after a broken source, want none", len(warm.lastLoad), len(warm.rows))
	}
	// The same records, ending well, are loaded from the spool in order.
	res, err := svc.Load(context.Background(), "items", &brokenReader{after: 1000, err: io.EOF})
	if err != nil || res.Inserted != 1000 || len(warm.lastLoad) != 1000 || warm.lastLoad[999].Line != 1000 {
		t.Fatalf("Load = %+v, %v; loader saw %d rows; want 1000 inserted in order", res, err, len(warm.lastLoad))
	}
}

// Over MaxLoadBytes of keys and values a load fails with ErrTooLarge,
// naming the bound, and writes nothing.
func TestLoadByteBound(t *testing.T) {
	warm := newTableWarm()
	hot := &countingHot{entries: map[string]warmcache.Entry{}}
	svc, err := warmcache.NewService(hot, warm, []*warmcache.Namespace{itemsNamespace()}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler),
		warmcache.Options{MaxLoadBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.Load(context.Background(), "items", &brokenReader{after: 100, err: io.EOF})
	if !errors.Is(err, warmcache.ErrTooLarge) || !strings.Contains(err.Error(), "1000 bytes") {
		t.Fatalf("Load error = %v, want ErrTooLarge naming 1000 bytes", err)
	}
	if warm.lastLoad != nil {
		t.Fatal("an oversized load reached the warehouse")
	}
}

// blockingReader blocks until released, as an idle client does.
type blockingReader struct{ release chan struct{} }

func (b *blockingReader) Read() (warmcache.LoadRecord, error) {
	<-b.release
	return warmcache.LoadRecord{}, io.EOF
}

// Loads over MaxLoads fail at once with ErrOverloaded instead of queueing.
func TestLoadConcurrencyBound(t *testing.T) {
	warm := newTableWarm()
	hot := &countingHot{entries: map[string]warmcache.Entry{}}
	svc, err := warmcache.NewService(hot, warm, []*warmcache.Namespace{itemsNamespace()}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler),
		warmcache.Options{MaxLoads: 2})
	if err != nil {
		t.Fatal(err)
	}
	idle := &blockingReader{release: make(chan struct{})}
	var wg sync.WaitGroup
	started := make(chan struct{}, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started <- struct{}{}
			_, _ = svc.Load(context.Background(), "items", idle)
		}()
	}
	<-started
	<-started
	// The two idle loads hold both slots once they are in Read; poll
	// until a third is refused (never more than a bounded number of tries).
	var refused error
	for range 1000 {
		_, refused = svc.Load(context.Background(), "items", &brokenReader{after: 0, err: io.EOF})
		if errors.Is(refused, warmcache.ErrOverloaded) {
			break
		}
		runtime.Gosched()
	}
	close(idle.release)
	wg.Wait()
	if !errors.Is(refused, warmcache.ErrOverloaded) || !strings.Contains(refused.Error(), "more than 2 loads") {
		t.Fatalf("a third load with two in progress: %v, want ErrOverloaded naming the bound", refused)
	}
}

func TestLoadReadOnly(t *testing.T) {
	ns := itemsNamespace()
	ns.Writable = false
	svc := newQLService(t, &countingHot{entries: map[string]warmcache.Entry{}}, newTableWarm(), ns)
	_, err := svc.Load(context.Background(), "items", &sliceReader{})
	if !errors.Is(err, warmcache.ErrReadOnly) {
		t.Fatalf("Load error = %v, want ErrReadOnly", err)
	}
}

// A cursor is signed: a service with the same cursor key resumes it, one
// with another key (or a per-process random key) refuses it.
func TestQueryCursorSigned(t *testing.T) {
	warm := newTableWarm()
	opts := func(key string) warmcache.Options { return warmcache.Options{CursorKey: []byte(key)} }
	mk := func(o warmcache.Options) *warmcache.Service {
		svc, err := warmcache.NewService(&countingHot{entries: map[string]warmcache.Entry{}}, warm, []*warmcache.Namespace{itemsNamespace()},
			prometheus.NewRegistry(), slog.New(slog.DiscardHandler), o)
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	a, same, other, random := mk(opts("k-one")), mk(opts("k-one")), mk(opts("k-two")), mk(warmcache.Options{})
	for i := int64(1); i <= 3; i++ {
		k := warmcache.Key{Text: strconv.FormatInt(i, 10), Int: i}
		warm.keys = append(warm.keys, k)
		warm.rows[k.Text] = warmcache.Entry{Value: []byte(`{"x":1}`), Version: i, Found: true}
	}
	page, err := a.Query(context.Background(), "items", []byte(`{"x":1}`), 1, "")
	if err != nil || page.Next == "" {
		t.Fatalf("first page: %+v, %v", page, err)
	}
	if p, err := same.Query(context.Background(), "items", []byte(`{"x":1}`), 1, page.Next); err != nil || len(p.Rows) != 1 || p.Rows[0].Key.Text != "2" {
		t.Fatalf("the same key resumes at %+v, %v; want key 2", p, err)
	}
	for name, svc := range map[string]*warmcache.Service{"another key": other, "a random key": random} {
		if _, err := svc.Query(context.Background(), "items", []byte(`{"x":1}`), 1, page.Next); !errors.Is(err, warmcache.ErrInvalidValue) {
			t.Errorf("%s accepted the cursor: %v", name, err)
		}
	}
}

package warmcache_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/nearcache"
	"github.com/warmcache/warmcache/internal/warmcache"
)

func widgets() *warmcache.Namespace {
	return &warmcache.Namespace{Name: "widgets", Table: "widgets", KeyColumn: "key", KeyType: warmcache.KeyBigint,
		Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version", Writable: true}
}

func newService(tb testing.TB, hot warmcache.Hot, warm warmcache.Warm, nss ...*warmcache.Namespace) *warmcache.Service {
	tb.Helper()
	if len(nss) == 0 {
		nss = []*warmcache.Namespace{widgets()}
	}
	s, err := warmcache.NewService(hot, warm, nss, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)), warmcache.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func TestGetMissThenHit(t *testing.T) {
	hot, warm := memtier.NewHot(nil), memtier.NewWarm()
	svc := newService(t, hot, warm)
	ctx := context.Background()
	if _, err := svc.Put(ctx, "widgets", "42", []byte(`{"id":"42"}`), nil); err != nil {
		t.Fatal(err)
	}
	hot.Forget() // forget the write's fill

	item, err := svc.Get(ctx, "widgets", "042")
	if err != nil {
		t.Fatal(err)
	}
	if item.Source != warmcache.SourceWarm || string(item.Entry.Value) != `{"id":"42"}` || item.Key.Text != "42" {
		t.Fatalf("first get = %+v, want a miss with the value under key 42", item)
	}
	item, err = svc.Get(ctx, "widgets", "42")
	if err != nil || item.Source != warmcache.SourceHot {
		t.Fatalf("second get = %+v, %v; want a hit", item, err)
	}
	if n := warm.Lookups(); n != 1 {
		t.Fatalf("warehouse lookups = %d, want 1", n)
	}
}

func TestGetAbsentIsCachedNegative(t *testing.T) {
	hot, warm := memtier.NewHot(nil), memtier.NewWarm()
	svc := newService(t, hot, warm)
	for i := 0; i < 3; i++ {
		_, err := svc.Get(context.Background(), "widgets", "7")
		if !errors.Is(err, warmcache.ErrNotFound) {
			t.Fatalf("get %d: err = %v, want ErrNotFound", i, err)
		}
	}
	if n := warm.Lookups(); n != 1 {
		t.Fatalf("warehouse lookups = %d, want 1 (then negative hits)", n)
	}
}

func TestWriteThenReadSeesNewVersion(t *testing.T) {
	hot, warm := memtier.NewHot(nil), memtier.NewWarm()
	svc := newService(t, hot, warm)
	ctx := context.Background()
	first, err := svc.Put(ctx, "widgets", "1", []byte(`1`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Get(ctx, "widgets", "1"); err != nil {
		t.Fatal(err)
	}
	second, err := svc.Put(ctx, "widgets", "1", []byte(`2`), &first.Entry.Version)
	if err != nil {
		t.Fatal(err)
	}
	got, err := svc.Get(ctx, "widgets", "1")
	if err != nil || string(got.Entry.Value) != "2" || got.Entry.Version != second.Entry.Version {
		t.Fatalf("get after put = %+v, %v; want value 2 at version %d", got, err, second.Entry.Version)
	}
	if _, err := svc.Put(ctx, "widgets", "1", []byte(`3`), &first.Entry.Version); !errors.Is(err, warmcache.ErrVersionMismatch) {
		t.Fatalf("put with a stale If-Match: err = %v, want ErrVersionMismatch", err)
	}
	if err := svc.Delete(ctx, "widgets", "1", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Get(ctx, "widgets", "1"); !errors.Is(err, warmcache.ErrNotFound) {
		t.Fatalf("get after delete: err = %v, want ErrNotFound", err)
	}
}

func TestStampedeSharesOneLookup(t *testing.T) {
	hot, warm := memtier.NewHot(nil), memtier.NewWarm()
	warm.Set("widgets", "5", []byte(`5`), 1)
	gate, started := make(chan struct{}), make(chan struct{}, 1)
	warm.SetLookupHook(memtier.Gate(started, gate))
	svc := newService(t, hot, warm)

	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	first, cancelFirst := context.WithCancel(context.Background())
	wg.Add(1)
	go func() { // the caller that starts the flight, then goes away
		defer wg.Done()
		_, err := svc.Get(first, "widgets", "5")
		if !errors.Is(err, context.Canceled) {
			errs <- err
		}
	}()
	<-started // the flight is in the warehouse
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			item, err := svc.Get(context.Background(), "widgets", "5")
			if err == nil && string(item.Entry.Value) != "5" {
				err = errors.New("wrong value " + string(item.Entry.Value))
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	waitFor(t, func() bool { return warmcache.Waiters(svc, "5") == n })
	cancelFirst()
	close(gate) // let the one lookup answer
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := warm.Lookups(); got != 1 {
		t.Fatalf("warehouse lookups = %d, want 1", got)
	}
}

func TestHotTierDownServesFromWarehouse(t *testing.T) {
	hot, warm := memtier.NewHot(nil), memtier.NewWarm()
	warm.Set("widgets", "9", []byte(`9`), 3)
	hot.SetDown(true)
	svc := newService(t, hot, warm)
	item, err := svc.Get(context.Background(), "widgets", "9")
	if err != nil || string(item.Entry.Value) != "9" || item.Source != warmcache.SourceWarm {
		t.Fatalf("get with the hot tier down = %+v, %v; want the warehouse's value", item, err)
	}
}

func TestMGet(t *testing.T) {
	hot, warm := memtier.NewHot(nil), memtier.NewWarm()
	warm.Set("widgets", "1", []byte(`1`), 1)
	warm.Set("widgets", "2", []byte(`2`), 2)
	svc := newService(t, hot, warm)
	ctx := context.Background()
	if _, err := svc.Get(ctx, "widgets", "1"); err != nil { // 1 is now hot
		t.Fatal(err)
	}
	items, err := svc.MGet(ctx, "widgets", []string{"1", "2", "999999999", "2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 3 {
		t.Fatalf("items = %d, want 3 distinct keys", len(items))
	}
	want := []struct {
		found  bool
		source warmcache.Source
	}{{true, warmcache.SourceHot}, {true, warmcache.SourceWarm}, {false, warmcache.SourceWarm}}
	for i, w := range want {
		if items[i].Entry.Found != w.found || items[i].Source != w.source {
			t.Errorf("items[%d] = %+v, want found=%v source=%s", i, items[i], w.found, w.source)
		}
	}
	if _, err := svc.MGet(ctx, "widgets", []string{"1", "x"}); !errors.Is(err, warmcache.ErrInvalidKey) {
		t.Fatalf("mget with a bad key: err = %v, want ErrInvalidKey", err)
	}
}

func TestWriteRefusals(t *testing.T) {
	ro := widgets()
	ro.Name, ro.Writable = "frozen", false
	cols := widgets()
	cols.Name, cols.Layout, cols.Columns = "orders", warmcache.LayoutColumns, []warmcache.Column{{Name: "status", Type: "text"}}
	svc := newService(t, memtier.NewHot(nil), memtier.NewWarm(), widgets(), ro, cols)
	deep := make([]byte, 0, 200)
	for i := 0; i < 100; i++ {
		deep = append(deep, '[')
	}
	for i := 0; i < 100; i++ {
		deep = append(deep, ']')
	}
	cases := []struct {
		name, ns, key, value string
		want                 error
	}{
		{"not json", "widgets", "1", `{"a":`, warmcache.ErrInvalidValue},
		{"empty", "widgets", "1", ``, warmcache.ErrInvalidValue},
		{"too deep", "widgets", "1", string(deep), warmcache.ErrInvalidValue},
		{"too large", "widgets", "1", `"` + string(make([]byte, 1<<20)) + `"`, warmcache.ErrTooLarge},
		{"read-only", "frozen", "1", `1`, warmcache.ErrReadOnly},
		{"unknown namespace", "nope", "1", `1`, warmcache.ErrUnknownNamespace},
		{"bad key", "widgets", "abc", `1`, warmcache.ErrInvalidKey},
		{"unknown column", "orders", "1", `{"colour":"red"}`, warmcache.ErrInvalidValue},
		{"columns not an object", "orders", "1", `[1]`, warmcache.ErrInvalidValue},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := svc.Put(context.Background(), c.ns, c.key, []byte(c.value), nil)
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
}

func TestConcurrentMissesFoldIntoOneQuery(t *testing.T) {
	hot, warm := memtier.NewHot(nil), memtier.NewWarm()
	for i := 0; i < 21; i++ {
		k := strconv.Itoa(i)
		warm.Set("widgets", k, []byte(k), 1)
	}
	gate, started := make(chan struct{}), make(chan struct{}, 1)
	warm.SetLookupHook(memtier.Gate(started, gate))
	svc, err := warmcache.NewService(hot, warm, []*warmcache.Namespace{widgets()}, prometheus.NewRegistry(),
		slog.New(slog.NewTextHandler(io.Discard, nil)), warmcache.Options{WarmLanes: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	get := func(k string) {
		defer wg.Done()
		if it, err := svc.Get(ctx, "widgets", k); err != nil || string(it.Entry.Value) != k {
			t.Errorf("get %s = %+v, %v", k, it, err)
		}
	}
	wg.Add(1)
	go get("0")
	<-started // key 0's query holds the only lane
	for i := 1; i <= 20; i++ {
		wg.Add(1)
		go get(strconv.Itoa(i))
	}
	waitFor(t, func() bool { return queued(svc) })
	close(gate)
	wg.Wait()
	if n := warm.Lookups(); n != 2 {
		t.Fatalf("warehouse queries = %d, want 2 (key 0, then the 20 others folded)", n)
	}
}

// queued reports whether the 20 later reads all wait for the lane.
func queued(svc *warmcache.Service) bool { return warmcache.Queued(svc) == 20 }

func TestConcurrentHitsFoldIntoOnePipeline(t *testing.T) {
	hot, warm := memtier.NewHot(nil), memtier.NewWarm()
	for i := 0; i < 21; i++ {
		k := strconv.Itoa(i)
		warm.Set("widgets", k, []byte(k), 1)
	}
	svc, err := warmcache.NewService(hot, warm, []*warmcache.Namespace{widgets()}, prometheus.NewRegistry(),
		slog.New(slog.NewTextHandler(io.Discard, nil)), warmcache.Options{HotLanes: 1, HotLaneSpill: -1, HotTimeout: time.Minute}) // no spill: the held lane stays the only one
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keys := make([]string, 21)
	for i := range keys {
		keys[i] = strconv.Itoa(i)
	}
	if _, err := svc.MGet(ctx, "widgets", keys); err != nil { // fills the hot tier
		t.Fatal(err)
	}
	gate, started := make(chan struct{}), make(chan struct{}, 1)
	hot.SetGetHook(memtier.Gate(started, gate))
	gets, lookups := hot.Gets(), warm.Lookups()
	var wg sync.WaitGroup
	get := func(k string) {
		defer wg.Done()
		if it, err := svc.Get(ctx, "widgets", k); err != nil || it.Source != warmcache.SourceHot || string(it.Entry.Value) != k {
			t.Errorf("get %s = %+v, %v; want a hit", k, it, err)
		}
	}
	wg.Add(1)
	go get("0")
	<-started // key 0's read holds the only lane
	hot.SetGetHook(nil)
	for i := 1; i <= 20; i++ {
		wg.Add(1)
		go get(strconv.Itoa(i))
	}
	waitFor(t, func() bool { return warmcache.HotQueued(svc) == 20 })
	close(gate)
	wg.Wait()
	if n := hot.Gets() - gets; n != 2 {
		t.Fatalf("hot-tier reads = %d, want 2 (key 0, then the 20 others folded)", n)
	}
	if n := warm.Lookups() - lookups; n != 0 {
		t.Fatalf("warehouse queries = %d, want none: every read was a hit", n)
	}
}

func TestMGetUsesTheNearCache(t *testing.T) {
	hot, warm := memtier.NewHot(nil), memtier.NewWarm()
	near, err := nearcache.New(nearcache.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	warm.Set("widgets", "1", []byte(`1`), 1)
	ns := widgets()
	ns.NearTTL = time.Minute
	svc, err := warmcache.NewService(hot, warm, []*warmcache.Namespace{ns}, prometheus.NewRegistry(),
		slog.New(slog.NewTextHandler(io.Discard, nil)), warmcache.Options{Near: near})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sources := func() []warmcache.Source {
		items, err := svc.MGet(ctx, "widgets", []string{"1", "2"})
		if err != nil {
			t.Fatal(err)
		}
		return []warmcache.Source{items[0].Source, items[1].Source}
	}
	if got := sources(); got[0] != warmcache.SourceWarm || got[1] != warmcache.SourceWarm {
		t.Fatalf("first mget sources = %v, want both from the warehouse", got)
	}
	if got := sources(); got[0] != warmcache.SourceNear || got[1] != warmcache.SourceNear {
		t.Fatalf("second mget sources = %v, want both from the near cache (the absent key too)", got)
	}
	put, err := svc.Put(ctx, "widgets", "1", []byte(`"new"`), nil)
	if err != nil {
		t.Fatal(err)
	}
	items, err := svc.MGet(ctx, "widgets", []string{"1"})
	if err != nil || items[0].Entry.Version != put.Entry.Version || string(items[0].Entry.Value) != `"new"` {
		t.Fatalf("mget after a write = %+v, %v; want the written version %d", items, err, put.Entry.Version)
	}
	if n := warm.Lookups(); n != 1 {
		t.Fatalf("warehouse queries = %d, want the first mget's only", n)
	}
}

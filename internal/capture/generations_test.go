package capture

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmcache/warmcache/internal/promreg/promregtest"
	"github.com/warmcache/warmcache/internal/warmcache"
)

type generationsTest struct {
	items, users *warmcache.Namespace
	g            *Generations
	store        *fakeGenerationStore
	hot          *hotGenerations
	reg          *prometheus.Registry
	log          *syncBuffer
}

func newGenerationsTest(t *testing.T) *generationsTest {
	t.Helper()
	gt := &generationsTest{store: &fakeGenerationStore{}, hot: &hotGenerations{}, reg: prometheus.NewRegistry(), log: &syncBuffer{}}
	gt.items, gt.users = testNamespaces()
	g, err := NewGenerations(gt.store, []*warmcache.Namespace{gt.items, gt.users}, gt.hot.move, gt.hot.dropped, gt.reg, testLog(gt.log))
	if err != nil {
		t.Fatal(err)
	}
	gt.g = g
	return gt
}

func (gt *generationsTest) gauge(t *testing.T, ns string) float64 {
	t.Helper()
	return promregtest.Value(t, gt.reg, "warmcache_namespace_generation", "namespace", ns)
}

// Sync moves the namespaces that are behind the warehouse, and only
// those, forwards.
func TestGenerationsSyncMovesNamespacesForward(t *testing.T) {
	gt := newGenerationsTest(t)
	if gt.gauge(t, "items") != 0 || gt.gauge(t, "users") != 0 {
		t.Errorf("generations before the first sync are not 0")
	}
	gt.store.set("items", 2)
	gt.store.set("users", 0)
	gt.store.set("orders", 5) // not a namespace of this instance
	if err := gt.g.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if gt.hot.gen("items") != 2 || gt.hot.gen("users") != 0 || gt.hot.gen("orders") != 0 {
		t.Errorf("hot tier at items %d, users %d, orders %d; want 2, 0, 0", gt.hot.gen("items"), gt.hot.gen("users"), gt.hot.gen("orders"))
	}
	if got := gt.gauge(t, "items"); got != 2 {
		t.Errorf("warmcache_namespace_generation{items} = %v, want 2", got)
	}
	if _, ok := promregtest.Lookup(t, gt.reg, "warmcache_namespace_generation", "namespace", "orders"); ok {
		t.Errorf("a generation is exposed for a namespace this instance does not serve")
	}

	// Syncing again, or from a warehouse behind the hot tier, moves
	// nothing.
	if err := gt.g.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	gt.store.set("items", 1)
	if err := gt.g.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if gt.hot.gen("items") != 2 || gt.gauge(t, "items") != 2 {
		t.Errorf("items moved backwards to %d", gt.hot.gen("items"))
	}
	if !slices.Equal(gt.hot.drops(), []string{"items"}) {
		t.Errorf("near caches dropped for %v, want [items] once", gt.hot.drops())
	}
}

// A warehouse not migrated has no table of generations: every namespace
// stays at generation 0, and that is logged once while it lasts.
func TestGenerationsMissingTable(t *testing.T) {
	gt := newGenerationsTest(t)
	missing := &pgconn.PgError{Code: pgerrcode.UndefinedTable, Message: `relation "warmcache_generations" does not exist`}
	warnings := func() int { return strings.Count(gt.log.String(), "warmcache_generations is missing") }
	gt.store.setErr(missing)
	for range 2 {
		if err := gt.g.Sync(context.Background()); err != nil {
			t.Fatalf("Sync = %v, want nil when the table is missing", err)
		}
	}
	if n := warnings(); n != 1 {
		t.Errorf("the missing table logged %d times, want once", n)
	}
	gt.store.setErr(nil)
	gt.store.set("users", 1)
	if err := gt.g.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if gt.hot.gen("users") != 1 {
		t.Errorf("users at %d once the table is there, want 1", gt.hot.gen("users"))
	}
	gt.store.setErr(missing)
	if err := gt.g.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := warnings(); n != 2 {
		t.Errorf("the table missing again logged %d times in all, want twice", n)
	}
}

func TestGenerationsSyncError(t *testing.T) {
	gt := newGenerationsTest(t)
	errDown := errors.New("connection refused")
	gt.store.setErr(errDown)
	err := gt.g.Sync(context.Background())
	if !errors.Is(err, errDown) || !strings.HasPrefix(err.Error(), "capture: ") {
		t.Errorf("Sync = %v, want the store's error with the package's prefix", err)
	}
}

func TestGenerationsBump(t *testing.T) {
	gt := newGenerationsTest(t)
	var _ warmcache.Generations = gt.g
	if err := gt.g.Bump(context.Background(), gt.users); err != nil {
		t.Fatal(err)
	}
	if err := gt.g.Bump(context.Background(), gt.users); err != nil {
		t.Fatal(err)
	}
	if gt.hot.gen("users") != 2 || gt.gauge(t, "users") != 2 {
		t.Errorf("users at %d after two bumps, want 2", gt.hot.gen("users"))
	}
	if !slices.Equal(gt.hot.drops(), []string{"users", "users"}) {
		t.Errorf("near caches dropped for %v, want users twice", gt.hot.drops())
	}
	errDown := errors.New("connection refused")
	gt.store.setErr(errDown)
	if err := gt.g.Bump(context.Background(), gt.users); !errors.Is(err, errDown) {
		t.Errorf("Bump = %v, want the store's error", err)
	}
	if gt.hot.gen("users") != 2 {
		t.Errorf("users moved to %d by a failed bump", gt.hot.gen("users"))
	}
}

func TestGenerationsBumpAll(t *testing.T) {
	gt := newGenerationsTest(t)
	gt.store.set("items", 4)
	if err := gt.g.bumpAll(context.Background(), "replication slot created"); err != nil {
		t.Fatal(err)
	}
	if gt.hot.gen("items") != 5 || gt.hot.gen("users") != 1 {
		t.Errorf("after bumping all: items %d, users %d; want 5 and 1", gt.hot.gen("items"), gt.hot.gen("users"))
	}
	slices.Sort(gt.store.bumps)
	if !slices.Equal(gt.store.bumps, []string{"items", "users"}) {
		t.Errorf("bumped %v in the warehouse, want each namespace once", gt.store.bumps)
	}
	errDown := errors.New("connection refused")
	gt.store.setErr(errDown)
	if err := gt.g.bumpAll(context.Background(), "lost"); !errors.Is(err, errDown) {
		t.Errorf("bumpAll = %v, want the store's error", err)
	}
}

// Run syncs every interval until its context ends, and goes on after a
// failed read.
func TestGenerationsRun(t *testing.T) {
	gt := newGenerationsTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	reads := make(chan int)
	n := 0
	gt.store.onRead = func() {
		n++
		switch n {
		case 1:
			gt.store.setErr(errors.New("connection refused"))
		case 2:
			gt.store.setErr(nil)
			gt.store.set("items", 3)
		}
		select {
		case reads <- n:
		case <-ctx.Done():
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		gt.g.Run(ctx, time.Millisecond)
	}()
	for want := 1; want <= 3; want++ {
		if got := <-reads; got != want {
			t.Fatalf("read %d, want %d", got, want)
		}
	}
	cancel()
	<-done
	if gt.hot.gen("items") != 3 {
		t.Errorf("items at %d after Run, want 3", gt.hot.gen("items"))
	}
	if !strings.Contains(gt.log.String(), "generations not read") {
		t.Errorf("a failed read is not logged")
	}
}

func TestNewGenerationsRegistersItsMetric(t *testing.T) {
	gt := newGenerationsTest(t)
	_, err := NewGenerations(gt.store, []*warmcache.Namespace{gt.items}, gt.hot.move, nil, gt.reg, testLog(nil))
	if err == nil {
		t.Errorf("NewGenerations registered its metric twice on one registry")
	}
	// moved may be nil.
	g, err := NewGenerations(gt.store, []*warmcache.Namespace{gt.items}, gt.hot.move, nil, prometheus.NewRegistry(), testLog(nil))
	if err != nil {
		t.Fatal(err)
	}
	gt.store.set("items", 1)
	if err := g.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if gt.hot.gen("items") != 1 {
		t.Errorf("items at %d, want 1", gt.hot.gen("items"))
	}
}

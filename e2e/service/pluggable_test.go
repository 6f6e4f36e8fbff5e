//go:build daprd

package service_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/dapr/components-contrib/metadata"
	"github.com/dapr/components-contrib/state"
	daprstate "github.com/dapr/dapr/pkg/components/state"
	"github.com/dapr/kit/logger"

	"github.com/warmcache/warmcache/e2e/internal/harness"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/testproc"
)

// startPluggable migrates a fresh database and runs `warmcache serve` with
// the pluggable component "statestore" (text keys for daprd's "appid||key",
// opaque byte values) on a socket folder of its own, as
// a daprd beside it would find it, until the test ends. It returns the
// socket. With nearTTL set, the component's namespace has that near_ttl and
// the service a near cache.
func startPluggable(t *testing.T, nearTTL string) string {
	t.Helper()
	dir := harness.SocketDir(t, "wc-pluggable-")
	var settings []string
	if nearTTL != "" {
		settings = append(settings, "near_ttl: "+nearTTL)
	}
	env := map[string]string{
		"WARMCACHE_POSTGRES_DSN": testenv.NewDatabase(t),
		"WARMCACHE_NAMESPACES_FILE": harness.WriteFile(t, "namespaces.yaml",
			harness.NamespacesYAML(harness.BytesNamespace("statestore", "dapr_state", harness.Writable(settings...)...))),
		// daprd's own variable names the components folder.
		"DAPR_COMPONENTS_SOCKETS_FOLDER": filepath.Join(dir, "sockets"),
	}
	if nearTTL != "" {
		env["WARMCACHE_NEAR_CACHE_BYTES"] = "16777216"
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"migrate", "up"}, env, &out, &errOut); err != nil {
		t.Fatalf("migrate up: %v\n%s%s", err, out.String(), errOut.String())
	}
	env["WARMCACHE_REDIS_ADDRS"] = testenv.RedisAddr(t)
	env["WARMCACHE_REDIS_PREFIX"] = "pluggable-" + testenv.RandomSuffix(t) + ":"
	env["WARMCACHE_HOT_TIMEOUT"] = "1s"
	// Writes go through the component: polling suffices, and leaves no
	// replication slot for the database's drop to race with.
	env["WARMCACHE_FRESHNESS"] = "poll"

	// HTTP, gRPC, the pluggable component, and without keys the
	// open-access notice.
	s := harness.Serve(t, env, 4, "--dapr-components", "statestore")
	if want := filepath.Join(dir, "sockets", "warmcache.sock"); s.DaprSocket != want {
		t.Fatalf("socket %q; want %s, in DAPR_COMPONENTS_SOCKETS_FOLDER (printed %q)", s.DaprSocket, want, s.Lines)
	}
	return s.DaprSocket
}

// pluggableStore is what daprd's client for a pluggable state store
// offers: the store's and the transactions' calls.
type pluggableStore interface {
	state.Store
	state.TransactionalStore
}

// openPluggable returns daprd's client for pluggable state stores on
// socket, initialised as the component "statestore", closed when the test
// ends.
func openPluggable(ctx context.Context, t *testing.T, socket string) pluggableStore {
	t.Helper()
	store := daprstate.NewGRPCStateStore(logger.NewLogger("warmcache-test"), socket)
	// daprd initialises the component named in its YAML (metadata.name).
	if err := store.Init(ctx, state.Metadata{Base: metadata.Base{Name: "statestore"}}); err != nil {
		t.Fatalf("Init: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// TestDaprPluggable drives TestDaprGoSDK's scenario through the pluggable
// component, with the client daprd uses for pluggable state stores: what
// an application's state calls become once daprd serves them.
func TestDaprPluggable(t *testing.T) {
	socket := startPluggable(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store := openPluggable(ctx, t, socket)
	strong := state.GetStateOption{Consistency: state.Strong}
	get := func(t *testing.T, key string) *state.GetResponse {
		t.Helper()
		r, err := store.Get(ctx, &state.GetRequest{Key: key, Options: strong})
		if err != nil {
			t.Fatalf("Get %s: %v", key, err)
		}
		return r
	}
	wantETag := func(t *testing.T, what string, err error, kind state.ETagErrorKind) {
		t.Helper()
		var etagErr *state.ETagError
		if !errors.As(err, &etagErr) || etagErr.Kind() != kind {
			t.Fatalf("%s: %v; want an ETag error (%s)", what, err, kind)
		}
	}
	// daprd prefixes every key with the application's ID.
	const app = "orders||"
	value := make([]byte, 256)
	for i := range value {
		value[i] = byte(i)
	}

	t.Run("save get delete", func(t *testing.T) {
		if err := store.Set(ctx, &state.SetRequest{Key: app + "order-1", Value: value}); err != nil {
			t.Fatalf("Set: %v", err)
		}
		it := get(t, app+"order-1")
		if !bytes.Equal(it.Data, value) || it.ETag == nil || *it.ETag == "" {
			t.Fatalf("Get = %v; want the saved bytes with an ETag", it)
		}
		if it.Metadata["warmcache-source"] != "miss" {
			t.Errorf("strong Get came from %q, want the warehouse (miss)", it.Metadata["warmcache-source"])
		}
		ev, err := store.Get(ctx, &state.GetRequest{Key: app + "order-1", Options: state.GetStateOption{Consistency: state.Eventual}})
		if err != nil || *ev.ETag != *it.ETag || ev.Metadata["warmcache-source"] != "hit" {
			t.Fatalf("eventual Get = %v, %v; want a cache hit at ETag %s", ev, err, *it.ETag)
		}
		if err := store.Delete(ctx, &state.DeleteRequest{Key: app + "order-1"}); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if gone := get(t, app+"order-1"); gone.Data != nil || gone.ETag != nil {
			t.Fatalf("Get after delete = %v; want an empty item", gone)
		}
		if err := store.Delete(ctx, &state.DeleteRequest{Key: app + "order-1"}); err != nil {
			t.Fatalf("Delete of an absent key: %v; want no error, as Dapr stores answer", err)
		}
	})

	t.Run("etag conflicts", func(t *testing.T) {
		if err := store.Set(ctx, &state.SetRequest{Key: app + "acct", Value: []byte("10")}); err != nil {
			t.Fatal(err)
		}
		v1 := get(t, app+"acct").ETag
		firstWrite := state.SetStateOption{Concurrency: state.FirstWrite}
		if err := store.Set(ctx, &state.SetRequest{Key: app + "acct", Value: []byte("20"), ETag: v1, Options: firstWrite}); err != nil {
			t.Fatalf("Set at the current ETag: %v", err)
		}
		err := store.Set(ctx, &state.SetRequest{Key: app + "acct", Value: []byte("30"), ETag: v1, Options: firstWrite})
		wantETag(t, "first-write Set at a stale ETag", err, state.ETagMismatch)
		err = store.Delete(ctx, &state.DeleteRequest{Key: app + "acct", ETag: v1, Options: state.DeleteStateOption{Concurrency: state.FirstWrite}})
		wantETag(t, "first-write Delete at a stale ETag", err, state.ETagMismatch)
		bad := "not-a-version"
		err = store.Set(ctx, &state.SetRequest{Key: app + "acct", Value: []byte("{}"), ETag: &bad, Options: firstWrite})
		wantETag(t, "an ETag that is no version", err, state.ETagInvalid)
		if now := get(t, app+"acct"); string(now.Data) != "20" {
			t.Fatalf("after the conflicts Get = %q; want 20", now.Data)
		}
		// last-write holds the ETag too, as state.postgresql does.
		err = store.Set(ctx, &state.SetRequest{Key: app + "acct", Value: []byte("40"), ETag: v1,
			Options: state.SetStateOption{Concurrency: state.LastWrite}})
		wantETag(t, "last-write Set at a stale ETag", err, state.ETagMismatch)
		err = store.Delete(ctx, &state.DeleteRequest{Key: app + "acct", ETag: v1, Options: state.DeleteStateOption{Concurrency: state.LastWrite}})
		wantETag(t, "last-write Delete at a stale ETag", err, state.ETagMismatch)
		// first-write without an ETag only creates.
		if err := store.Set(ctx, &state.SetRequest{Key: app + "acct", Value: []byte("50"), Options: firstWrite}); err == nil {
			t.Fatal("first-write create of an existing key succeeded")
		}
		if err := store.Set(ctx, &state.SetRequest{Key: app + "fresh-acct", Value: []byte("1"), Options: firstWrite}); err != nil {
			t.Fatalf("first-write create of a new key: %v", err)
		}
		cur := get(t, app+"acct").ETag
		if err := store.Delete(ctx, &state.DeleteRequest{Key: app + "acct", ETag: cur,
			Options: state.DeleteStateOption{Concurrency: state.FirstWrite}}); err != nil {
			t.Fatalf("Delete at the current ETag: %v", err)
		}
	})

	t.Run("bulk", func(t *testing.T) {
		if err := store.BulkSet(ctx, []state.SetRequest{
			{Key: app + "b1", Value: []byte("n1")}, {Key: app + "b2", Value: []byte("n2")}, {Key: app + "b3", Value: []byte("n3")},
		}, state.BulkStoreOpts{}); err != nil {
			t.Fatalf("BulkSet: %v", err)
		}
		keys := []string{"b1", "b2", "missing", "b3", "b1"}
		reqs := make([]state.GetRequest, len(keys))
		for i, k := range keys {
			reqs[i] = state.GetRequest{Key: app + k}
		}
		got, err := store.BulkGet(ctx, reqs, state.BulkGetOpts{})
		if err != nil || len(got) != 5 {
			t.Fatalf("BulkGet = %d items, %v; want 5", len(got), err)
		}
		for i, want := range []string{"n1", "n2", "", "n3", "n1"} {
			if string(got[i].Data) != want || (want != "") != (got[i].ETag != nil) {
				t.Errorf("item %d (%s) = %q etag %v; want %q", i, got[i].Key, got[i].Data, got[i].ETag, want)
			}
		}
		if err := store.BulkDelete(ctx, []state.DeleteRequest{{Key: app + "b1"}, {Key: app + "b2"}, {Key: app + "never-there"}},
			state.BulkStoreOpts{}); err != nil {
			t.Fatalf("BulkDelete: %v", err)
		}
		left, err := store.BulkGet(ctx, reqs[:4], state.BulkGetOpts{})
		if err != nil || left[0].Data != nil || left[1].Data != nil || string(left[3].Data) != "n3" {
			t.Fatalf("after BulkDelete: %+v, %v; want only b3", left, err)
		}
		// One stale ETag in a bulk set: daprd's client sees an ETag
		// mismatch, and the item whose ETag holds is written.
		stale := "9000000000000000000"
		err = store.BulkSet(ctx, []state.SetRequest{
			{Key: app + "b3", Value: []byte("n3b"), ETag: left[3].ETag}, {Key: app + "b4", Value: []byte("n4"), ETag: &stale},
		}, state.BulkStoreOpts{})
		wantETag(t, "BulkSet with one stale ETag", err, state.ETagMismatch)
		if b3, b4 := get(t, app+"b3"), get(t, app+"b4"); string(b3.Data) != "n3b" || b4.Data != nil {
			t.Fatalf("after the bulk set: b3 %q, b4 %q; want n3b and absent", b3.Data, b4.Data)
		}
	})

	t.Run("transaction", func(t *testing.T) {
		if err := store.Set(ctx, &state.SetRequest{Key: app + "tx-old", Value: []byte("old")}); err != nil {
			t.Fatal(err)
		}
		var multi state.TransactionalStore = store
		if err := multi.Multi(ctx, &state.TransactionalStateRequest{Operations: []state.TransactionalStateOperation{
			state.SetRequest{Key: app + "tx-a", Value: []byte("a1")},
			state.SetRequest{Key: app + "tx-b", Value: []byte("b1")},
			state.DeleteRequest{Key: app + "tx-old"},
		}}); err != nil {
			t.Fatalf("Multi: %v", err)
		}
		if a, b, old := get(t, app+"tx-a"), get(t, app+"tx-b"), get(t, app+"tx-old"); string(a.Data) != "a1" || string(b.Data) != "b1" || old.Data != nil {
			t.Fatalf("after the transaction: %q %q %q", a.Data, b.Data, old.Data)
		}
		// A transaction whose last op fails its ETag writes nothing.
		a := get(t, app+"tx-a")
		stale := "9000000000000000000"
		firstWrite := state.SetStateOption{Concurrency: state.FirstWrite}
		err := multi.Multi(ctx, &state.TransactionalStateRequest{Operations: []state.TransactionalStateOperation{
			state.SetRequest{Key: app + "tx-a", Value: []byte("a2"), ETag: a.ETag, Options: firstWrite},
			state.SetRequest{Key: app + "tx-c", Value: []byte("c1")},
			state.DeleteRequest{Key: app + "tx-b", ETag: &stale, Options: state.DeleteStateOption{Concurrency: state.FirstWrite}},
		}})
		if err == nil {
			t.Fatal("a transaction with a stale ETag succeeded")
		}
		after := get(t, app+"tx-a")
		if string(after.Data) != "a1" || *after.ETag != *a.ETag || string(get(t, app+"tx-b").Data) != "b1" || get(t, app+"tx-c").Data != nil {
			t.Fatal("the failed transaction changed something")
		}
	})
}

// TestDaprPluggableNearCache: on a namespace with near_ttl, the
// component's eventual reads come to be answered from the near cache, a
// save through it is read back at once, and a strong read never comes from
// a cache.
func TestDaprPluggableNearCache(t *testing.T) {
	socket := startPluggable(t, "1m")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := openPluggable(ctx, t, socket)
	const key = "orders||order-7"
	read := func(t *testing.T, consistency string) *state.GetResponse {
		t.Helper()
		r, err := store.Get(ctx, &state.GetRequest{Key: key, Options: state.GetStateOption{Consistency: consistency}})
		if err != nil {
			t.Fatalf("%s Get: %v", consistency, err)
		}
		return r
	}
	for i, value := range []string{"v1", "v2"} {
		if err := store.Set(ctx, &state.SetRequest{Key: key, Value: []byte(value)}); err != nil {
			t.Fatalf("Set %s: %v", value, err)
		}
		// Redis's key tracking reports the save's own update of Redis,
		// which drops the entry the save left in the near cache; a read
		// refills it, and once the reports have arrived the near cache
		// answers. Every read in between answers the saved value.
		testproc.Eventually(t, 5*time.Second, "eventual reads served from the near cache", func() bool {
			ev := read(t, state.Eventual)
			if string(ev.Data) != value {
				t.Fatalf("save %d: eventual Get = %q from %q; want %q", i+1, ev.Data, ev.Metadata["warmcache-source"], value)
			}
			return ev.Metadata["warmcache-source"] == "hit-l1"
		})
		strong := read(t, state.Strong)
		if string(strong.Data) != value || strong.Metadata["warmcache-source"] != "miss" {
			t.Fatalf("save %d: strong Get = %q from %q; want %q from the warehouse (miss)", i+1, strong.Data, strong.Metadata["warmcache-source"], value)
		}
	}
	if err := store.Delete(ctx, &state.DeleteRequest{Key: key}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if gone := read(t, state.Eventual); gone.Data != nil || gone.ETag != nil {
		t.Fatalf("eventual Get after the delete = %q (ETag %v); want an empty item", gone.Data, gone.ETag)
	}
}

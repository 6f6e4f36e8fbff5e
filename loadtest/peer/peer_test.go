package peer_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/loadtest/peer"
)

// TestPeerCacheAside shows that the peer is the cache-aside it stands for:
// a miss reads the warehouse and fills Redis, the next GET is a hit that
// does not read the warehouse, an absent row is a 404 and a bad key a 400.
func TestPeerCacheAside(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.NewDatabase(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE widgets (key bigint PRIMARY KEY, value jsonb NOT NULL);
INSERT INTO widgets VALUES (7, '{"widget": {"id": "7"}}')`); err != nil {
		t.Fatal(err)
	}
	h, closePeer, err := peer.Open(ctx, peer.Config{Redis: testenv.RedisAddr(t), Postgres: dsn, Prefix: "peer-" + testenv.RandomSuffix(t) + ":", Conns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer closePeer()
	srv := httptest.NewServer(h)
	defer srv.Close()

	get := func(key string) (int, string, string) {
		t.Helper()
		res, err := http.Get(srv.URL + "/v1/kv/widgets/" + key)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header.Get("X-Cache"), string(body)
	}
	if code, src, body := get("7"); code != 200 || src != "miss" || body != `{"widget": {"id": "7"}}` {
		t.Fatalf("first GET: %d %s %q, want 200 miss and the row", code, src, body)
	}
	// Change the row behind the peer's back: a hit must not read it.
	if _, err := conn.Exec(ctx, `UPDATE widgets SET value = '{"changed": true}' WHERE key = 7`); err != nil {
		t.Fatal(err)
	}
	if code, src, body := get("7"); code != 200 || src != "hit" || body != `{"widget": {"id": "7"}}` {
		t.Fatalf("second GET: %d %s %q, want 200 hit and the cached row", code, src, body)
	}
	if code, _, _ := get("8"); code != http.StatusNotFound {
		t.Fatalf("absent row: %d, want 404", code)
	}
	if code, _, _ := get("x"); code != http.StatusBadRequest {
		t.Fatalf("bad key: %d, want 400", code)
	}
}

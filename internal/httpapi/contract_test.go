package httpapi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/httpapi"
	"github.com/warmcache/warmcache/internal/memtier"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// contract is the REST API over the core and the in-memory tiers: the
// whole request path but the servers. Every request it serves and every
// answer it gives is checked against the OpenAPI document.
type contract struct {
	h    http.Handler
	hot  *memtier.Hot
	warm *memtier.Warm
	wh   *warehouse
	gens *generations
}

func newContract(t *testing.T) *contract {
	t.Helper()
	return newContractWith(t, httpapi.Options{})
}

// newContractWith is newContract with the transport's options.
func newContractWith(t *testing.T, opts httpapi.Options) *contract {
	t.Helper()
	widgets := &warmcache.Namespace{Name: "widgets", Table: "widgets", KeyColumn: "key", KeyType: warmcache.KeyBigint,
		Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version", ExpiresColumn: "expires_at", Writable: true}
	frozen := &warmcache.Namespace{Name: "frozen", Table: "frozen", KeyColumn: "key", KeyType: warmcache.KeyText,
		Layout: warmcache.LayoutPacked, ValueColumn: "value", VersionColumn: "version"}
	blobs := &warmcache.Namespace{Name: "blobs", Table: "blobs", KeyColumn: "key", KeyType: warmcache.KeyText,
		Layout: warmcache.LayoutBytes, ValueColumn: "value", VersionColumn: "version", Writable: true,
		ContentType: "application/x-blob"}
	c := &contract{hot: memtier.NewHot(nil), warm: memtier.NewWarm(), gens: &generations{}}
	c.wh = &warehouse{Warm: c.warm}
	reg := prometheus.NewRegistry()
	log := slog.New(slog.DiscardHandler)
	svc, err := warmcache.NewService(c.hot, c.wh, []*warmcache.Namespace{widgets, frozen, blobs}, reg, log,
		warmcache.Options{Generations: c.gens})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.NewHandler(svc, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), reg, log, opts)
	if err != nil {
		t.Fatal(err)
	}
	c.h = loadAPIDoc(t).checked(t, h)
	return c
}

// warehouse is memtier's warehouse with the non-key query and the bulk
// load, enough to answer them over the keys 1 to 100 of a namespace, and
// with the failures memtier cannot make.
type warehouse struct {
	*memtier.Warm
	// conflict fails writes as a serialization failure would.
	conflict atomic.Bool
	// slowQuery fails queries as a statement timeout would.
	slowQuery atomic.Bool
}

// Write is memtier's, but fails with a conflict while conflict is set.
func (w *warehouse) Write(ctx context.Context, ns *warmcache.Namespace, writes []warmcache.Write) ([]warmcache.Entry, error) {
	if w.conflict.Load() {
		return nil, fmt.Errorf("%w: could not serialize access", warmcache.ErrConflict)
	}
	return w.Warm.Write(ctx, ns, writes)
}

// Query answers the rows whose value has the top-level fields of match.
func (w *warehouse) Query(_ context.Context, ns *warmcache.Namespace, match []byte, limit int, after *warmcache.Key) ([]warmcache.QueryRow, error) {
	if w.slowQuery.Load() {
		return nil, context.DeadlineExceeded
	}
	var want map[string]any
	if err := json.Unmarshal(match, &want); err != nil {
		return nil, err
	}
	var rows []warmcache.QueryRow
	for k := int64(1); k <= 100 && len(rows) < limit; k++ {
		if after != nil && k <= after.Int {
			continue
		}
		e, ok := w.Row(ns.Name, strconv.FormatInt(k, 10))
		var got map[string]any
		if !ok || json.Unmarshal(e.Value, &got) != nil {
			continue
		}
		if !containsFields(got, want) {
			continue
		}
		rows = append(rows, warmcache.QueryRow{Key: warmcache.Key{Text: strconv.FormatInt(k, 10), Int: k}, Entry: e})
	}
	return rows, nil
}

// containsFields reports whether got has every field of want, equal.
func containsFields(got, want map[string]any) bool {
	for k, v := range want {
		g, _ := json.Marshal(got[k])
		w, _ := json.Marshal(v)
		if !bytes.Equal(g, w) {
			return false
		}
	}
	return true
}

// Load writes the rows as one batch of upserts.
func (w *warehouse) Load(ctx context.Context, ns *warmcache.Namespace, rows warmcache.LoadRows) (warmcache.LoadCounts, error) {
	var writes []warmcache.Write
	var counts warmcache.LoadCounts
	for rows.Next() {
		row := rows.Row()
		writes = append(writes, warmcache.Write{Key: row.Key, Value: row.Value})
		if cur, ok := w.Row(ns.Name, row.Key.Text); !ok {
			counts.Inserted++
		} else if bytes.Equal(cur.Value, row.Value) {
			counts.Unchanged++
			writes = writes[:len(writes)-1]
			continue
		} else {
			counts.Updated++
		}
		counts.Changed = append(counts.Changed, row.Key)
	}
	if err := rows.Err(); err != nil {
		return warmcache.LoadCounts{}, err
	}
	if _, err := w.Write(ctx, ns, writes); err != nil {
		return warmcache.LoadCounts{}, err
	}
	return counts, nil
}

// generations counts the namespace generations bumped.
type generations struct {
	bumps atomic.Int64
}

func (g *generations) Bump(context.Context, *warmcache.Namespace) error {
	g.bumps.Add(1)
	return nil
}

// do sends one request; header is name, value pairs.
func (c *contract) do(t *testing.T, method, path, body string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, r)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	c.h.ServeHTTP(w, req)
	return w
}

// doHeader sends one request with the header as given: several values of
// one name, or an empty value, which do cannot send.
func (c *contract) doHeader(t *testing.T, method, path, body string, header http.Header) *httptest.ResponseRecorder {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, r)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for name, values := range header {
		req.Header[name] = values
	}
	w := httptest.NewRecorder()
	c.h.ServeHTTP(w, req)
	return w
}

// expect checks a response's status, and its body and headers where given
// (name, value pairs; an empty value means the header is absent).
func expect(t *testing.T, w *httptest.ResponseRecorder, status int, body string, header ...string) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d; body %s", w.Code, status, w.Body)
	}
	if body != "" && strings.TrimSpace(w.Body.String()) != body {
		t.Errorf("body %s, want %s", w.Body, body)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if got := w.Header().Get(header[i]); got != header[i+1] {
			t.Errorf("%s: %q, want %q", header[i], got, header[i+1])
		}
	}
}

// errorCode returns the code of an error body.
func errorCode(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	var doc struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil || doc.Error.Message == "" {
		t.Fatalf("error body %q: %v; want {\"error\":{\"code\":...,\"message\":...}}", w.Body, err)
	}
	return doc.Error.Code
}

func etag(v int64) string { return `"` + strconv.FormatInt(v, 10) + `"` }

func TestContractReadWrite(t *testing.T) {
	c := newContract(t)

	// An absent key: the warehouse answers once, then the negative entry.
	w := c.do(t, http.MethodGet, "/v1/kv/widgets/7", "")
	expect(t, w, http.StatusNotFound, "", "X-Cache", "miss", "ETag", "")
	if code := errorCode(t, w); code != "not_found" {
		t.Errorf("error code %q, want not_found", code)
	}
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/7", ""), http.StatusNotFound, "", "X-Cache", "hit")
	if n := c.warm.Lookups(); n != 1 {
		t.Errorf("warehouse reads = %d, want 1: the absent key is cached", n)
	}

	// A write answers the stored value and its version; a read then hits
	// the cache the write filled, at that version.
	w = c.do(t, http.MethodPut, "/v1/kv/widgets/7", `{"color":"red"}`)
	expect(t, w, http.StatusOK, `{"color":"red"}`)
	first := w.Header().Get("ETag")
	row, ok := c.warm.Row("widgets", "7")
	if !ok || first != etag(row.Version) {
		t.Fatalf("PUT ETag %s, want the row's version %d", first, row.Version)
	}
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/007", ""), http.StatusOK, `{"color":"red"}`,
		"X-Cache", "hit", "ETag", first, "Content-Type", "application/json")
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/7", "", "If-None-Match", first), http.StatusNotModified, "", "ETag", first)

	// If-Match: a stale version is refused and changes nothing; the
	// current one writes a newer version.
	w = c.do(t, http.MethodPut, "/v1/kv/widgets/7", `{"color":"blue"}`, "If-Match", etag(row.Version-1))
	expect(t, w, http.StatusPreconditionFailed, "")
	if code := errorCode(t, w); code != "precondition_failed" {
		t.Errorf("error code %q, want precondition_failed", code)
	}
	w = c.do(t, http.MethodPut, "/v1/kv/widgets/7", `{"color":"blue"}`, "If-Match", first)
	expect(t, w, http.StatusOK, `{"color":"blue"}`)
	second := w.Header().Get("ETag")
	if v, _ := strconv.ParseInt(strings.Trim(second, `"`), 10, 64); v <= row.Version {
		t.Fatalf("second PUT ETag %s, want a version above %d", second, row.Version)
	}
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/7", ""), http.StatusOK, `{"color":"blue"}`, "X-Cache", "hit", "ETag", second)

	// After the cache is lost, one read misses and fills it again.
	c.hot.Forget()
	reads := c.warm.Lookups()
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/7", ""), http.StatusOK, `{"color":"blue"}`, "X-Cache", "miss", "ETag", second)
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/7", ""), http.StatusOK, `{"color":"blue"}`, "X-Cache", "hit", "ETag", second)
	if n := c.warm.Lookups() - reads; n != 1 {
		t.Errorf("warehouse reads after the cache was lost = %d, want 1", n)
	}

	// Deletes: a stale If-Match is refused; then the key is gone, from the
	// cache too, and a second delete finds nothing.
	expect(t, c.do(t, http.MethodDelete, "/v1/kv/widgets/7", "", "If-Match", first), http.StatusPreconditionFailed, "")
	expect(t, c.do(t, http.MethodDelete, "/v1/kv/widgets/7", "", "If-Match", second), http.StatusNoContent, "")
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/7", ""), http.StatusNotFound, "", "X-Cache", "hit")
	if _, ok := c.warm.Row("widgets", "7"); ok {
		t.Error("the row is still in the warehouse after DELETE")
	}
	w = c.do(t, http.MethodDelete, "/v1/kv/widgets/7", "")
	expect(t, w, http.StatusNotFound, "")
	if code := errorCode(t, w); code != "not_found" {
		t.Errorf("error code %q, want not_found", code)
	}
}

func TestContractMGet(t *testing.T) {
	c := newContract(t)
	c.warm.Set("widgets", "1", []byte(`{"n":1}`), 5)
	c.warm.Set("widgets", "2", []byte(`{"n":2}`), 6)
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/1", ""), http.StatusOK, `{"n":1}`, "X-Cache", "miss", "ETag", etag(5))

	mget := func() map[string]any {
		t.Helper()
		w := c.do(t, http.MethodPost, "/v1/kv/widgets/_mget", `{"keys":[1,"2",3,"02"]}`)
		expect(t, w, http.StatusOK, "", "Content-Type", "application/json")
		var doc map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
			t.Fatalf("mget body %s: %v", w.Body, err)
		}
		return doc
	}
	doc := mget()
	items, _ := doc["items"].(map[string]any)
	missing, _ := doc["missing"].([]any)
	if len(items) != 2 || items["1"] == nil || items["2"] == nil || len(missing) != 1 || missing[0] != "3" {
		t.Fatalf("mget = %v; want items 1 and 2, and 3 missing", doc)
	}
	if n, _ := items["2"].(map[string]any)["n"].(float64); n != 2 {
		t.Errorf("item 2 = %v, want {\"n\":2}", items["2"])
	}
	reads := c.warm.Lookups()
	if reads != 2 {
		t.Errorf("warehouse reads = %d, want 2: the GET, then one for the keys the cache lacked", reads)
	}
	// Everything is cached now, the absent key too.
	mget()
	if n := c.warm.Lookups(); n != reads {
		t.Errorf("a second mget read the warehouse %d more times, want none", n-reads)
	}
	// A write shows in the next mget.
	expect(t, c.do(t, http.MethodPut, "/v1/kv/widgets/3", `{"n":3}`), http.StatusOK, `{"n":3}`)
	if doc := mget(); len(doc["items"].(map[string]any)) != 3 || doc["missing"] != nil && len(doc["missing"].([]any)) != 0 {
		t.Errorf("mget after PUT 3 = %v; want three items, none missing", doc)
	}
	expect(t, c.do(t, http.MethodPost, "/v1/kv/widgets/_mget", `{"keys":["x"]}`), http.StatusBadRequest, "")
}

func TestContractRefusals(t *testing.T) {
	c := newContract(t)
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"bad key", http.MethodGet, "/v1/kv/widgets/abc", "", http.StatusBadRequest, "invalid_key"},
		{"unknown namespace", http.MethodGet, "/v1/kv/nope/1", "", http.StatusNotFound, "unknown_namespace"},
		{"not JSON", http.MethodPut, "/v1/kv/widgets/1", `{"a":`, http.StatusBadRequest, "invalid_value"},
		{"read-only namespace", http.MethodPut, "/v1/kv/frozen/a", `1`, http.StatusMethodNotAllowed, "read_only"},
		{"bad If-Match", http.MethodDelete, "/v1/kv/widgets/1", "", http.StatusBadRequest, "invalid_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w *httptest.ResponseRecorder
			if tc.name == "bad If-Match" {
				w = c.do(t, tc.method, tc.path, tc.body, "If-Match", "W/abc")
			} else {
				w = c.do(t, tc.method, tc.path, tc.body)
			}
			expect(t, w, tc.status, "")
			if code := errorCode(t, w); code != tc.code {
				t.Errorf("error code %q, want %q", code, tc.code)
			}
		})
	}
	if n := c.warm.Writes(); n != 0 {
		t.Errorf("refused requests wrote %d times to the warehouse", n)
	}
}

func TestContractTierOutages(t *testing.T) {
	c := newContract(t)
	c.warm.Set("widgets", "1", []byte(`1`), 1)
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/1", ""), http.StatusOK, `1`, "X-Cache", "miss")

	// The warehouse down: hits go on, misses fail fast with a 503.
	c.warm.SetFailing(true)
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/1", ""), http.StatusOK, `1`, "X-Cache", "hit")
	w := c.do(t, http.MethodGet, "/v1/kv/widgets/2", "")
	expect(t, w, http.StatusServiceUnavailable, "", "Retry-After", "1")
	if code := errorCode(t, w); code != "unavailable" {
		t.Errorf("error code %q, want unavailable", code)
	}
	expect(t, c.do(t, http.MethodPut, "/v1/kv/widgets/2", `2`), http.StatusServiceUnavailable, "")

	// The hot tier down: reads go on from the warehouse.
	c.warm.SetFailing(false)
	c.hot.SetDown(true)
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/1", ""), http.StatusOK, `1`, "X-Cache", "miss", "ETag", etag(1))
}

func TestContractConflict(t *testing.T) {
	c := newContract(t)
	c.warm.Set("widgets", "1", []byte(`1`), 1)
	c.wh.conflict.Store(true)
	for _, method := range []string{http.MethodPut, http.MethodDelete} {
		w := c.do(t, method, "/v1/kv/widgets/1", map[string]string{http.MethodPut: `2`}[method])
		expect(t, w, http.StatusConflict, "", "Retry-After", "1")
		if code := errorCode(t, w); code != "conflict" {
			t.Errorf("%s: error code %q, want conflict", method, code)
		}
	}
}

// TestContractPathEscapes checks that a key in the path is percent-decoded
// exactly once.
func TestContractPathEscapes(t *testing.T) {
	c := newContract(t)
	c.warm.Set("frozen", "a/b", []byte(`"slash"`), 3)
	c.warm.Set("frozen", "%25", []byte(`"percent"`), 4)
	c.warm.Set("frozen", "_load", []byte(`"underscore"`), 5)
	expect(t, c.do(t, http.MethodGet, "/v1/kv/frozen/a%2Fb", ""), http.StatusOK, `"slash"`, "ETag", etag(3))
	expect(t, c.do(t, http.MethodGet, "/v1/kv/frozen/%2525", ""), http.StatusOK, `"percent"`, "ETag", etag(4))
	// A key spelled like a batch route is a key for GET.
	expect(t, c.do(t, http.MethodGet, "/v1/kv/frozen/_load", ""), http.StatusOK, `"underscore"`, "ETag", etag(5))
	expect(t, c.do(t, http.MethodGet, "/v1/kv/frozen/%5Fload", ""), http.StatusOK, `"underscore"`, "ETag", etag(5))
}

func TestContractQuery(t *testing.T) {
	c := newContract(t)
	for k, v := range map[string]string{"1": `{"color":"red"}`, "2": `{"color":"blue"}`, "3": `{"color":"red","n":3}`, "4": `{"color":"red"}`} {
		c.warm.Set("widgets", k, []byte(v), 10)
	}
	c.warm.Set("frozen", "1", []byte(`{"color":"red"}`), 11)

	type page struct {
		Items []struct {
			Key     any             `json:"key"`
			Value   json.RawMessage `json:"value"`
			Version int64           `json:"version"`
		} `json:"items"`
		Next string `json:"next"`
	}
	query := func(ns, body string) page {
		t.Helper()
		w := c.do(t, http.MethodPost, "/v1/kv/"+ns+"/_query", body)
		expect(t, w, http.StatusOK, "", "X-Cache", "bypass", "Cache-Control", "no-store")
		var p page
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
			t.Fatalf("query body %s: %v", w.Body, err)
		}
		return p
	}
	first := query("widgets", `{"match":{"color":"red"},"limit":2}`)
	if len(first.Items) != 2 || first.Items[0].Key != 1.0 || first.Items[1].Key != 3.0 || first.Next == "" {
		t.Fatalf("first page %+v; want keys 1 and 3 and a next cursor", first)
	}
	second := query("widgets", `{"match":{"color":"red"},"limit":2,"after":`+strconv.Quote(first.Next)+`}`)
	if len(second.Items) != 1 || second.Items[0].Key != 4.0 || second.Next != "" {
		t.Fatalf("second page %+v; want key 4 and no next cursor", second)
	}
	// Keys of a text namespace are strings.
	if p := query("frozen", `{"match":{}}`); len(p.Items) != 1 || p.Items[0].Key != "1" {
		t.Fatalf("text namespace page %+v; want the string key \"1\"", p)
	}

	for _, tc := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"limit over the maximum", `{"match":{},"limit":5000}`, http.StatusRequestEntityTooLarge, "too_large"},
		{"forged cursor", `{"match":{},"after":"k2:forged"}`, http.StatusBadRequest, "invalid_value"},
		{"match not an object", `{"match":1}`, http.StatusBadRequest, "invalid_value"},
		{"unknown field", `{"match":{},"where":1}`, http.StatusBadRequest, "invalid_request"},
	} {
		w := c.do(t, http.MethodPost, "/v1/kv/widgets/_query", tc.body)
		expect(t, w, tc.status, "")
		if code := errorCode(t, w); code != tc.code {
			t.Errorf("%s: error code %q, want %q", tc.name, code, tc.code)
		}
	}
	c.wh.slowQuery.Store(true)
	w := c.do(t, http.MethodPost, "/v1/kv/widgets/_query", `{"match":{}}`)
	expect(t, w, http.StatusGatewayTimeout, "")
	if code := errorCode(t, w); code != "timeout" {
		t.Errorf("statement timeout: error code %q, want timeout", code)
	}
}

func TestContractLoad(t *testing.T) {
	c := newContract(t)
	var res struct {
		Lines, Inserted, Updated, Unchanged int64
	}
	w := c.do(t, http.MethodPost, "/v1/kv/widgets/_load", "{\"key\":1,\"value\":{\"n\":1}}\n{\"key\":\"2\",\"value\":{\"n\":2}}\n",
		"Content-Type", "application/x-ndjson")
	expect(t, w, http.StatusOK, "", "Content-Type", "application/json")
	if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil || res.Lines != 2 || res.Inserted != 2 {
		t.Fatalf("load answer %s (%v); want 2 lines inserted", w.Body, err)
	}
	w = c.do(t, http.MethodPost, "/v1/kv/widgets/_load", "key,color\n1,red\n3,blue\n", "Content-Type", "text/csv")
	expect(t, w, http.StatusOK, "")
	if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil || res.Lines != 2 || res.Inserted != 1 || res.Updated != 1 {
		t.Fatalf("CSV load answer %s (%v); want 1 inserted and 1 updated", w.Body, err)
	}
	expect(t, c.do(t, http.MethodGet, "/v1/kv/widgets/3", ""), http.StatusOK, `{"color":"blue"}`)

	for _, tc := range []struct {
		name, path, body, contentType string
		status                        int
		code                          string
	}{
		{"bad line", "/v1/kv/widgets/_load", "{\"key\":\"x\",\"value\":1}\n", "application/x-ndjson", http.StatusBadRequest, "invalid_value"},
		{"other media type", "/v1/kv/widgets/_load", "1", "text/plain", http.StatusUnsupportedMediaType, "unsupported_media_type"},
		{"unknown namespace", "/v1/kv/nope/_load", "{\"key\":1,\"value\":1}\n", "application/x-ndjson", http.StatusNotFound, "unknown_namespace"},
		{"read-only namespace", "/v1/kv/frozen/_load", "{\"key\":\"a\",\"value\":1}\n", "application/x-ndjson", http.StatusMethodNotAllowed, "read_only"},
	} {
		w := c.do(t, http.MethodPost, tc.path, tc.body, "Content-Type", tc.contentType)
		expect(t, w, tc.status, "")
		if code := errorCode(t, w); code != tc.code {
			t.Errorf("%s: error code %q, want %q", tc.name, code, tc.code)
		}
	}
}

func TestContractInvalidate(t *testing.T) {
	c := newContract(t)
	expect(t, c.do(t, http.MethodPost, "/v1/kv/widgets/_invalidate", `{"keys":[1,"2",1]}`), http.StatusOK, `{"invalidated":2}`)
	expect(t, c.do(t, http.MethodPost, "/v1/kv/widgets/_invalidate", `{"all":true}`), http.StatusOK, `{"all":true}`)
	if n := c.gens.bumps.Load(); n != 1 {
		t.Errorf("generation bumps = %d, want 1", n)
	}
	for _, tc := range []struct {
		name, body string
		code       string
	}{
		{"neither", `{}`, "invalid_request"},
		{"both", `{"keys":[1],"all":true}`, "invalid_request"},
		{"all with empty keys", `{"all":true,"keys":[]}`, "invalid_request"},
		{"keys with all false", `{"keys":[42],"all":false}`, "invalid_request"},
		{"all with null keys", `{"keys":null,"all":true}`, "invalid_request"},
		{"all false alone", `{"all":false}`, "invalid_request"},
		{"null keys alone", `{"keys":null}`, "invalid_request"},
		{"all not a boolean", `{"all":"yes"}`, "invalid_request"},
		{"bad key", `{"keys":["x"]}`, "invalid_key"},
	} {
		w := c.do(t, http.MethodPost, "/v1/kv/widgets/_invalidate", tc.body)
		expect(t, w, http.StatusBadRequest, "")
		if code := errorCode(t, w); code != tc.code {
			t.Errorf("%s: error code %q, want %q", tc.name, code, tc.code)
		}
	}
}

func TestContractOperations(t *testing.T) {
	c := newContract(t)
	expect(t, c.do(t, http.MethodGet, "/healthz", ""), http.StatusOK, `{"status":"ok"}`, "Content-Type", "application/json")
	expect(t, c.do(t, http.MethodGet, "/readyz", ""), http.StatusOK, `{"status":"ok","tiers":{"redis":"ok","sql":"ok"}}`)
	w := c.do(t, http.MethodGet, "/metrics", "")
	expect(t, w, http.StatusOK, "")
	if !strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") || !strings.Contains(w.Body.String(), "warmcache_http_request_duration_seconds") {
		t.Errorf("metrics: %s, %.200s", w.Header().Get("Content-Type"), w.Body)
	}

	down := newContract(t)
	down.warm.SetFailing(true)
	expect(t, down.do(t, http.MethodGet, "/readyz", ""), http.StatusServiceUnavailable,
		`{"status":"unavailable","tiers":{"redis":"ok","sql":"unavailable"}}`, "Retry-After", "1")
}

// TestContractRouting checks the answers to requests that match no route:
// 404 no_route for a path no route has, 405 method_not_allowed with Allow
// for a path whose routes lack the method.
func TestContractRouting(t *testing.T) {
	c := newContract(t)
	for _, tc := range []struct {
		method, path string
		status       int
		code, allow  string
	}{
		{http.MethodPatch, "/v1/kv/widgets/1", http.StatusMethodNotAllowed, "method_not_allowed", "GET, PUT, DELETE"},
		{http.MethodPost, "/v1/kv/widgets/1", http.StatusMethodNotAllowed, "method_not_allowed", "GET, PUT, DELETE"},
		{http.MethodHead, "/v1/kv/widgets/1", http.StatusMethodNotAllowed, "method_not_allowed", "GET, PUT, DELETE"},
		{"PURGE", "/v1/kv/widgets/1", http.StatusMethodNotAllowed, "method_not_allowed", "GET, PUT, DELETE"},
		{http.MethodGet, "/v1/kv/widgets/_mget", http.StatusBadRequest, "invalid_key", ""}, // the key "_mget"
		{http.MethodDelete, "/v1/kv/widgets/_query", http.StatusBadRequest, "invalid_key", ""},
		{http.MethodPatch, "/v1/kv/widgets/_load", http.StatusMethodNotAllowed, "method_not_allowed", "GET, POST, PUT, DELETE"},
		{http.MethodOptions, "/healthz", http.StatusMethodNotAllowed, "method_not_allowed", "GET"},
		{http.MethodPost, "/readyz", http.StatusMethodNotAllowed, "method_not_allowed", "GET"},
		{http.MethodDelete, "/openapi.json", http.StatusMethodNotAllowed, "method_not_allowed", "GET"},
		{http.MethodPut, "/v1/kv/frozen/a", http.StatusMethodNotAllowed, "read_only", "GET"},
		{http.MethodDelete, "/v1/kv/frozen/a", http.StatusMethodNotAllowed, "read_only", "GET"},
		{http.MethodGet, "/v1/kv/widgets/", http.StatusNotFound, "no_route", ""},
		{http.MethodGet, "/v1/kv/widgets", http.StatusNotFound, "no_route", ""},
		{http.MethodGet, "/v1/kv/widgets/1/2", http.StatusNotFound, "no_route", ""},
		{http.MethodGet, "/healthz/", http.StatusNotFound, "no_route", ""},
		{http.MethodGet, "/nope", http.StatusNotFound, "no_route", ""},
		{"PURGE", "/nope", http.StatusNotFound, "no_route", ""},
	} {
		body := ""
		if tc.method == http.MethodPut {
			body = `1`
		}
		w := c.do(t, tc.method, tc.path, body)
		expect(t, w, tc.status, "", "Allow", tc.allow, "Content-Type", "application/json")
		if code := errorCode(t, w); code != tc.code {
			t.Errorf("%s %s: error code %q, want %q", tc.method, tc.path, code, tc.code)
		}
	}
}

func TestContractAuth(t *testing.T) {
	key := func(id, token string, scopes auth.Scope, ns string, rate float64) auth.Key {
		return auth.Key{ID: id, Hash: sha256.Sum256([]byte(token)), Scopes: scopes, Namespaces: []string{ns}, Rate: rate}
	}
	keys, err := auth.NewKeyring([]auth.Key{
		key("reader", "r-token", auth.ScopeRead, "widgets", 0),
		key("writer", "w-token", auth.ScopeRead|auth.ScopeWrite, auth.AllNamespaces, 0),
		key("limited", "l-token", auth.ScopeRead, auth.AllNamespaces, 0.001),
	}, auth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := newContractWith(t, httpapi.Options{Keys: keys})
	bearer := func(token string) []string { return []string{"Authorization", "Bearer " + token} }
	for _, tc := range []struct {
		name, method, path, body string
		header                   []string
		status                   int
		code                     string
	}{
		{"no token", http.MethodGet, "/v1/kv/widgets/1", "", nil, http.StatusUnauthorized, "unauthenticated"},
		{"unknown token", http.MethodGet, "/v1/kv/widgets/1", "", bearer("nope"), http.StatusUnauthorized, "unauthenticated"},
		{"no token, no route", http.MethodPatch, "/v1/kv/widgets/1", "", nil, http.StatusUnauthorized, "unauthenticated"},
		{"read key writes", http.MethodPut, "/v1/kv/widgets/1", `1`, bearer("r-token"), http.StatusForbidden, "forbidden"},
		{"read key loads", http.MethodPost, "/v1/kv/widgets/_load", "{\"key\":1,\"value\":1}\n", bearer("r-token"), http.StatusForbidden, "forbidden"},
		{"read key on another namespace", http.MethodGet, "/v1/kv/frozen/a", "", bearer("r-token"), http.StatusForbidden, "forbidden"},
		{"read key reads", http.MethodGet, "/v1/kv/widgets/1", "", bearer("r-token"), http.StatusNotFound, "not_found"},
		{"read key reads many", http.MethodPost, "/v1/kv/widgets/_mget", `{"keys":[1]}`, bearer("r-token"), http.StatusOK, ""},
		{"write key writes", http.MethodPut, "/v1/kv/widgets/1", `1`, bearer("w-token"), http.StatusOK, ""},
		{"limited key, first", http.MethodGet, "/v1/kv/widgets/1", "", bearer("l-token"), http.StatusOK, ""},
		{"limited key, over its rate", http.MethodGet, "/v1/kv/widgets/1", "", bearer("l-token"), http.StatusTooManyRequests, "rate_limited"},
		{"probe", http.MethodGet, "/healthz", "", nil, http.StatusOK, ""},
	} {
		w := c.do(t, tc.method, tc.path, tc.body, tc.header...)
		expect(t, w, tc.status, "")
		if tc.code == "" {
			continue
		}
		if code := errorCode(t, w); code != tc.code {
			t.Errorf("%s: error code %q, want %q", tc.name, code, tc.code)
		}
		switch tc.status {
		case http.StatusUnauthorized:
			expect(t, w, tc.status, "", "WWW-Authenticate", `Bearer realm="warmcache"`)
		case http.StatusTooManyRequests:
			if w.Header().Get("Retry-After") == "" {
				t.Errorf("%s: no Retry-After", tc.name)
			}
		}
	}
}

func TestContractBounds(t *testing.T) {
	c := newContractWith(t, httpapi.Options{MaxBodyBytes: 64})
	big := `{"pad":"` + strings.Repeat("x", 100) + `"}`
	for _, tc := range []struct {
		name, method, path, body, contentType string
		status                                int
		code                                  string
	}{
		{"value over the body bound", http.MethodPut, "/v1/kv/widgets/1", big, "application/json", http.StatusRequestEntityTooLarge, "too_large"},
		{"_mget over the body bound", http.MethodPost, "/v1/kv/widgets/_mget", `{"keys":[` + strings.Repeat(`1,`, 40) + `1]}`, "application/json",
			http.StatusRequestEntityTooLarge, "too_large"},
		{"_invalidate over the body bound", http.MethodPost, "/v1/kv/widgets/_invalidate", `{"keys":[` + strings.Repeat(`1,`, 40) + `1]}`, "application/json",
			http.StatusRequestEntityTooLarge, "too_large"},
		{"value as text", http.MethodPut, "/v1/kv/widgets/1", `1`, "text/plain", http.StatusUnsupportedMediaType, "unsupported_media_type"},
		{"_mget as text", http.MethodPost, "/v1/kv/widgets/_mget", `{"keys":[1]}`, "text/plain", http.StatusUnsupportedMediaType, "unsupported_media_type"},
		{"_query as XML", http.MethodPost, "/v1/kv/widgets/_query", `<match/>`, "application/xml", http.StatusUnsupportedMediaType, "unsupported_media_type"},
		{"_invalidate as a form", http.MethodPost, "/v1/kv/widgets/_invalidate", `all=true`, "application/x-www-form-urlencoded",
			http.StatusUnsupportedMediaType, "unsupported_media_type"},
	} {
		w := c.do(t, tc.method, tc.path, tc.body, "Content-Type", tc.contentType)
		expect(t, w, tc.status, "")
		if code := errorCode(t, w); code != tc.code {
			t.Errorf("%s: error code %q, want %q", tc.name, code, tc.code)
		}
	}
}

// TestContractOverload checks that a /v1 request over the in-flight bound
// is refused at once, while probes still answer.
func TestContractOverload(t *testing.T) {
	c := newContractWith(t, httpapi.Options{MaxInflight: 1})
	started, release := make(chan struct{}, 1), make(chan struct{})
	c.warm.SetLookupHook(memtier.Gate(started, release))
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- c.do(t, http.MethodGet, "/v1/kv/widgets/1", "") }()
	<-started
	w := c.do(t, http.MethodGet, "/v1/kv/widgets/2", "")
	expect(t, w, http.StatusServiceUnavailable, "", "Retry-After", "1")
	if code := errorCode(t, w); code != "overloaded" {
		t.Errorf("error code %q, want overloaded", code)
	}
	expect(t, c.do(t, http.MethodGet, "/healthz", ""), http.StatusOK, "")
	close(release)
	expect(t, <-done, http.StatusNotFound, "")
}

// TestContractPanic checks that a handler's panic answers 500 internal.
func TestContractPanic(t *testing.T) {
	// Without a core, every /v1/kv handler panics.
	h, err := httpapi.NewHandler(nil, http.NotFoundHandler(), prometheus.NewRegistry(), slog.New(slog.DiscardHandler), httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	loadAPIDoc(t).checked(t, h).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/kv/widgets/1", nil))
	expect(t, w, http.StatusInternalServerError, `{"error":{"code":"internal","message":"internal error"}}`)
}

// TestContractMalformedEscape checks the answer to a malformed
// percent-escape that reaches the routes, as it can when the handler is
// mounted on a router that routes on the raw path: 400 invalid_request.
// (net/http itself refuses such a path before any handler; see
// TestAnswersOfTheServer.)
func TestContractMalformedEscape(t *testing.T) {
	c := newContract(t)
	parent := chi.NewRouter()
	parent.Mount("/", c.h)
	req := httptest.NewRequest(http.MethodGet, "/v1/kv/frozen/x", nil)
	req.URL.RawPath = "/v1/kv/frozen/%zz"
	w := httptest.NewRecorder()
	parent.ServeHTTP(w, req)
	expect(t, w, http.StatusBadRequest, "", "Content-Type", "application/json")
	if code := errorCode(t, w); code != "invalid_request" {
		t.Errorf("error code %q, want invalid_request", code)
	}
}

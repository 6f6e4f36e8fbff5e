package daprd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	dapr "github.com/dapr/go-sdk/client"

	"github.com/warmcache/warmcache/internal/testproc"
)

// behaviour is one row of docs/dapr.md's side-by-side table: a scenario
// run through daprd against one store, which answers one line per step.
type behaviour struct {
	// row is the first cell of the row in docs/dapr.md.
	row string
	run func(t *testing.T, s *stack, store string) []string
	// differs, when set, is how warmcache's answers differ from
	// state.postgresql's; the row says so and why, and the test holds
	// warmcache to want.
	differs bool
	want    []string
}

// behaviours are the rows of the side-by-side table.
var behaviours = []behaviour{
	{row: "save, get, delete", run: func(t *testing.T, s *stack, store string) []string {
		return []string{
			s.save(t, store, item{Key: "a", Value: map[string]int{"qty": 1}}).summary(),
			readOf(s.get(t, store, "a")),
			s.del(t, store, "a", "", "").summary(),
			readOf(s.get(t, store, "a")),
			s.del(t, store, "a", "", "").summary(),
		}
	}},
	{row: "first-write: save without an ETag", differs: true, want: []string{"204", "409 ERR_STATE_SAVE", "200 1 etag"},
		run: func(t *testing.T, s *stack, store string) []string {
			fw := map[string]string{"concurrency": "first-write"}
			return []string{
				s.save(t, store, item{Key: "fw", Value: 1, Options: fw}).summary(),
				s.save(t, store, item{Key: "fw", Value: 2, Options: fw}).summary(),
				readOf(s.get(t, store, "fw")),
			}
		}},
	{row: "first-write: stale ETag on save", run: func(t *testing.T, s *stack, store string) []string {
		return staleSave(t, s, store, "first-write")
	}},
	{row: "first-write: stale ETag on delete", run: func(t *testing.T, s *stack, store string) []string {
		return staleDelete(t, s, store, "first-write")
	}},
	{row: "last-write: stale ETag on save", run: func(t *testing.T, s *stack, store string) []string {
		return staleSave(t, s, store, "last-write")
	}},
	{row: "last-write: stale ETag on delete", run: func(t *testing.T, s *stack, store string) []string {
		return staleDelete(t, s, store, "last-write")
	}},
	{row: "current ETag on save and delete", run: func(t *testing.T, s *stack, store string) []string {
		var out []string
		for _, c := range []string{"first-write", "last-write"} {
			out = append(out, s.save(t, store, item{Key: "cur", Value: c}).summary())
			out = append(out, s.save(t, store, item{Key: "cur", Value: c + "!", ETag: ptr(s.etag(t, store, "cur")),
				Options: map[string]string{"concurrency": c}}).summary())
			out = append(out, readOf(s.get(t, store, "cur")))
			out = append(out, s.del(t, store, "cur", s.etag(t, store, "cur"), c).summary())
		}
		return out
	}},
	{row: "ETag of a deleted key", run: func(t *testing.T, s *stack, store string) []string {
		s.save(t, store, item{Key: "gone", Value: 1})
		e := s.etag(t, store, "gone")
		return []string{
			s.del(t, store, "gone", "", "").summary(),
			s.save(t, store, item{Key: "gone", Value: 2, ETag: &e}).summary(),
			s.del(t, store, "gone", e, "").summary(),
			readOf(s.get(t, store, "gone")),
		}
	}},
	{row: "malformed ETag", differs: true, want: []string{"400 ERR_STATE_SAVE", "400 ERR_STATE_DELETE", `200 "kept" etag`},
		run: func(t *testing.T, s *stack, store string) []string {
			s.save(t, store, item{Key: "bad", Value: "kept"})
			return []string{
				s.save(t, store, item{Key: "bad", Value: "new", ETag: ptr("not-an-etag")}).summary(),
				s.del(t, store, "bad", "not-an-etag", "").summary(),
				readOf(s.get(t, store, "bad")),
			}
		}},
	{row: "empty ETag", run: func(t *testing.T, s *stack, store string) []string {
		c := s.client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		lw := map[string]string{"concurrency": "last-write"}
		out := []string{
			s.save(t, store, item{Key: "empty", Value: 1, ETag: ptr("")}).summary(),
			s.save(t, store, item{Key: "empty", Value: 2, ETag: ptr(""), Options: lw}).summary(),
			readOf(s.get(t, store, "empty")),
		}
		err := c.DeleteStateWithETag(ctx, store, "empty", &dapr.ETag{Value: ""}, nil, nil)
		return append(out, fmt.Sprintf("gRPC delete error %v", err), readOf(s.get(t, store, "empty")))
	}},
	{row: "values up to 4 MiB − 1 KiB", run: func(t *testing.T, s *stack, store string) []string {
		var out []string
		for _, n := range []int{1<<20 + 2, 2 << 20, 4<<20 - 1<<10} {
			key := fmt.Sprintf("big-%d", n)
			v := jsonString(n)
			sa := s.save(t, store, item{Key: key, Value: json.RawMessage(v)})
			out = append(out, fmt.Sprintf("%d: %s", n, sa.summary()))
			got := s.get(t, store, key)
			out = append(out, fmt.Sprintf("%d: read %d, same bytes %t", n, got.status, bytes.Equal(got.body, v)))
		}
		return out
	}},
	{row: "values between 4 MiB − 1 KiB and daprd's body limit", differs: true,
		want: []string{"500 ERR_STATE_SAVE --dapr-max-value-bytes", "204"},
		run: func(t *testing.T, s *stack, store string) []string {
			a := s.save(t, store, item{Key: "edge", Value: json.RawMessage(jsonString(4<<20 - 64))})
			out := a.summary()
			if strings.Contains(a.message(), "--dapr-max-value-bytes") {
				out += " --dapr-max-value-bytes"
			}
			return []string{out, readOf(s.get(t, store, "edge"))}
		}},
	{row: "a body over daprd's 4 MiB", run: func(t *testing.T, s *stack, store string) []string {
		a := s.save(t, store, item{Key: "huge", Value: json.RawMessage(jsonString(4<<20 + 1))})
		return []string{a.summary(), readOf(s.get(t, store, "huge"))}
	}},
	{row: "TTL", run: func(t *testing.T, s *stack, store string) []string {
		a := s.save(t, store, item{Key: "ttl", Value: 1, Metadata: map[string]string{"ttlInSeconds": "1"}})
		got := s.get(t, store, "ttl")
		expiry := got.header.Get("Metadata.ttlexpiretime")
		_, perr := time.Parse(time.RFC3339, expiry)
		testproc.Eventually(t, 20*time.Second, "the item expired", func() bool {
			return s.get(t, store, "ttl").status == http.StatusNoContent
		})
		bad := s.save(t, store, item{Key: "ttl2", Value: 1, Metadata: map[string]string{"ttlInSeconds": "soon"}})
		return []string{a.summary(), readOf(got), fmt.Sprintf("ttlExpireTime RFC 3339: %t", perr == nil), "expired", bad.summary()}
	}},
	{row: "bulk get", run: func(t *testing.T, s *stack, store string) []string {
		s.save(t, store, item{Key: "b1", Value: "one"}, item{Key: "b2", Value: "two"})
		a := s.call(t, http.MethodPost, "/v1.0/state/"+store+"/bulk", map[string]any{"keys": []string{"b1", "missing", "b2"}})
		var items []struct {
			Key  string          `json:"key"`
			Data json.RawMessage `json:"data"`
			ETag string          `json:"etag"`
		}
		_ = json.Unmarshal(a.body, &items)
		out := []string{a.summary()}
		for _, it := range items {
			out = append(out, fmt.Sprintf("%s=%s etag %t", it.Key, it.Data, it.ETag != ""))
		}
		// Dapr promises no order of a bulk get's items.
		slices.Sort(out[1:])
		return out
	}},
	{row: "bulk save with one stale ETag", run: func(t *testing.T, s *stack, store string) []string {
		s.save(t, store, item{Key: "s1", Value: 1}, item{Key: "s2", Value: 1})
		e1, e2 := s.etag(t, store, "s1"), s.etag(t, store, "s2")
		s.save(t, store, item{Key: "s2", Value: 2})
		a := s.save(t, store, item{Key: "s1", Value: 3, ETag: &e1}, item{Key: "s2", Value: 3, ETag: &e2})
		return []string{a.summary(), readOf(s.get(t, store, "s1")), readOf(s.get(t, store, "s2"))}
	}},
	{row: "transaction", run: func(t *testing.T, s *stack, store string) []string {
		s.save(t, store, item{Key: "t-old", Value: "old"})
		a := s.call(t, http.MethodPost, "/v1.0/state/"+store+"/transaction", map[string]any{"operations": []any{
			map[string]any{"operation": "upsert", "request": item{Key: "t-new", Value: "new"}},
			map[string]any{"operation": "delete", "request": map[string]string{"key": "t-old"}},
		}})
		return []string{a.summary(), readOf(s.get(t, store, "t-new")), readOf(s.get(t, store, "t-old"))}
	}},
	{row: "transaction with a stale ETag rolls back", run: func(t *testing.T, s *stack, store string) []string {
		s.save(t, store, item{Key: "r-acct", Value: 10})
		stale := s.etag(t, store, "r-acct")
		s.save(t, store, item{Key: "r-acct", Value: 20})
		a := s.call(t, http.MethodPost, "/v1.0/state/"+store+"/transaction", map[string]any{"operations": []any{
			map[string]any{"operation": "upsert", "request": item{Key: "r-new", Value: "new"}},
			map[string]any{"operation": "upsert", "request": item{Key: "r-acct", Value: 30, ETag: &stale}},
		}})
		return []string{a.summary(), readOf(s.get(t, store, "r-new")), readOf(s.get(t, store, "r-acct"))}
	}},
	{row: "query API", differs: true, want: []string{"500 ERR_STATE_QUERY does not support"},
		run: func(t *testing.T, s *stack, store string) []string {
			a := s.call(t, http.MethodPost, "/v1.0-alpha1/state/"+store+"/query", map[string]any{"filter": map[string]any{}})
			out := a.summary()
			if strings.Contains(a.message(), "does not support") {
				out += " does not support"
			}
			return []string{out}
		}},
	{row: "binary values (gRPC)", run: func(t *testing.T, s *stack, store string) []string {
		c := s.client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		v := make([]byte, 256)
		for i := range v {
			v[i] = byte(i)
		}
		err := c.SaveState(ctx, store, "bin", v, nil)
		got, gerr := c.GetStateWithConsistency(ctx, store, "bin", nil, dapr.StateConsistencyStrong)
		return []string{fmt.Sprintf("save error %v", err), fmt.Sprintf("get error %v, same bytes %t", gerr, got != nil && bytes.Equal(got.Value, v))}
	}},
}

// staleSave saves a key twice and then saves it at the first ETag under
// concurrency.
func staleSave(t *testing.T, s *stack, store, concurrency string) []string {
	key := "ss-" + concurrency
	s.save(t, store, item{Key: key, Value: 1})
	stale := s.etag(t, store, key)
	s.save(t, store, item{Key: key, Value: 2})
	return []string{
		s.save(t, store, item{Key: key, Value: 3, ETag: &stale, Options: map[string]string{"concurrency": concurrency}}).summary(),
		readOf(s.get(t, store, key)),
	}
}

// staleDelete saves a key twice and then deletes it at the first ETag
// under concurrency.
func staleDelete(t *testing.T, s *stack, store, concurrency string) []string {
	key := "sd-" + concurrency
	s.save(t, store, item{Key: key, Value: 1})
	stale := s.etag(t, store, key)
	s.save(t, store, item{Key: key, Value: 2})
	return []string{s.del(t, store, key, stale, concurrency).summary(), readOf(s.get(t, store, key))}
}

// readOf summarizes a GET: its status, errorCode, body (or its length when
// long) and whether it carried an ETag.
func readOf(a answer) string {
	out := a.summary()
	if a.status == http.StatusOK {
		body := string(a.body)
		if len(body) > 64 {
			body = fmt.Sprintf("(%d bytes)", len(body))
		}
		out += " " + body
		if a.header.Get("ETag") != "" {
			out += " etag"
		}
	}
	return out
}

// jsonString returns a JSON string of n bytes, quotes included.
func jsonString(n int) []byte {
	v := bytes.Repeat([]byte("x"), n)
	v[0], v[n-1] = '"', '"'
	return v
}

// TestSideBySide runs each behaviour of docs/dapr.md's side-by-side table
// through one daprd against warmcache and against state.postgresql (v2),
// and fails where their answers differ, unless the row says they differ
// (and then warmcache must answer what the row says).
func TestSideBySide(t *testing.T) {
	s := startStack(t)
	doc, err := os.ReadFile("../../docs/dapr.md")
	if err != nil {
		t.Fatal(err)
	}
	table := docRows(string(doc))
	for _, b := range behaviours {
		t.Run(b.row, func(t *testing.T) {
			cells, ok := table[b.row]
			if !ok {
				t.Errorf("docs/dapr.md's side-by-side table has no row %q", b.row)
			}
			// The store's own rows: each behaviour runs on its own keys.
			pg := b.run(t, s, storePostgres)
			wc := b.run(t, s, storeWarmcache)
			same := slices.Equal(pg, wc)
			documented := strings.Contains(cells, "differs")
			switch {
			case !b.differs && !same:
				t.Errorf("warmcache answers differently from state.postgresql, and the row does not say so:\nwarmcache:          %q\nstate.postgresql:   %q", wc, pg)
			case b.differs && same:
				t.Errorf("the row says warmcache differs from state.postgresql, but both answer %q", wc)
			case b.differs && !slices.Equal(wc, b.want):
				t.Errorf("warmcache answers %q; the row says %q (state.postgresql: %q)", wc, b.want, pg)
			}
			if b.differs != documented {
				t.Errorf("docs/dapr.md's row %q says differs: %t; the test says %t", b.row, documented, b.differs)
			}
			t.Logf("warmcache: %q\nstate.postgresql: %q\nstate.redis: %q", wc, pg, b.run(t, s, storeRedis))
		})
	}
}

// docRows returns the rows of docs/dapr.md's side-by-side table, by their
// first cell, with the rest of the row.
func docRows(doc string) map[string]string {
	const heading = "### Side by side with Dapr's built-in stores"
	_, rest, _ := strings.Cut(doc, heading)
	rows := map[string]string{}
	for _, line := range strings.Split(rest, "\n") {
		if strings.HasPrefix(line, "#") {
			break
		}
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.SplitN(strings.TrimPrefix(line, "| "), " | ", 2)
		if len(cells) == 2 {
			rows[strings.TrimSpace(cells[0])] = cells[1]
		}
	}
	return rows
}

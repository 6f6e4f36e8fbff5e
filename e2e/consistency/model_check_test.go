package consistency_test

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// registerServer serves the REST API's GET, PUT (with If-Match) and DELETE
// of nsName's keys from memory, each request under one lock: linearizable
// by construction. stale makes one read in five answer the key's state
// before its last write, as a cache that missed an update would; flaky
// answers one write in five with 503, after applying it or not.
type registerServer struct {
	stale, flaky bool

	mu      sync.Mutex
	rng     *rand.Rand
	version int64
	now     map[int]kvState
	before  map[int]kvState
}

func (s *registerServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/v1/kv/"+nsName+"/"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var body struct {
		W string `json:"w"`
	}
	if r.Method == http.MethodPut {
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	var match int64
	if m := r.Header.Get("If-Match"); m != "" {
		if match, err = strconv.ParseInt(strings.Trim(m, `"`), 10, 64); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.now[key]
	write := func(next kvState, status int) {
		s.before[key], s.now[key] = cur, next
		switch {
		case s.flaky && s.rng.IntN(5) == 0:
			w.WriteHeader(http.StatusServiceUnavailable)
		case status == http.StatusOK:
			w.Header().Set("ETag", strconv.Quote(strconv.FormatInt(next.Version, 10)))
			w.WriteHeader(status)
		default:
			w.WriteHeader(status)
		}
	}
	switch r.Method {
	case http.MethodGet:
		st := cur
		if s.stale && s.rng.IntN(5) == 0 {
			st = s.before[key]
		}
		if !st.Present {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("ETag", strconv.Quote(strconv.FormatInt(st.Version, 10)))
		_ = json.NewEncoder(w).Encode(map[string]string{"w": st.Value})
	case http.MethodPut:
		if match != 0 && (!cur.Present || cur.Version != match) {
			w.WriteHeader(http.StatusPreconditionFailed)
			return
		}
		if s.flaky && s.rng.IntN(10) == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		s.version++
		write(kvState{Present: true, Value: body.W, Version: s.version}, http.StatusOK)
	case http.MethodDelete:
		if !cur.Present {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		if s.flaky && s.rng.IntN(10) == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		write(kvState{}, http.StatusNoContent)
	}
}

// runAgainst runs the clients against srv and checks the history.
func runAgainst(t *testing.T, srv *registerServer) []keyResult {
	t.Helper()
	srv.rng = rand.New(rand.NewPCG(7, 8))
	srv.now, srv.before = map[int]kvState{}, map[int]kvState{}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	in := &instance{name: "memory", url: hs.URL,
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	rec := newRecorder()
	c := runClients(in, rec, workload{clients: 8, keys: 3, d: 500 * time.Millisecond, perClient: 50}, 9)
	if len(c.unexpected) > 0 || c.reads == 0 || c.writes == 0 {
		t.Fatalf("%v; unexpected answers: %v", c, c.unexpected)
	}
	t.Logf("%v", c)
	return checkKeys(registerModel.ToModel(), rec.history())
}

// TestLinearizableModel holds the model, the checker and the witnesses to
// a server that is linearizable by construction, with and without writes
// of unknown outcome, and shows that they catch one that serves stale
// reads.
func TestLinearizableModel(t *testing.T) {
	for _, flaky := range []bool{false, true} {
		name := map[bool]string{false: "linearizable", true: "linearizable with 503s"}[flaky]
		t.Run(name, func(t *testing.T) {
			for _, r := range runAgainst(t, &registerServer{flaky: flaky}) {
				if r.res != porcupine.Ok {
					t.Errorf("key %d: %d operations of a linearizable server checked %s", r.key, len(r.ops), r.res)
				}
				for _, w := range witnesses(r.ops) {
					t.Errorf("key %d: a linearizable server's history has a %s read: %s", r.key, w.kind, w.text)
				}
			}
		})
	}
	t.Run("stale reads", func(t *testing.T) {
		illegal, witnessed := 0, 0
		for _, r := range runAgainst(t, &registerServer{stale: true}) {
			if r.res == porcupine.Illegal {
				illegal++
			}
			if len(witnesses(r.ops)) > 0 {
				witnessed++
			}
		}
		if illegal == 0 || witnessed == 0 {
			t.Errorf("a server serving stale reads: %d keys' histories found not linearizable, %d with a witness", illegal, witnessed)
		}
	})
}

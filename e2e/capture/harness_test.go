package capture_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/e2e/internal/harness"
	"github.com/warmcache/warmcache/internal/testproc"
)

// warmcacheBin is the warmcache binary the tests run, built once by
// TestMain.
var warmcacheBin string

func TestMain(m *testing.M) { harness.Main(m, "capture", &warmcacheBin) }

// namespacesYAML declares the one namespace of the tests: a long TTL, so
// that only change capture or polling can make a changed key fresh.
func namespacesYAML() string {
	return harness.NamespacesYAML(harness.Namespace("widgets", "widgets", "bigint",
		"ttl: 10m", "negative_ttl: 10m", "writable: true", "managed: true", "storage: {partitions: 2}"))
}

// stack is a PostgreSQL cluster with wal_level = logical and a Redis of
// the test's own, with the widgets namespace migrated and seeded.
type stack struct {
	pg      *testproc.Postgres
	redis   *testproc.Redis
	dsn     string
	nsFile  string
	keys    []int64
	history *history
}

// newStack starts the servers, migrates, and seeds keys 1..n, each at
// sequence 0.
func newStack(t testing.TB, n int) *stack {
	t.Helper()
	return newStackWith(t, n, "wal_level=logical")
}

// newStackWith is newStack with more PostgreSQL settings.
func newStackWith(t testing.TB, n int, settings ...string) *stack {
	t.Helper()
	pg := testproc.StartPostgres(t, append([]string{"max_wal_senders=10", "max_replication_slots=10",
		"wal_sender_timeout=10s", "max_connections=100"}, settings...)...)
	s := &stack{pg: pg, redis: testproc.StartRedis(t), history: newHistory()}
	s.dsn = pg.CreateDatabase(t, "warmcache")
	s.nsFile = harness.WriteFile(t, "namespaces.yaml", namespacesYAML())
	harness.Migrate(t, warmcacheBin, s.dsn, "--namespaces", s.nsFile)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := s.connect(t)
	// No version given: the column's default takes it from the sequence.
	if _, err := conn.Exec(ctx, `INSERT INTO widgets (key, value)
		SELECT i, jsonb_build_object('k', i, 'seq', 0) FROM generate_series(1, $1::int) AS i`, n); err != nil {
		t.Fatalf("seed: %v", err)
	}
	now := time.Now()
	for i := 1; i <= n; i++ {
		s.keys = append(s.keys, int64(i))
		s.history.record(int64(i), 0, true, now)
	}
	return s
}

// connect opens a connection to the warehouse, closed when the test ends.
func (s *stack) connect(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// instance is one `warmcache serve` process.
type instance struct {
	name   string
	url    string
	proc   *harness.Process
	log    *harness.Log
	client *http.Client
}

// startInstance runs `warmcache serve` (harness.Spawn) on free ports with
// the stack's servers and env on top, in change capture mode auto unless env
// says otherwise, and returns when it is ready.
func (s *stack) startInstance(t testing.TB, name string, env map[string]string) *instance {
	t.Helper()
	vars := map[string]string{
		"WARMCACHE_POSTGRES_DSN":     s.dsn,
		"WARMCACHE_REDIS_ADDRS":      s.redis.Addr,
		"WARMCACHE_NAMESPACES_FILE":  s.nsFile,
		"WARMCACHE_FRESHNESS":        "auto",
		"WARMCACHE_REPLICATION_SLOT": "warmcache_test",
		"WARMCACHE_LOG_LEVEL":        "info",
	}
	for k, v := range env {
		vars[k] = v
	}
	// REST, gRPC and the notice of open access.
	sv := harness.Spawn(t, warmcacheBin, vars, 3)
	in := &instance{name: name, url: sv.HTTP, proc: sv.Process, log: sv.Log,
		client: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log (end):\n%s", name, in.logTail())
		}
	})
	return in
}

// logTail returns the end of the instance's log.
func (in *instance) logTail() string { return in.log.TailBytes(4 << 10) }

// mode returns the change capture mode the instance reports in its metrics.
func (in *instance) mode() string {
	res, err := in.client.Get(in.url + "/metrics")
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, `warmcache_freshness_mode{mode="`); ok && strings.HasSuffix(line, "} 1") {
			return rest[:strings.IndexByte(rest, '"')]
		}
	}
	return ""
}

// get reads one key: its sequence, whether it is present, and false when
// no valid answer came.
func (in *instance) get(ctx context.Context, key int64) (seq int64, present, ok bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.url+"/v1/kv/widgets/"+strconv.FormatInt(key, 10), nil)
	if err != nil {
		return 0, false, false
	}
	res, err := in.client.Do(req)
	if err != nil {
		return 0, false, false
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	switch {
	case err != nil:
		return 0, false, false
	case res.StatusCode == http.StatusNotFound:
		return 0, false, true
	case res.StatusCode != http.StatusOK:
		return 0, false, false
	}
	var v struct{ Seq int64 }
	if json.Unmarshal(body, &v) != nil {
		return 0, false, false
	}
	return v.Seq, true, true
}

// mget reads keys in one request: the sequence of each present key.
func (in *instance) mget(keys []int64) (map[int64]int64, error) {
	body, _ := json.Marshal(map[string][]int64{"keys": keys})
	res, err := in.client.Post(in.url+"/v1/kv/widgets/_mget", "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", res.StatusCode)
	}
	var out struct {
		Items map[string]struct{ Seq int64 }
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		return nil, err
	}
	m := make(map[int64]int64, len(out.Items))
	for k, v := range out.Items {
		n, _ := strconv.ParseInt(k, 10, 64)
		m[n] = v.Seq
	}
	return m, nil
}

// state is one committed state of a key.
type state struct {
	seq     int64
	present bool
	at      time.Time // when the commit returned
}

// history is every committed state of every key, in commit order.
type history struct {
	mu     sync.Mutex
	states map[int64][]state
}

func newHistory() *history { return &history{states: map[int64][]state{}} }

func (h *history) record(key, seq int64, present bool, at time.Time) {
	h.mu.Lock()
	h.states[key] = append(h.states[key], state{seq, present, at})
	h.mu.Unlock()
}

func (h *history) last(key int64) state {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.states[key]
	return s[len(s)-1]
}

// write changes key once directly in SQL, as a writer the service does not
// see: an UPDATE that does not set the version, a DELETE, or an INSERT
// that takes the version's default. It records the new state.
func (s *stack) write(ctx context.Context, conn *pgx.Conn, key int64, rng *rand.Rand) error {
	cur := s.history.last(key)
	seq := cur.seq + 1
	value := fmt.Sprintf(`{"k": %d, "seq": %d}`, key, seq)
	var err error
	present := true
	switch {
	case !cur.present:
		_, err = conn.Exec(ctx, `INSERT INTO widgets (key, value) VALUES ($1, $2)`, key, value)
	case rng.IntN(5) == 0:
		_, err = conn.Exec(ctx, `DELETE FROM widgets WHERE key = $1`, key)
		present = false
	default:
		_, err = conn.Exec(ctx, `UPDATE widgets SET value = $2 WHERE key = $1`, key, value)
	}
	if err != nil {
		return err
	}
	s.history.record(key, seq, present, time.Now())
	return nil
}

// writeEach writes every key once.
func (s *stack) writeEach(t testing.TB, conn *pgx.Conn) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, k := range s.keys {
		if err := s.write(ctx, conn, k, rng); err != nil {
			t.Fatalf("write %d: %v", k, err)
		}
	}
}

// writers runs n writers, each on its own share of the keys, until ctx
// ends; it returns when they have stopped. Each write runs to its end
// whatever ctx says, so that every committed write is recorded. A write
// that fails (the server gone for a moment) leaves its key's state unknown:
// the writer records the state the warehouse has, and goes on once the
// server answers again.
func (s *stack) writers(t testing.TB, ctx context.Context, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for w := range n {
		var mine []int64
		for i, k := range s.keys {
			if i%n == w {
				mine = append(mine, k)
			}
		}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			var conn *pgx.Conn
			defer func() {
				if conn != nil {
					_ = conn.Close(context.Background())
				}
			}()
			for ctx.Err() == nil {
				if conn == nil {
					cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					c, err := pgx.Connect(cctx, s.dsn)
					cancel()
					if err != nil {
						time.Sleep(50 * time.Millisecond)
						continue
					}
					conn = c
				}
				key := mine[rng.IntN(len(mine))]
				wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := s.write(wctx, conn, key, rng)
				cancel()
				if err != nil {
					_ = conn.Close(context.Background())
					conn = nil
					s.reconcile(key)
					continue
				}
				time.Sleep(time.Duration(rng.IntN(4)) * time.Millisecond)
			}
		})
	}
	wg.Wait()
}

// reconcile records the state the warehouse has for key after a write
// whose outcome is unknown, retrying until the server answers (for at most
// a minute).
func (s *stack) reconcile(key int64) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, s.dsn)
		if err == nil {
			var seq *int64
			err = conn.QueryRow(ctx, `SELECT (value->>'seq')::bigint FROM widgets WHERE key = $1`, key).Scan(&seq)
			_ = conn.Close(ctx)
			cancel()
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				if s.history.last(key).present {
					s.history.record(key, s.history.last(key).seq+1, false, time.Now())
				}
				return
			case err == nil:
				if last := s.history.last(key); !last.present || last.seq != *seq {
					s.history.record(key, *seq, true, time.Now())
				}
				return
			}
		} else {
			cancel()
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// read is one GET's answer.
type read struct {
	key     int64
	seq     int64
	present bool
	at      time.Time // when the request started
}

// readers runs n readers on random keys until ctx ends and returns their
// answers.
func readers(ctx context.Context, in *instance, keys []int64, n int) []read {
	var mu sync.Mutex
	var all []read
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 11))
			var mine []read
			for ctx.Err() == nil {
				k := keys[rng.IntN(len(keys))]
				at := time.Now()
				seq, present, ok := in.get(ctx, k)
				if ok {
					mine = append(mine, read{k, seq, present, at})
				}
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return all
}

// matches reports whether a read answered state st.
func (r read) matches(st state) bool {
	if !r.present {
		return !st.present
	}
	return st.present && st.seq == r.seq
}

// report is what analyze finds.
type report struct {
	reads, stale  int
	lags          []time.Duration
	p50, p99, max time.Duration
}

// analyze counts the reads that answered a state older than one committed
// more than staleAfter before the read started, and measures each state's
// lag: from its commit to the start of the first read of its key that
// answered it or a later state.
func analyze(h *history, reads []read, staleAfter time.Duration) report {
	h.mu.Lock()
	defer h.mu.Unlock()
	byKey := map[int64][]read{}
	for _, r := range reads {
		byKey[r.key] = append(byKey[r.key], r)
	}
	rep := report{reads: len(reads)}
	for key, rs := range byKey {
		slices.SortFunc(rs, func(a, b read) int { return a.at.Compare(b.at) })
		states := h.states[key]
		// idx[i] is the state read i answered: the newest one it matches
		// that was committed before the read ended (a second is allowed
		// for that), -1 for none.
		idx := make([]int, len(rs))
		for i, r := range rs {
			idx[i] = -1
			for j := len(states) - 1; j >= 0; j-- {
				if r.matches(states[j]) && !states[j].at.After(r.at.Add(time.Second)) {
					idx[i] = j
					break
				}
			}
		}
		for i, r := range rs {
			cut := r.at.Add(-staleAfter)
			want := 0
			for j, st := range states {
				if !st.at.After(cut) {
					want = j
				}
			}
			if idx[i] < want {
				rep.stale++
			}
		}
		for j := 1; j < len(states); j++ {
			for i, r := range rs {
				if r.at.Before(states[j].at) {
					continue
				}
				if idx[i] >= j {
					rep.lags = append(rep.lags, r.at.Sub(states[j].at))
					break
				}
			}
		}
	}
	slices.Sort(rep.lags)
	if n := len(rep.lags); n > 0 {
		rep.p50, rep.p99, rep.max = rep.lags[n/2], rep.lags[n*99/100], rep.lags[n-1]
	}
	return rep
}

// staleKeys reads every key in one request each of up to 500 keys and
// returns those whose answer is not their last committed state.
func (s *stack) staleKeys(in *instance) ([]int64, error) {
	var stale []int64
	for start := 0; start < len(s.keys); start += 500 {
		keys := s.keys[start:min(start+500, len(s.keys))]
		got, err := in.mget(keys)
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			last := s.history.last(k)
			seq, present := got[k]
			if present != last.present || present && seq != last.seq {
				stale = append(stale, k)
			}
		}
	}
	return stale, nil
}

// converge waits until every key answers its last committed state and
// returns how long that took; it fails the test after limit.
func (s *stack) converge(t testing.TB, in *instance, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		stale, err := s.staleKeys(in)
		if err == nil && len(stale) == 0 {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("%s: %d keys still stale %v after the writes (first: %v), err %v", in.name, len(stale), limit, stale[:min(5, len(stale))], err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// prewarm reads every key once, so that Redis holds them all: a change
// that is not applied then stays visible as a stale read.
func (s *stack) prewarm(t testing.TB, in *instance) {
	t.Helper()
	if stale, err := s.staleKeys(in); err != nil || len(stale) > 0 {
		t.Fatalf("prewarm: %d stale keys, err %v", len(stale), err)
	}
}

package daprd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	dapr "github.com/dapr/go-sdk/client"
	"github.com/redis/go-redis/v9"
	"gopkg.in/yaml.v3"

	"github.com/warmcache/warmcache/e2e/internal/harness"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/testproc"
)

// warmcacheBin is the warmcache binary that TestMain builds.
var warmcacheBin string

func TestMain(m *testing.M) { harness.Main(m, "daprd", &warmcacheBin) }

// The component names of deploy/dapr's YAMLs: warmcache's, and Dapr's own
// PostgreSQL (v2) and Redis stores beside it in the same daprd.
const (
	storeWarmcache = "statestore"
	storePostgres  = "pgstate"
	storeRedis     = "redisstate"
)

// deployDir is deploy/dapr, whose YAMLs the stack loads.
const deployDir = "../../deploy/dapr"

// stack is one daprd in standalone mode with warmcache as its pluggable
// state store (deploy/dapr's component and namespace), beside
// state.postgresql v2 on the same PostgreSQL server and state.redis on the
// same Redis.
type stack struct {
	warmcache *harness.Process
	daprd     *testproc.Process
	socket    string
	// serve is how warmcache is served: its environment and flags, and
	// its log, of the last start.
	serveEnv  map[string]string
	serveArgs []string
	serveLog  *harness.Log
	// HTTP is daprd's HTTP API, http://127.0.0.1:port; GRPC its gRPC API.
	HTTP, GRPC string
	// Prefix is the key prefix daprd gives every key (keyPrefix), unique to
	// the test.
	Prefix string
	// DSN is the warehouse database of both PostgreSQL stores.
	DSN string
}

// startStack migrates a fresh database with deploy/dapr's namespaces,
// serves warmcache on it and the test Redis with the pluggable component on
// a socket folder of its own, and starts daprd with deploy/dapr's
// components, templated for the test's servers, on free ports. Everything
// stops when the test ends. Without daprd the test is skipped, saying so
// (testenv.Daprd).
func startStack(t testing.TB, serveArgs ...string) *stack {
	t.Helper()
	daprdBin := testenv.Daprd(t)
	dir := harness.SocketDir(t, "wc-daprd-")
	s := &stack{DSN: testenv.NewDatabase(t), Prefix: "t" + testenv.RandomSuffix(t)}
	redisAddr := testenv.RedisAddr(t)
	t.Cleanup(func() { dropRedisKeys(t, redisAddr, s.Prefix+"||*") })

	namespaces, err := filepath.Abs(filepath.Join(deployDir, "namespaces.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := harness.Run(context.Background(), warmcacheBin, []string{"migrate", "up", "--namespaces", namespaces},
		map[string]string{"WARMCACHE_POSTGRES_DSN": s.DSN}, &out, &errOut); err != nil {
		t.Fatalf("migrate up: %v\n%s%s", err, out.String(), errOut.String())
	}
	sockets := filepath.Join(dir, "sockets")
	s.socket = filepath.Join(sockets, "warmcache.sock")
	env := map[string]string{
		"WARMCACHE_POSTGRES_DSN":         s.DSN,
		"WARMCACHE_REDIS_ADDRS":          redisAddr,
		"WARMCACHE_REDIS_PREFIX":         "daprd-" + s.Prefix + ":",
		"WARMCACHE_HOT_TIMEOUT":          "1s",
		"DAPR_COMPONENTS_SOCKETS_FOLDER": sockets,
		// Writes go through the component: polling suffices, and leaves no
		// replication slot for the database's drop to race with.
		"WARMCACHE_FRESHNESS": "poll",
	}
	s.serveEnv = env
	s.serveArgs = append([]string{"--namespaces", namespaces, "--grpc-addr=", "--dapr-components", storeWarmcache}, serveArgs...)
	s.startWarmcache(t)

	resources := filepath.Join(dir, "resources")
	writeComponents(t, resources, s.Prefix, map[string]map[string]string{
		storePostgres: {"connectionString": s.DSN},
		storeRedis:    {"redisHost": redisAddr},
	})
	httpPort, grpcPort := testproc.FreePort(t), testproc.FreePort(t)
	s.HTTP, s.GRPC = fmt.Sprintf("http://127.0.0.1:%d", httpPort), fmt.Sprintf("127.0.0.1:%d", grpcPort)
	s.daprd = &testproc.Process{Path: daprdBin, Dir: dir, Log: filepath.Join(dir, "daprd.log"), Quit: syscall.SIGTERM,
		Env: []string{"DAPR_COMPONENTS_SOCKETS_FOLDER=" + sockets},
		Args: []string{"--app-id", "orders", "--resources-path", resources, "--log-level", "warn",
			"--dapr-http-port", strconv.Itoa(httpPort), "--dapr-grpc-port", strconv.Itoa(grpcPort),
			"--dapr-internal-grpc-port", strconv.Itoa(testproc.FreePort(t)),
			"--metrics-port", strconv.Itoa(testproc.FreePort(t)), "--metrics-listen-address", "127.0.0.1",
			"--dapr-listen-addresses", "127.0.0.1", "--dapr-internal-grpc-listen-address", "127.0.0.1"}}
	s.daprd.Start(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daprd's log:\n%s\nwarmcache's log:\n%s", s.daprd.LogTail(), s.serveLog.TailBytes(4<<10))
		}
	})
	healthz := s.HTTP + "/v1.0/healthz"
	testproc.Eventually(t, 90*time.Second, "daprd healthy with its components", func() bool {
		if !s.daprd.Running() {
			t.Fatalf("daprd exited:\n%s", s.daprd.LogTail())
		}
		resp, err := http.Get(healthz)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusNoContent
	})
	return s
}

// startWarmcache starts (or restarts) warmcache (harness.Spawn) and
// returns once it serves the pluggable component on its socket.
func (s *stack) startWarmcache(t testing.TB) {
	t.Helper()
	// REST, the pluggable component, and the notice of open access.
	sv := harness.Spawn(t, warmcacheBin, s.serveEnv, 3, s.serveArgs...)
	if sv.DaprSocket != s.socket {
		t.Fatalf("warmcache serves the component on %q, want %s; printed %q", sv.DaprSocket, s.socket, sv.Lines)
	}
	s.warmcache, s.serveLog = sv.Process, sv.Log
}

// writeComponents writes deploy/dapr's component YAMLs to dir: warmcache's
// as it is, and Dapr's built-in stores' with the metadata values of
// values, by component name. Every component gets keyPrefix prefix, so that
// the test's keys on the shared Redis are its own.
func writeComponents(t testing.TB, dir, prefix string, values map[string]map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := []string{filepath.Join(deployDir, "components", "statestore.yaml"),
		filepath.Join(deployDir, "builtin", "postgresql.yaml"), filepath.Join(deployDir, "builtin", "redis.yaml")}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			APIVersion string `yaml:"apiVersion"`
			Kind       string `yaml:"kind"`
			Metadata   struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
			Spec struct {
				Type     string `yaml:"type"`
				Version  string `yaml:"version"`
				Metadata []struct {
					Name  string `yaml:"name"`
					Value string `yaml:"value"`
				} `yaml:"metadata"`
			} `yaml:"spec"`
		}
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		set := values[doc.Metadata.Name]
		for i, m := range doc.Spec.Metadata {
			if v, ok := set[m.Name]; ok {
				doc.Spec.Metadata[i].Value = v
				delete(set, m.Name)
			}
		}
		if len(set) > 0 {
			t.Fatalf("%s has no metadata %v to set", f, set)
		}
		doc.Spec.Metadata = append(doc.Spec.Metadata, struct {
			Name  string `yaml:"name"`
			Value string `yaml:"value"`
		}{"keyPrefix", prefix})
		out, err := yaml.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, doc.Metadata.Name+".yaml"), out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// dropRedisKeys deletes the keys of pattern that state.redis left.
func dropRedisKeys(t testing.TB, addr, pattern string) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if len(keys) > 0 {
		c.Del(ctx, keys...)
	}
}

// client connects the Dapr Go SDK to daprd's gRPC API.
func (s *stack) client(t *testing.T) dapr.Client {
	t.Helper()
	c, err := dapr.NewClientWithAddress(s.GRPC)
	if err != nil {
		t.Fatalf("dapr.NewClientWithAddress(%s): %v", s.GRPC, err)
	}
	t.Cleanup(c.Close)
	return c
}

// answer is daprd's HTTP answer: its status, headers, and body.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// errorCode returns the errorCode of a daprd error body, or "".
func (a answer) errorCode() string {
	var e struct {
		ErrorCode string `json:"errorCode"`
	}
	_ = json.Unmarshal(a.body, &e)
	return e.ErrorCode
}

// message returns the message of a daprd error body, or "".
func (a answer) message() string {
	var e struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(a.body, &e)
	return e.Message
}

// call sends method path with body (JSON-encoded unless []byte or nil) and
// headers to daprd's HTTP API.
func (s *stack) call(t testing.TB, method, path string, body any, headers ...string) answer {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, s.HTTP+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: raw}
}

// item is one item of a save over daprd's HTTP API.
type item struct {
	Key      string            `json:"key"`
	Value    any               `json:"value"`
	ETag     *string           `json:"etag,omitempty"`
	Options  map[string]string `json:"options,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

func (s *stack) save(t testing.TB, store string, items ...item) answer {
	t.Helper()
	return s.call(t, http.MethodPost, "/v1.0/state/"+store, items)
}

func (s *stack) get(t *testing.T, store, key string) answer {
	t.Helper()
	return s.call(t, http.MethodGet, "/v1.0/state/"+store+"/"+key, nil)
}

// etag returns the ETag of key in store, failing if key is absent.
func (s *stack) etag(t *testing.T, store, key string) string {
	t.Helper()
	a := s.get(t, store, key)
	e := a.header.Get("ETag")
	if a.status != http.StatusOK || e == "" {
		t.Fatalf("GET %s/%s = %d %q (ETag %q); want the item with its ETag", store, key, a.status, a.body, e)
	}
	return e
}

// del deletes key; etag and concurrency, when not empty, go in If-Match
// and the concurrency query parameter.
func (s *stack) del(t *testing.T, store, key, etag, concurrency string) answer {
	t.Helper()
	path := "/v1.0/state/" + store + "/" + key
	if concurrency != "" {
		path += "?concurrency=" + concurrency
	}
	var h []string
	if etag != "" {
		h = []string{"If-Match", etag}
	}
	return s.call(t, http.MethodDelete, path, nil, h...)
}

func ptr(s string) *string { return &s }

// summary is an answer as the side-by-side test compares it: the status,
// daprd's errorCode, and for a read whether it carried an ETag.
func (a answer) summary() string {
	out := strconv.Itoa(a.status)
	if c := a.errorCode(); c != "" {
		out += " " + c
	}
	return out
}

package abuse

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/warmcache/warmcache/e2e/internal/harness"
	"github.com/warmcache/warmcache/internal/grpcapi/warmcachev1"
	"github.com/warmcache/warmcache/internal/testenv"
)

// binaryPath is the warmcache binary TestMain builds.
var binaryPath string

func TestMain(m *testing.M) { harness.Main(m, "abuse", &binaryPath) }

// The API keys every server has: a token per role.
const (
	tokenWriter = "writer-token-widgets-texts"   // read, write on widgets, texts, checked
	tokenReader = "reader-token-every-namespace" // read on *
	tokenOther  = "other-token-texts-only"       // read, write on texts
)

// keysYAML is the keys file of every server: a key per token.
func keysYAML() string {
	return harness.KeysYAML(
		harness.APIKey{ID: "writer", Token: tokenWriter, Scopes: "[read, write]", Namespaces: "[widgets, texts, checked, readonly]"},
		harness.APIKey{ID: "reader", Token: tokenReader, Scopes: "[read]", Namespaces: `["*"]`},
		harness.APIKey{ID: "other", Token: tokenOther, Scopes: "[read, write]", Namespaces: "[texts]"},
	)
}

// namespacesYAML declares widgets (bigint keys) and texts (text keys),
// which the service writes and migrates; readonly, a read-only view of
// widgets; and checked, a writable namespace over the existing table
// checkedTable.
func namespacesYAML() string {
	return harness.NamespacesYAML(
		harness.Namespace("widgets", "widgets", "bigint", harness.Writable("storage: {partitions: 4, gin_index: true}")...),
		harness.Namespace("texts", "texts", "text", harness.Writable("storage: {partitions: 4}")...),
		harness.Namespace("readonly", "widgets", "bigint", harness.Lifetimes("writable: false", "managed: false")...),
		harness.Namespace("checked", "checked", "bigint", harness.Lifetimes("writable: true", "managed: false")...),
	)
}

// checkedTable is an existing table with a CHECK constraint, which a
// client's bad writes violate.
const checkedTable = `CREATE TABLE checked (
	key bigint PRIMARY KEY,
	value jsonb NOT NULL CHECK (value ? 'ok'),
	version bigint NOT NULL
)`

// server is a running `warmcache serve` process.
type server struct {
	proc   *harness.Process
	http   string // base URL
	grpc   string // host:port
	dsn    string // the database, directly
	log    *harness.Log
	client *http.Client
}

// startServer migrates a fresh database and starts the binary on it
// through PgBouncer, with a Redis prefix of its own, on free loopback
// ports (harness.Spawn). extra are more flags. It is stopped when the test
// ends, and must then drain and exit cleanly.
func startServer(t *testing.T, extra ...string) *server {
	t.Helper()
	dsn := testenv.NewDatabase(t)
	db := testenv.DatabaseName(t, dsn)
	pgb := testenv.PgBouncerDSN(t, db)
	redis := testenv.RedisAddr(t)
	keys := harness.WriteFile(t, "keys.yaml", keysYAML())
	nss := harness.WriteFile(t, "namespaces.yaml", namespacesYAML())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, checkedTable); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	harness.Migrate(t, binaryPath, dsn, "--namespaces", nss)

	env := map[string]string{
		"WARMCACHE_POSTGRES_DSN": pgb,
		"WARMCACHE_PG_POOLER":    "pgbouncer",
		"WARMCACHE_REDIS_ADDRS":  redis,
		"WARMCACHE_REDIS_PREFIX": "abuse:" + testenv.RandomSuffix(t) + ":",
		// A loaded 2-core machine: Redis calls must not miss their deadline.
		"WARMCACHE_HOT_TIMEOUT": "1s",
		"WARMCACHE_LOG_LEVEL":   "warn",
	}
	// REST and gRPC; with keys, no notice of open access.
	sv := harness.Spawn(t, binaryPath, env, 2, append([]string{"--namespaces", nss, "--keys-file", keys}, extra...)...)
	s := &server{proc: sv.Process, http: sv.HTTP, grpc: sv.GRPC, dsn: dsn, log: sv.Log,
		client: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	t.Cleanup(func() {
		if err := sv.Process.Stop(t, syscall.SIGTERM); err != nil {
			t.Errorf("the server exited with %v; log:\n%s", err, sv.Log.TailLines(40))
		}
	})
	return s
}

// reply is an HTTP answer.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// errorCode returns the code of the JSON error shape, or "" when the body
// is not that shape.
func (r reply) errorCode() string {
	var doc struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(r.body, &doc) != nil || doc.Error.Message == "" {
		return ""
	}
	return doc.Error.Code
}

func (r reply) message() string {
	var doc struct {
		Error struct{ Message string } `json:"error"`
	}
	_ = json.Unmarshal(r.body, &doc)
	return doc.Error.Message
}

// do sends one request with the token (empty: none) and headers.
func (s *server) do(t *testing.T, method, path, token string, body io.Reader, header ...string) reply {
	t.Helper()
	raw, isRaw := strings.CutPrefix(path, "RAW:")
	target := s.http + path
	if isRaw {
		target = s.http + "/"
	}
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		t.Fatal(err)
	}
	if isRaw {
		// Sent as written, without the client's cleaning or escaping.
		req.URL.Opaque = raw
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := s.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		t.Fatalf("%s %s: read answer: %v", method, path, err)
	}
	return reply{status: res.StatusCode, header: res.Header, body: b}
}

// grpcConn dials the server's gRPC listener.
func (s *server) grpcConn(t *testing.T) warmcachev1.CacheClient {
	t.Helper()
	cc, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(128<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return warmcachev1.NewCacheClient(cc)
}

// withToken returns ctx carrying the bearer token.
func withToken(ctx context.Context, token string) context.Context {
	if token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// resetPeakRSS resets the process's peak resident set size (VmHWM), so
// that the next peakRSS reads the peak of what happens after.
func (s *server) resetPeakRSS(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", s.proc.Pid()), []byte("5"), 0); err != nil {
		t.Fatalf("reset the peak RSS: %v", err)
	}
}

// peakRSS returns the process's peak resident set size in bytes (VmHWM).
func (s *server) peakRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.proc.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/<pid>/status")
	return 0
}

const mib = 1 << 20

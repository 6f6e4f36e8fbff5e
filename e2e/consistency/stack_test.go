package consistency_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmcache/warmcache/e2e/internal/harness"
	"github.com/warmcache/warmcache/internal/testenv"
	"github.com/warmcache/warmcache/internal/testproc"
)

// nsName is the one namespace of these tests: a bigint key and a packed
// JSON value of the form {"w": "<write id>"}.
const nsName = "registers"

// namespacesYAML declares nsName, with the near_ttl nearTTL when near,
// and otherwise nothing kept in the near cache. The TTL is long, so that
// every change of a cached entry in a run comes from a write, a fill after
// a miss, or change capture, never from an expiry.
func namespacesYAML(near bool) string {
	settings := []string{"ttl: 10m", "writable: true", "managed: true"}
	if near {
		settings = append(settings, fmt.Sprintf("near_ttl: %v", nearTTL))
	}
	return harness.NamespacesYAML(harness.Namespace(nsName, nsName, "bigint", settings...))
}

// nearTTL is the namespace's near_ttl when the near cache is on: the
// documented bound on how long another instance may serve an entry that a
// write replaced.
const nearTTL = time.Second

// adminApp is the application_name of the tests' own warehouse sessions, so
// that terminating the service's sessions spares them.
const adminApp = "consistency-test"

// cluster is a PostgreSQL cluster of the test's own with wal_level =
// logical, on which each run gets a database of its own.
type cluster struct {
	pg *testproc.Postgres
}

// startCluster initdb's and starts the cluster, stopped when the test
// ends.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	return &cluster{pg: testproc.StartPostgres(t, "wal_level=logical", "max_wal_senders=20",
		"max_replication_slots=20", "wal_sender_timeout=10s", "max_connections=200")}
}

// database is one database with the namespace migrated.
type database struct {
	dsn       string
	name      string
	nsFile    string
	greenplum bool
	slot      string // the replication slot of its instances
}

// newDatabase creates a database on the cluster and migrates it.
func (c *cluster) newDatabase(t *testing.T, near bool) *database {
	t.Helper()
	name := "wc_" + testenv.RandomSuffix(t)
	return migrated(t, c.pg.CreateDatabase(t, name), name, near, false)
}

// newGreenplumDatabase creates a database on the Greenplum of
// WARMCACHE_TEST_GREENPLUM_DSN and migrates it; without that server the
// test is skipped, or fails under CI=true (see testenv.GreenplumServer).
func newGreenplumDatabase(t *testing.T, near bool) *database {
	t.Helper()
	dsn := testenv.NewGreenplumDatabase(t)
	return migrated(t, dsn, testenv.DatabaseName(t, dsn), near, true)
}

func migrated(t *testing.T, dsn, name string, near, greenplum bool) *database {
	t.Helper()
	d := &database{dsn: dsn, name: name, greenplum: greenplum,
		nsFile: harness.WriteFile(t, "namespaces.yaml", namespacesYAML(near)), slot: "wc_" + testenv.RandomSuffix(t)}
	harness.Migrate(t, warmcacheBin, dsn, "--namespaces", d.nsFile)
	return d
}

// connect opens a session of the test's own on the database, closed when
// the test ends.
func (d *database) connect(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(d.dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = adminApp
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// row reads a key as the warehouse holds it: its write id and version, or
// present false.
func row(ctx context.Context, conn *pgx.Conn, key int) (value string, version int64, present bool, err error) {
	err = conn.QueryRow(ctx, "SELECT value->>'w', version FROM "+nsName+" WHERE key = $1", key).Scan(&value, &version)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, false, nil
	}
	return value, version, err == nil, err
}

// runConfig is what a run varies in the service.
type runConfig struct {
	capture bool // --freshness capture, else off (or auto on Greenplum, which polls)
	near    bool // --near-cache-bytes above 0, key tracking on by default
	// env holds more WARMCACHE_* variables.
	env map[string]string
}

func (c runConfig) String() string {
	onOff := map[bool]string{false: "off", true: "on"}
	return fmt.Sprintf("capture=%s,near=%s", onOff[c.capture], onOff[c.near])
}

// instance is one `warmcache serve` process.
type instance struct {
	name   string
	url    string
	client *http.Client
}

// startInstance runs `warmcache serve` (harness.Spawn) on the database
// and Redis, with the given Redis prefix, on free ports, and returns when
// it is ready. It is stopped when the test ends; its log is shown if the
// test failed.
func startInstance(t *testing.T, name string, d *database, redisAddr, prefix string, c runConfig) *instance {
	t.Helper()
	args := []string{"--namespaces", d.nsFile}
	switch {
	case d.greenplum:
		args = append(args, "--freshness", "auto")
	case c.capture:
		args = append(args, "--freshness", "capture", "--replication-slot", d.slot)
	default:
		args = append(args, "--freshness", "off")
	}
	if c.near {
		args = append(args, "--near-cache-bytes", "8388608")
	}
	vars := map[string]string{
		"WARMCACHE_POSTGRES_DSN": d.dsn,
		"WARMCACHE_PG_MAX_CONNS": "8",
		"WARMCACHE_REDIS_ADDRS":  redisAddr,
		"WARMCACHE_REDIS_PREFIX": prefix,
		"WARMCACHE_LOG_LEVEL":    "warn",
		"WARMCACHE_WARM_TIMEOUT": "5s",
		// A loaded 2-core machine under the race detector: a write's
		// update of Redis must not miss its deadline, which would leave
		// the previous version cached (a documented exception, not a
		// race).
		"WARMCACHE_HOT_TIMEOUT": "1s",
	}
	if d.greenplum {
		vars["WARMCACHE_PG_MAX_CONNS"] = "4"
	}
	for k, v := range c.env {
		vars[k] = v
	}
	// REST, gRPC and the notice of open access.
	sv := harness.Spawn(t, warmcacheBin, vars, 3, args...)
	in := &instance{
		name: name,
		url:  sv.HTTP,
		client: &http.Client{Timeout: 10 * time.Second,
			Transport: &http.Transport{MaxIdleConns: 128, MaxIdleConnsPerHost: 128}},
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s: warmcache serve %s\n%s log (end, without the audit of refused writes):\n%s",
				name, strings.Join(args, " "), name, logTail(sv.Log.Path(), 40))
		}
	})
	want := "off"
	switch {
	case d.greenplum:
		want = "poll"
	case c.capture:
		want = "capture"
	}
	// Change capture starts beside the listener; wait until it reports
	// its mode, so that the run covers it from the first write.
	testproc.Eventually(t, 30*time.Second, name+" in freshness mode "+want, func() bool { return in.mode() == want })
	return in
}

// logTail returns the last n lines of a service's log, without the audit
// lines of writes the service refused (412, 404), which a run has by the
// hundred.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var keep []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, `"audit":"write"`) || !strings.Contains(line, `"result":"error"`) {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep[max(0, len(keep)-n):], "\n")
}

// metrics returns the lines of the instance's /metrics.
func (in *instance) metrics() ([]string, error) {
	res, err := in.client.Get(in.url + "/metrics")
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	return strings.Split(string(b), "\n"), nil
}

// mode returns the freshness mode the instance reports in its metrics.
func (in *instance) mode() string {
	lines, _ := in.metrics()
	for _, line := range lines {
		if rest, ok := strings.CutPrefix(line, `warmcache_freshness_mode{mode="`); ok && strings.HasSuffix(line, "} 1") {
			return rest[:strings.IndexByte(rest, '"')]
		}
	}
	return ""
}

// answer is the outcome of one request.
type answer struct {
	status  int    // zero when no answer came
	value   string // the write id of a GET's 200 body
	version int64  // the ETag's version
	cache   string // X-Cache
	body    string // the body of an error answer
	err     error  // no answer came
	// malformed says what is wrong with an answer that is not one of the
	// API's.
	malformed error
}

// decided reports whether the answer tells a write's outcome: a write
// answered with a 5xx or not at all may or may not have taken effect.
func (a answer) decided() bool { return a.err == nil && a.status < 500 }

func (a answer) String() string {
	switch {
	case a.err != nil:
		return "error: " + a.err.Error()
	case a.malformed != nil:
		return a.malformed.Error()
	case a.status == http.StatusOK && a.value != "":
		return fmt.Sprintf("200 %s@%d %s", a.value, a.version, a.cache)
	case a.status == http.StatusOK:
		return fmt.Sprintf("200 @%d", a.version)
	case a.status >= 400 && a.status != http.StatusNotFound && a.status != http.StatusPreconditionFailed:
		return fmt.Sprintf("%d %s", a.status, strings.TrimSpace(a.body))
	case a.cache != "":
		return fmt.Sprintf("%d %s", a.status, a.cache)
	}
	return strconv.Itoa(a.status)
}

// counter returns the value of one series of the instance's /metrics,
// given as it is printed (name{labels}); zero when it is not there.
func (in *instance) counter(t *testing.T, series string) float64 {
	t.Helper()
	lines, err := in.metrics()
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	for _, line := range lines {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("metrics: %q: %v", line, err)
			}
			return v
		}
	}
	return 0
}

// keyURL returns the REST address of key.
func (in *instance) keyURL(key int) string {
	return in.url + "/v1/kv/" + nsName + "/" + strconv.Itoa(key)
}

// do sends one request for key: GET, DELETE, or PUT of the value
// {"w": value}; ifMatch, when not zero, makes the write conditional.
func (in *instance) do(ctx context.Context, method string, key int, value string, ifMatch int64) answer {
	var body io.Reader
	if method == http.MethodPut {
		b, _ := json.Marshal(map[string]string{"w": value})
		body = strings.NewReader(string(b))
	}
	req, err := http.NewRequestWithContext(ctx, method, in.keyURL(key), body)
	if err != nil {
		return answer{err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if ifMatch != 0 {
		req.Header.Set("If-Match", strconv.Quote(strconv.FormatInt(ifMatch, 10)))
	}
	res, err := in.client.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return answer{err: err}
	}
	a := answer{status: res.StatusCode, cache: res.Header.Get("X-Cache")}
	if tag := res.Header.Get("ETag"); tag != "" {
		if a.version, err = strconv.ParseInt(strings.Trim(strings.TrimPrefix(tag, "W/"), `"`), 10, 64); err != nil {
			a.malformed = fmt.Errorf("ETag %q: %w", tag, err)
		}
	}
	switch {
	case res.StatusCode == http.StatusOK && method == http.MethodGet:
		var v struct {
			W string `json:"w"`
		}
		if err := json.Unmarshal(b, &v); err != nil || v.W == "" {
			a.malformed = fmt.Errorf("GET %d: body %q is not a written value", key, b)
		}
		a.value = v.W
	case res.StatusCode >= 400:
		a.body = string(b)
	}
	return a
}

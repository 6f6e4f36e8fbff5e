package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmcache/warmcache/internal/testenv"
)

// redisCluster is a local Redis Cluster of three masters, each with one
// replica, run by a test from redis-server on loopback ports in
// 17000-17999 (cluster bus ports 10000 higher).
type redisCluster struct {
	addrs []string
	procs map[string]*exec.Cmd // by address
}

// startRedisCluster starts the cluster and waits until it serves every
// slot. The processes are killed and their directories removed when the
// test ends. The test is skipped when redis-server or redis-cli is missing.
func startRedisCluster(t *testing.T) *redisCluster {
	t.Helper()
	server, err := exec.LookPath("redis-server")
	if err != nil {
		testenv.Unavailable(t, "redis-server is not installed; the Redis Cluster tests need it (apt-get install redis-server, as .ci/run does)")
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		testenv.Unavailable(t, "redis-cli is not installed; the Redis Cluster tests need it to create the cluster (apt-get install redis-tools)")
	}
	base := freePortBlock(t, 6)
	c := &redisCluster{procs: map[string]*exec.Cmd{}}
	dir := t.TempDir()
	for i := range 6 {
		port := strconv.Itoa(base + i)
		addr := "127.0.0.1:" + port
		nodeDir := filepath.Join(dir, port)
		cmd := exec.Command(server,
			"--bind", "127.0.0.1", "--port", port,
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(nodeDir, "nodes.conf"),
			"--cluster-node-timeout", "1000", "--dir", nodeDir,
			"--save", "", "--appendonly", "no", "--daemonize", "no",
			// A replica that never synced will not take over; sync at once.
			"--repl-diskless-sync-delay", "0",
			"--logfile", filepath.Join(nodeDir, "redis.log"), "--loglevel", "warning")
		if err := mkdir(nodeDir); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start redis-server on %s: %v", addr, err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill() // it may have been killed by the test already
			_ = cmd.Wait()
		})
		c.addrs = append(c.addrs, addr)
		c.procs[addr] = cmd
	}
	for _, addr := range c.addrs {
		waitFor(t, 10*time.Second, "redis-server "+addr+" answers", func() bool {
			return redis.NewClient(&redis.Options{Addr: addr}).Ping(context.Background()).Err() == nil
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, addr := range c.addrs {
		waitFor(t, 20*time.Second, "cluster state ok on "+addr, func() bool { return c.stateOK(addr) })
	}
	for _, addr := range c.addrs {
		waitFor(t, 20*time.Second, "replica "+addr+" in sync", func() bool { return c.synced(addr) })
	}
	return c
}

// freePortBlock returns the first of n consecutive ports in 17000-17999
// that, with their cluster bus ports, nobody listens on.
func freePortBlock(t *testing.T, n int) int {
	t.Helper()
	for range 50 {
		base := 17000 + rand.IntN(1000-n)
		free := true
		var held []net.Listener
		for p := base; p < base+n && free; p++ {
			for _, port := range []int{p, p + 10000} {
				l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
				if err != nil {
					free = false
					break
				}
				held = append(held, l)
			}
		}
		for _, l := range held {
			_ = l.Close()
		}
		if free {
			return base
		}
	}
	t.Fatal("no free block of ports in 17000-17999")
	return 0
}

// stateOK reports whether the node at addr says the cluster serves every
// slot.
func (c *redisCluster) stateOK(addr string) bool {
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	info, err := rc.ClusterInfo(context.Background()).Result()
	return err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_slots_ok:16384")
}

// synced reports whether the node at addr is a master, or a replica whose
// link to its master is up: only a replica that has synced takes over when
// its master fails.
func (c *redisCluster) synced(addr string) bool {
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	info, err := rc.Info(context.Background(), "replication").Result()
	return err == nil && (strings.Contains(info, "role:master") || strings.Contains(info, "master_link_status:up"))
}

// masterOf returns the address of the master that serves key's slot, as
// the node at via sees it.
func (c *redisCluster) masterOf(t *testing.T, via, key string) string {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: via})
	defer rc.Close()
	ctx := context.Background()
	slot, err := rc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	//lint:ignore SA1019 the slots' map is what the test checks, on Redis 6 as on 7
	slots, err := rc.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slots {
		if int64(s.Start) <= slot && slot <= int64(s.End) {
			return s.Nodes[0].Addr
		}
	}
	t.Fatalf("no node serves slot %d", slot)
	return ""
}

// kill stops the node at addr at once, as a crash would.
func (c *redisCluster) kill(t *testing.T, addr string) {
	t.Helper()
	if err := c.procs[addr].Process.Kill(); err != nil {
		t.Fatalf("kill %s: %v", addr, err)
	}
	_ = c.procs[addr].Wait()
}

// keysOn returns the number of keys the node at addr holds.
func keysOn(t *testing.T, addr string) int64 {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	n, err := rc.DBSize(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitFor polls cond every 50ms until it holds, and fails the test after
// limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", limit, what)
		}
		<-tick.C
	}
}

// TestRedisCluster runs the gateway on a Redis Cluster of three masters and
// three replicas: _mget reads keys spread over the slots of all masters,
// and a bulk load survives a master killed while its body is being read:
// after the failover, every loaded key reads back at its new value, none
// stale from the hot tier.
func TestRedisCluster(t *testing.T) {
	cluster := startRedisCluster(t)
	dsn := testenv.NewDatabase(t)
	migrateAndSeed(t, dsn, 300)
	prefix := "wc:"
	base := startServer(t, map[string]string{
		"WARMCACHE_POSTGRES_DSN": dsn,
		"WARMCACHE_REDIS_ADDRS":  strings.Join(cluster.addrs, ","),
		"WARMCACHE_REDIS_PREFIX": prefix,
		"WARMCACHE_HOT_TIMEOUT":  "200ms",
	})
	kv := base + "/v1/kv/widgets/"

	keys := make([]string, 300)
	for i := range keys {
		keys[i] = strconv.Itoa(i + 1)
	}
	t.Run("mget across slots", func(t *testing.T) {
		body, _ := json.Marshal(map[string][]string{"keys": keys})
		for round, want := range []string{"miss", "hit"} {
			r := call(t, "POST", kv+"_mget", string(body))
			var res struct {
				Items   map[string]json.RawMessage `json:"items"`
				Missing []string                   `json:"missing"`
			}
			if err := json.Unmarshal([]byte(r.body), &res); err != nil || r.status != 200 || len(res.Items) != 300 || len(res.Missing) != 0 {
				t.Fatalf("_mget round %d (%s) = %d, %d items, %d missing (%v)", round, want, r.status, len(res.Items), len(res.Missing), err)
			}
		}
		masters := map[string]bool{}
		for _, k := range keys {
			masters[cluster.masterOf(t, cluster.addrs[0], prefix+"widgets:"+k)] = true
		}
		if len(masters) != 3 {
			t.Fatalf("the keys live on %d masters, want all 3", len(masters))
		}
		for m := range masters {
			if n := keysOn(t, m); n == 0 {
				t.Errorf("master %s holds no key after _mget filled the hot tier", m)
			}
		}
		if r := call(t, "GET", kv+"1", ""); r.header.Get("X-Cache") != "hit" {
			t.Fatalf("GET 1 after _mget = %q, want a hit", r.header.Get("X-Cache"))
		}
	})

	t.Run("a key of another type", func(t *testing.T) {
		// A key that some other client made a hash is not the cache's:
		// _mget reads it from the warehouse, and the keys beside it from
		// their masters, where a pipeline of GETs used to fail them all.
		odd := prefix + "widgets:7"
		rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.addrs})
		defer rc.Close()
		if err := rc.Del(context.Background(), odd).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rc.HSet(context.Background(), odd, "field", "value").Err(); err != nil {
			t.Fatal(err)
		}
		errorsBefore := metricSum(t, base, `warmcache_redis_errors_total{op="get_many"}`)
		body, _ := json.Marshal(map[string][]string{"keys": keys[:20]})
		r := call(t, "POST", kv+"_mget", string(body))
		var res struct {
			Items map[string]json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal([]byte(r.body), &res); err != nil || r.status != 200 || len(res.Items) != 20 || res.Items["7"] == nil {
			t.Fatalf("_mget of 20 keys with key 7 a hash = %d, %d items (%v): %s", r.status, len(res.Items), err, r.body)
		}
		if n := metricSum(t, base, `warmcache_redis_errors_total{op="get_many"}`) - errorsBefore; n != 0 {
			t.Errorf("_mget with a hash among its keys counted %v Redis read errors, want 0", n)
		}
		if err := rc.Del(context.Background(), odd).Err(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("master killed mid-load", func(t *testing.T) {
		victim := cluster.masterOf(t, cluster.addrs[0], prefix+"widgets:1")
		var survivor string
		for _, a := range cluster.addrs {
			if a != victim && cluster.masterOf(t, a, prefix+"widgets:1") == victim {
				survivor = a
				break
			}
		}
		pr, pw := io.Pipe()
		req, err := http.NewRequest("POST", kv+"_load", pr)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-ndjson")
		type answer struct {
			status int
			body   string
			err    error
		}
		done := make(chan answer, 1)
		go func() {
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- answer{err: err}
				return
			}
			defer res.Body.Close()
			b, err := io.ReadAll(res.Body)
			done <- answer{res.StatusCode, string(b), err}
		}()
		write := func(from, to int) {
			for i := from; i <= to; i++ {
				if _, err := fmt.Fprintf(pw, `{"key":%d,"value":{"widget":{"id":"%d","debug":"reloaded"}}}`+"\n", i, i); err != nil {
					t.Errorf("write line %d: %v", i, err)
					return
				}
			}
		}
		write(1, 150)
		cluster.kill(t, victim)
		write(151, 300)
		_ = pw.Close()

		a := <-done
		if a.err != nil || a.status != 200 {
			t.Fatalf("_load = %d %s (%v)", a.status, a.body, a.err)
		}
		var res struct {
			Inserted, Updated, Refreshed, NotRefreshed int64
		}
		if err := json.Unmarshal([]byte(a.body), &res); err != nil || res.Updated != 300 || res.Refreshed != 300 || res.NotRefreshed != 0 {
			t.Fatalf("_load = %s (%v), want 300 updated and refreshed", a.body, err)
		}
		if survivor != "" {
			waitFor(t, 20*time.Second, "a replica took over the slots of "+victim, func() bool {
				return cluster.masterOf(t, survivor, prefix+"widgets:1") != victim && cluster.stateOK(survivor)
			})
		}
		hits := 0
		for _, k := range keys {
			r := call(t, "GET", kv+k, "")
			if r.status != 200 || !strings.Contains(r.body, `"reloaded"`) {
				t.Fatalf("GET %s after the failover = %d %q %s, want the reloaded value", k, r.status, r.header.Get("X-Cache"), r.body)
			}
			if r.header.Get("X-Cache") == "hit" {
				hits++
			}
		}
		if hits != len(keys) {
			t.Errorf("%d of %d reloaded keys were hits in the hot tier, want all (the load refreshed them)", hits, len(keys))
		}
	})
}

func mkdir(dir string) error { return os.MkdirAll(dir, 0o755) }

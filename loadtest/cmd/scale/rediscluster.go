package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmcache/warmcache/internal/localstack"
	"github.com/warmcache/warmcache/loadtest/pin"
)

// redisCluster is a Redis Cluster of the fleet curve's own: masters (and
// replicas) from redis-server on free loopback ports, each cluster bus on
// a free port of its own, without persistence, on the servers' CPUs.
type redisCluster struct {
	addrs []string // every node's, the masters first as created
	procs []*localstack.Process
	dir   string
}

// startRedisCluster starts masters × (1 + replicas) redis-servers, joins
// them with `redis-cli --cluster create` and waits until every node says
// that the cluster serves every slot and every replica has synced. On an
// error, what it started is stopped.
func startRedisCluster(ctx context.Context, place pin.Placement, masters, replicas int) (*redisCluster, error) {
	server, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("the fleet curve needs redis-server: %w", err)
	}
	n := masters * (1 + replicas)
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "wcscale-cluster")
	if err != nil {
		return nil, err
	}
	c := &redisCluster{dir: dir}
	for i := range n {
		if err := c.startNode(place, server, ports[2*i], ports[2*i+1]); err != nil {
			c.stop()
			return nil, err
		}
	}
	if err := c.create(ctx, replicas); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// startNode starts one cluster-enabled redis-server on port, its bus on
// busPort, and waits until it answers.
func (c *redisCluster) startNode(place pin.Placement, server string, port, busPort int) error {
	nodeDir := filepath.Join(c.dir, strconv.Itoa(port))
	if err := os.MkdirAll(nodeDir, 0o755); err != nil {
		return err
	}
	name, args := place.Server(server, []string{"--bind", localstack.Host, "--port", strconv.Itoa(port),
		"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(busPort),
		"--cluster-config-file", filepath.Join(nodeDir, "nodes.conf"), "--cluster-node-timeout", "5000",
		"--dir", nodeDir, "--save", "", "--appendonly", "no", "--daemonize", "no",
		"--repl-diskless-sync-delay", "0", "--logfile", filepath.Join(nodeDir, "redis.log"), "--loglevel", "warning"})
	p, err := localstack.Start(exec.Command(name, args...))
	if err != nil {
		return fmt.Errorf("start redis-server on port %d: %w", port, err)
	}
	c.procs = append(c.procs, p)
	addr := net.JoinHostPort(localstack.Host, strconv.Itoa(port))
	c.addrs = append(c.addrs, addr)
	return waitUntil(10*time.Second, "redis-server "+addr+" answers", func() bool {
		return localstack.PingRedis(context.Background(), addr) == nil
	})
}

// create joins the nodes into a cluster, replicas per master, and waits
// until it serves every slot from every node's view, its replicas synced.
func (c *redisCluster) create(ctx context.Context, replicas int) error {
	args := append([]string{"--cluster", "create"}, c.addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	for _, addr := range c.addrs {
		rc := redis.NewClient(&redis.Options{Addr: addr})
		err := waitUntil(30*time.Second, "the cluster is ready on "+addr, func() bool {
			info, err := rc.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
				return false
			}
			repl, err := rc.Info(ctx, "replication").Result()
			return err == nil && (strings.Contains(repl, "role:master") || strings.Contains(repl, "master_link_status:up"))
		})
		rc.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// pids returns the process of every node.
func (c *redisCluster) pids() []int {
	out := make([]int, len(c.procs))
	for i, p := range c.procs {
		out[i] = p.Pid()
	}
	return out
}

// stop stops every node and removes their directories.
func (c *redisCluster) stop() {
	for _, p := range c.procs {
		_ = p.Stop(syscall.SIGTERM, 10*time.Second)
	}
	os.RemoveAll(c.dir)
}

// freePorts returns n distinct loopback ports that nothing listened on
// when it asked the kernel for them.
func freePorts(n int) ([]int, error) {
	var out []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(localstack.Host, "0"))
		if err != nil {
			return nil, err
		}
		held = append(held, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// waitUntil polls cond every 50ms until it holds, and fails after limit.
func waitUntil(limit time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out waiting until " + what)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

func p50(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
func p90(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)*9/10] }

func main() {
	bin, redisAddr := os.Args[1], os.Args[2]
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(server, "redis", "127.0.0.1:0", redisAddr)
	if err := p.Start(); err != nil {
		panic(err)
	}
	for _, s := range []string{"upstream", "downstream"} {
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(fmt.Sprintf(`{"name":"h%s","type":"latency","stream":"%s","attributes":{"latency":1}}`, s, s))); err != nil {
			panic(err)
		}
	}
	cmd := exec.Command(bin, "serve", "--namespaces", "deploy/local/namespaces.yaml")
	cmd.Env = append(os.Environ(), "WARMCACHE_REDIS_ADDRS="+p.Listen, "WARMCACHE_HTTP_ADDR=127.0.0.1:18081", "WARMCACHE_GRPC_ADDR=", "WARMCACHE_REDIS_PREFIX=wcprobe:", "WARMCACHE_NEAR_CACHE_BYTES=0", "WARMCACHE_LOG_LEVEL=warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	defer cmd.Process.Kill()
	url := "http://127.0.0.1:18081/v1/kv/widgets/"
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 200}}
	get := func(k int) error {
		r, err := c.Get(fmt.Sprint(url, k))
		if err != nil {
			return err
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		if r.Header.Get("X-Cache") != "hit" {
			return fmt.Errorf("X-Cache %q", r.Header.Get("X-Cache"))
		}
		return nil
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := c.Get(url + "1"); err == nil {
			break
		} else if time.Now().After(deadline) {
			panic(err)
		}
	}
	for k := 1; k <= 1000; k++ {
		get(k)
	}
	rc := redis.NewClient(&redis.Options{Addr: p.Listen})
	ctx := context.Background()
	seq := func(name string, f func(k int) error) {
		var d []time.Duration
		for i := 0; i < 300; i++ {
			t := time.Now()
			if err := f(i%1000 + 1); err != nil {
				fmt.Println(name, err)
			}
			d = append(d, time.Since(t))
		}
		fmt.Printf("%-22s sequential p50 %v p90 %v\n", name, p50(d), p90(d))
	}
	rate := func(name string, f func(k int) error, per int) {
		var mu sync.Mutex
		var d []time.Duration
		var wg sync.WaitGroup
		tick := time.NewTicker(time.Second / time.Duration(per))
		for i := 0; i < per*3; i++ {
			<-tick.C
			t := time.Now()
			wg.Go(func() {
				if err := f(i%1000 + 1); err != nil {
					fmt.Println(name, err)
				}
				mu.Lock()
				d = append(d, time.Since(t))
				mu.Unlock()
			})
		}
		wg.Wait()
		tick.Stop()
		fmt.Printf("%-22s at %d/s      p50 %v p90 %v\n", name, per, p50(d), p90(d))
	}
	rget := func(k int) error { return rc.Get(ctx, "nokey").Err() }
	for round := 0; round < 2; round++ {
		seq("redis GET via hop", func(k int) error { rget(k); return nil })
		seq("warmcache REST hit", get)
		rate("redis GET via hop", func(k int) error { rget(k); return nil }, 1000)
		rate("warmcache REST hit", get, 1000)
	}
}

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/warmcache/warmcache/loadtest/bench"
)

type vegetaTarget = vegeta.Target

// attackSpec is one attack: a targeter, a rate (zero: saturation with
// Workers unpaced workers) and a duration.
type attackSpec struct {
	scenario       string
	client         *http.Client // shared by the attacks of a run, so that a warm-up's connections stay open
	targeter       vegeta.Targeter
	rate           float64
	workers        int
	duration       time.Duration
	keysPerRequest int
	// paths, when set, lets wrk run the attack at saturation instead of
	// vegeta: GETs of these paths on base, with header.
	paths  wrkPaths
	base   string
	header map[string]string
	// samples, when set, receives every request's latency.
	samples *[]time.Duration
}

// attack runs spec and summarises its results. Latencies are exact
// nearest-rank percentiles over every request; throughput counts 2xx
// answers per second, as vegeta does.
func attack(ctx context.Context, spec attackSpec) bench.Run {
	maxWorkers := uint64(spec.workers)
	pacer := vegeta.Pacer(vegeta.ConstantPacer{}) // zero: as fast as the workers go
	if spec.rate > 0 {
		maxWorkers = uint64(4 * spec.workers)
		pacer = vegeta.ConstantPacer{Freq: max(1, int(spec.rate)), Per: time.Second}
	}
	atk := vegeta.NewAttacker(
		vegeta.Workers(uint64(spec.workers)),
		vegeta.MaxWorkers(maxWorkers),
		vegeta.Client(spec.client),
	)
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()

	var m vegeta.Metrics
	lat := make([]time.Duration, 0, 1<<16)
	sources := map[string]uint64{}
	for res := range atk.Attack(spec.targeter, pacer, spec.duration, spec.scenario) {
		m.Add(res)
		lat = append(lat, res.Latency)
		if res.Code >= 200 && res.Code < 300 {
			sources[res.Headers.Get("X-Cache")]++
		}
	}
	m.Close()
	if spec.samples != nil {
		*spec.samples = append(*spec.samples, lat...)
	}
	errs := m.Errors
	if len(errs) > 5 {
		errs = errs[:5]
	}
	return bench.Run{
		Scenario:       spec.scenario,
		Rate:           spec.rate,
		Workers:        spec.workers,
		Duration:       spec.duration,
		Requests:       m.Requests,
		Throughput:     m.Throughput,
		Success:        m.Success,
		KeysPerRequest: max(spec.keysPerRequest, 1),
		Latency:        bench.Percentiles(lat),
		Sources:        sources,
		Errors:         errs,
	}
}

// newAttackClient returns the HTTP client of a run's attacks: keep-alive
// connections, enough idle ones per host for every worker, no redirects.
func newAttackClient(maxConns int) *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        4 * maxConns,
			MaxIdleConnsPerHost: maxConns,
			IdleConnTimeout:     time.Minute,
			DisableCompression:  true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// ring is a targeter over a fixed list of targets, taken in turn. It is
// safe for concurrent use: vegeta's workers call it at once.
func ring(targets []vegeta.Target) vegeta.Targeter {
	var next atomic.Uint64
	return func(t *vegeta.Target) error {
		*t = targets[(next.Add(1)-1)%uint64(len(targets))]
		return nil
	}
}

// targetSet builds request targets for one base URL and namespace.
type targetSet struct {
	base   string // http://127.0.0.1:port
	header http.Header
}

func newTargetSet(base, token string) targetSet {
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return targetSet{base: base, header: h}
}

func (ts targetSet) keyURL(key int64) string {
	return ts.base + "/v1/kv/widgets/" + strconv.FormatInt(key, 10)
}

// fetch sends one GET of key with client and returns the answer's status
// and header, its body read and dropped.
func (ts targetSet) fetch(ctx context.Context, client *http.Client, key int64) (int, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ts.keyURL(key), nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header = ts.header.Clone()
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header, nil
}

// headerMap returns the set's request header as wrk takes it.
func (ts targetSet) headerMap() map[string]string {
	m := map[string]string{}
	for k := range ts.header {
		m[k] = ts.header.Get(k)
	}
	return m
}

func (ts targetSet) get(key int64) vegeta.Target {
	return vegeta.Target{Method: http.MethodGet, URL: ts.keyURL(key), Header: ts.header}
}

// floorGets returns GETs of keys on the middleware floor's route
// (floorMWRoute).
func (ts targetSet) floorGets(keys []int64) []vegeta.Target {
	out := make([]vegeta.Target, len(keys))
	for i, k := range keys {
		out[i] = vegeta.Target{Method: http.MethodGet, URL: ts.base + "/v1/kv/widgets/_floor/" + strconv.FormatInt(k, 10), Header: ts.header}
	}
	return out
}

func (ts targetSet) gets(keys []int64) []vegeta.Target {
	out := make([]vegeta.Target, len(keys))
	for i, k := range keys {
		out[i] = ts.get(k)
	}
	return out
}

// mixed returns GETs of keys with every tenth request a PUT of the same
// key's document (sample with its id replaced).
func (ts targetSet) mixed(keys []int64, sample string) []vegeta.Target {
	h := ts.header.Clone()
	h.Set("Content-Type", "application/json")
	out := make([]vegeta.Target, len(keys))
	for i, k := range keys {
		if i%10 != 9 {
			out[i] = ts.get(k)
			continue
		}
		body := strings.Replace(sample, `"id": "1"`, `"id": "`+strconv.FormatInt(k, 10)+`"`, 1)
		out[i] = vegeta.Target{Method: http.MethodPut, URL: ts.keyURL(k), Header: h, Body: []byte(body)}
	}
	return out
}

// mget returns _mget requests of batch consecutive keys each.
func (ts targetSet) mget(keys []int64, batch int) []vegeta.Target {
	h := ts.header.Clone()
	h.Set("Content-Type", "application/json")
	url := ts.base + "/v1/kv/widgets/_mget"
	var out []vegeta.Target
	for i := 0; i+batch <= len(keys); i += batch {
		out = append(out, vegeta.Target{Method: http.MethodPost, URL: url, Header: h, Body: mgetBody(keys[i : i+batch])})
	}
	return out
}

func mgetBody(keys []int64) []byte {
	var b strings.Builder
	b.WriteString(`{"keys":[`)
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(k, 10))
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// ringPaths returns the wrk paths of a ring of targets, and their base
// URL, when every target is a GET without a body on one host; nil
// otherwise.
func ringPaths(targets []vegeta.Target) (wrkPaths, string, map[string]string) {
	if len(targets) == 0 {
		return nil, "", nil
	}
	var base string
	paths := make([]string, len(targets))
	for i, t := range targets {
		u, err := url.Parse(t.URL)
		if err != nil || t.Method != http.MethodGet || len(t.Body) > 0 {
			return nil, "", nil
		}
		if b := u.Scheme + "://" + u.Host; i == 0 {
			base = b
		} else if b != base {
			return nil, "", nil
		}
		paths[i] = u.RequestURI()
	}
	header := map[string]string{}
	for k := range targets[0].Header {
		header[k] = targets[0].Header.Get(k)
	}
	return func(int) []string { return paths }, base, header
}

// coldPaths returns the wrk paths of an attack that asks for each key of a
// permutation at most once: the next n keys, taken now.
func (ts targetSet) coldPaths(perm bench.Permutation, next *atomic.Uint64) wrkPaths {
	return func(n int) []string {
		var paths []string
		for range n {
			i := next.Add(1) - 1
			if i >= perm.Len() {
				break
			}
			paths = append(paths, "/v1/kv/widgets/"+strconv.FormatInt(int64(perm.At(i))+1, 10))
		}
		return paths
	}
}

// coldKeys is a targeter of GETs that asks for each key of a permutation
// of [1, rows] at most once, continuing where the previous attack stopped.
func (ts targetSet) coldKeys(perm bench.Permutation, next *atomic.Uint64) vegeta.Targeter {
	return func(t *vegeta.Target) error {
		i := next.Add(1) - 1
		if i >= perm.Len() {
			return fmt.Errorf("all %d keys were asked for", perm.Len())
		}
		*t = ts.get(int64(perm.At(i)) + 1)
		return nil
	}
}

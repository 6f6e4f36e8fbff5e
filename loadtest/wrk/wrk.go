// Package wrk drives wrk, a load generator in C that costs a fraction of
// an in-process Go client's CPU per request, so that where the load
// generator has a core of its own it is the servers, not the generator,
// that bound a saturation attack. Its Lua script takes the request paths
// in turn and counts the answers by X-Cache (or by status when not 2xx).
// The harness in loadtest/cmd/loadtest and loadtest/cmd/gpbench use it.
package wrk

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/warmcache/warmcache/loadtest/bench"
)

// script is the Lua script of an attack: it takes the paths in turn,
// counts the answers by X-Cache (or by status when not 2xx) and prints
// the summary as "wrk-<name> <value>" lines.
const script = `
counts = {}
local i = 0
request = function()
  i = i %% #paths + 1
  return wrk.format("GET", paths[i], headers)
end
response = function(status, hdrs, body)
  local k
  if status >= 200 and status < 300 then k = hdrs["X-Cache"] or "" else k = "status " .. status end
  counts[k] = (counts[k] or 0) + 1
end
local threads = {}
setup = function(thread) table.insert(threads, thread) end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("wrk-requests %%d\n", summary.requests))
  io.write(string.format("wrk-duration-us %%d\n", summary.duration))
  io.write(string.format("wrk-errors %%d\n", e.connect + e.read + e.write + e.status + e.timeout))
  for _, p in ipairs({50, 90, 99}) do io.write(string.format("wrk-p%%d-us %%d\n", p, latency:percentile(p))) end
  io.write(string.format("wrk-max-us %%d\n", latency.max))
  for _, t in ipairs(threads) do
    for k, v in pairs(t:get("counts")) do io.write(string.format("wrk-source %%s\t%%d\n", k, v)) end
  end
end
paths = {%s}
headers = {%s}
`

// writeWrkScript writes the script of an attack over paths with header
// (name, value pairs) into dir.
func writeScript(dir, scenario string, paths []string, header map[string]string) (string, error) {
	var p, h strings.Builder
	for i, path := range paths {
		if i > 0 {
			p.WriteByte(',')
		}
		p.WriteString(strconv.Quote(path))
	}
	for k, v := range header {
		fmt.Fprintf(&h, "[%s] = %s,", strconv.Quote(k), strconv.Quote(v))
	}
	file := filepath.Join(dir, scenario+".wrk.lua")
	return file, os.WriteFile(file, []byte(fmt.Sprintf(script, p.String(), h.String())), 0o644)
}

// Spec is one wrk attack at saturation.
type Spec struct {
	Scenario string
	Base     string            // http://host:port
	Paths    []string          // request paths, taken in turn
	Header   map[string]string // request header
	Conns    int               // connections
	Duration time.Duration     // rounded to whole seconds, at least one
	Dir      string            // where the script is written
	// Prefix runs wrk under another command, such as taskset -c 1.
	Prefix []string
}

// Run runs s with wrk (one thread) and returns the run, with wrk's own CPU
// time as the load generator's (bench.ProcLoad).
func Run(ctx context.Context, s Spec) (bench.Run, error) {
	if len(s.Paths) == 0 {
		return bench.Run{}, fmt.Errorf("wrk: %s: no paths", s.Scenario)
	}
	file, err := writeScript(s.Dir, s.Scenario, s.Paths, s.Header)
	if err != nil {
		return bench.Run{}, err
	}
	u, err := url.Parse(s.Base)
	if err != nil {
		return bench.Run{}, err
	}
	argv := append(append([]string{}, s.Prefix...), "wrk", "-t", "1", "-c", strconv.Itoa(s.Conns), "-d", fmt.Sprintf("%ds", Seconds(s.Duration)),
		"--timeout", "10s", "-s", file, u.Scheme+"://"+u.Host)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return bench.Run{}, fmt.Errorf("wrk: %w\n%s", err, out.String())
	}
	run, err := Parse(out.String())
	if err != nil {
		return bench.Run{}, fmt.Errorf("%w\n%s", err, out.String())
	}
	run.Scenario, run.Workers, run.Duration, run.KeysPerRequest = s.Scenario, s.Conns, time.Duration(Seconds(s.Duration))*time.Second, 1
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	run.CPU = &bench.CPU{Used: map[string]time.Duration{bench.ProcLoad: cpu}}
	return run, nil
}

// Parse reads the summary lines of the script.
func Parse(out string) (bench.Run, error) {
	run := bench.Run{Sources: map[string]uint64{}}
	var duration time.Duration
	var errs uint64
	seen := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "wrk-") {
			continue
		}
		name, value, _ := strings.Cut(line, " ")
		if name == "wrk-source" {
			src, n, _ := strings.Cut(value, "\t")
			c, err := strconv.ParseUint(n, 10, 64)
			if err != nil {
				return bench.Run{}, fmt.Errorf("wrk: %q: %w", line, err)
			}
			run.Sources[src] += c
			continue
		}
		v, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return bench.Run{}, fmt.Errorf("wrk: %q: %w", line, err)
		}
		seen++
		us := time.Duration(v) * time.Microsecond
		switch name {
		case "wrk-requests":
			run.Requests = uint64(v)
		case "wrk-duration-us":
			duration = us
		case "wrk-errors":
			errs = uint64(v)
		case "wrk-p50-us":
			run.Latency.P50 = us
		case "wrk-p90-us":
			run.Latency.P90 = us
		case "wrk-p99-us":
			run.Latency.P99 = us
		case "wrk-max-us":
			run.Latency.Max = us
		}
	}
	if seen < 7 || duration <= 0 {
		return bench.Run{}, fmt.Errorf("wrk: no summary in its output")
	}
	ok := run.Requests - min(errs, run.Requests)
	run.Latency.Count = int(run.Requests)
	run.Throughput = float64(ok) / duration.Seconds()
	if run.Requests > 0 {
		run.Success = float64(ok) / float64(run.Requests)
	}
	if errs > 0 {
		run.Errors = []string{fmt.Sprintf("%d requests failed (connect, read, write, timeout or a status above 399)", errs)}
	}
	return run, nil
}

// Seconds is d in whole seconds, at least one: wrk takes no finer
// duration.
func Seconds(d time.Duration) int64 {
	return max(1, int64(d.Round(time.Second)/time.Second))
}

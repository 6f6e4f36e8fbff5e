package main

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

// wrk drives the saturation attacks of plain GETs: a load generator in C
// that costs a fraction of vegeta's CPU per request, so that on a machine
// where the load generator has a core of its own it is the servers, not
// the generator, that bound the throughput. Fixed-rate attacks, bodies
// (PUT, _mget) and gRPC stay with the harness's own clients.
//
// wrkPaths gives the request paths of an attack: the whole ring for a
// ring of GETs, or the next n cold keys for an attack that asks for each
// key once (n bounds how many requests the attack can send before it
// starts over, which would turn misses into hits: the X-Cache counts
// would show it).
type wrkPaths func(n int) []string

// wrkScript is the Lua script of an attack: it takes the paths in turn,
// counts the answers by X-Cache (or by status when not 2xx) and prints
// the summary as "wrk-<name> <value>" lines.
const wrkScript = `
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
func writeWrkScript(dir, scenario string, paths []string, header map[string]string) (string, error) {
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
	return file, os.WriteFile(file, []byte(fmt.Sprintf(wrkScript, p.String(), h.String())), 0o644)
}

// wrkAttack runs wrk against base for d with conns connections on the
// load generators' CPUs, and returns the run with wrk's own CPU time as
// the load generator's.
func (h *harness) wrkAttack(ctx context.Context, scenario, base string, paths []string, header map[string]string, conns int, d time.Duration) (bench.Run, error) {
	script, err := writeWrkScript(h.opts.ArtifactDir, scenario, paths, header)
	if err != nil {
		return bench.Run{}, err
	}
	u, err := url.Parse(base)
	if err != nil {
		return bench.Run{}, err
	}
	bin, args := h.pin.loader("wrk", []string{"-t", "1", "-c", strconv.Itoa(conns), "-d", fmt.Sprintf("%ds", wrkSeconds(d)),
		"--timeout", "10s", "-s", script, u.Scheme + "://" + u.Host})
	cmd := exec.CommandContext(ctx, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return bench.Run{}, fmt.Errorf("wrk: %w\n%s", err, out.String())
	}
	run, err := parseWrk(out.String())
	if err != nil {
		return bench.Run{}, fmt.Errorf("%w\n%s", err, out.String())
	}
	run.Scenario, run.Workers, run.Duration, run.KeysPerRequest = scenario, conns, time.Duration(wrkSeconds(d))*time.Second, 1
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	run.CPU = &bench.CPU{Used: map[string]time.Duration{bench.ProcLoad: cpu}}
	return run, nil
}

// parseWrk reads the summary lines of wrkScript.
func parseWrk(out string) (bench.Run, error) {
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

// wrkSeconds is d in whole seconds, at least one: wrk takes no finer
// duration.
func wrkSeconds(d time.Duration) int64 {
	return max(1, int64(d.Round(time.Second)/time.Second))
}

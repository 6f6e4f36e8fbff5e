#!/usr/bin/env python3
"""parts.py PROFILE REQUESTS: a CPU profile of a PUT load (put-cpu.sh's
PROFILE) split into the parts of a PUT, in µs per request: each sample goes
to the first part, in the order below, whose frame is on its stack. Reads
`go tool pprof -traces`."""
import collections
import re
import subprocess
import sys

# (part, frames that mark it), first match wins.
PARTS = [
    ("the write lane: the fold's statement", ["pgstore.(*Store).WriteEach", "warmcache.(*Service).warmWrite"]),
    ("the write lane: the fold's Redis update", ["warmcache.(*Service).updated"]),
    ("the write lane: the rest", ["warmcache.(*Service).runWrites"]),
    ("change capture (the writes' echoes)", ["capture.(*capture).run"]),
    ("HTTP: the handler (body, value check, plan)", ["httpapi.(*api).put"]),
    ("HTTP: writing the answer", ["net/http.(*response).finishRequest"]),
    ("HTTP: reading the request", ["net/http.(*conn).readRequest", "net/http.(*connReader).backgroundRead"]),
    ("HTTP: the rest (middleware, connection)", ["net/http.(*conn).serve"]),
    ("garbage collection", ["runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.gcDrain"]),
    ("the scheduler waiting in epoll (idle between requests)", ["runtime.netpoll"]),
    ("the scheduler, the rest", ["runtime.schedule", "runtime.findRunnable", "runtime.mcall"]),
]


def main():
    path, requests = sys.argv[1], float(sys.argv[2])
    out = subprocess.run(["go", "tool", "pprof", "-traces", path], capture_output=True, text=True, check=True).stdout
    spent = collections.Counter()
    for block in out.split("-----------+-------------------------------------------------------"):
        lines = [l.strip() for l in block.strip().splitlines() if l.strip()]
        m = lines and re.match(r"([\d.]+)(ms|s)\s+(.*)", lines[0])
        if not m:
            continue
        ms = float(m.group(1)) * (1 if m.group(2) == "ms" else 1000)
        stack = " ".join([m.group(3)] + lines[1:])
        part = next((name for name, frames in PARTS if any(f in stack for f in frames)), "other")
        spent[part] += ms
    total = sum(spent.values())
    print("| part | µs per PUT | share |")
    print("|---|---:|---:|")
    for name, _ in PARTS + [("other", [])]:
        if spent[name]:
            print(f"| {name} | {spent[name] / requests * 1000:.1f} | {spent[name] / total * 100:.1f}% |")
    print(f"| all sampled | {total / requests * 1000:.1f} | 100% |")


if __name__ == "__main__":
    main()

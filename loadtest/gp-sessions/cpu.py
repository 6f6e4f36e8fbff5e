#!/usr/bin/env python3
"""cpu.py DATADIR CMD...: runs CMD and prints the CPU milliseconds it took
the Greenplum cluster under DATADIR, as "coordinator MS", "segments MS" and
"wall SECONDS" lines: every process of each postmaster whose -D lies under
DATADIR, the postmasters' reaped children included."""
import os
import subprocess
import sys
import time

root = sys.argv[1].rstrip("/") + "/"
tick = os.sysconf("SC_CLK_TCK")


def snapshot():
    role, parent, used = {}, {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = open(f"/proc/{d}/stat").read()
            cmd = open(f"/proc/{d}/cmdline").read().split("\0")
        except OSError:
            continue
        f = stat[stat.rfind(")") + 2 :].split()
        pid = int(d)
        parent[pid], used[pid] = int(f[1]), int(f[11]) + int(f[12])
        if cmd[0].endswith("/postgres") and "-D" in cmd and cmd[cmd.index("-D") + 1].startswith(root):
            role[pid] = "coordinator" if "gp_role=dispatch" in " ".join(cmd) else "segments"
            used[pid] += int(f[13]) + int(f[14])
    out = {"coordinator": 0, "segments": 0}
    for pid, ticks in used.items():
        r = role.get(pid) or role.get(parent[pid])
        if r:
            out[r] += ticks
    return out


before, began = snapshot(), time.time()
subprocess.run(sys.argv[2:], check=True)
after, took = snapshot(), time.time() - began
for r in ("coordinator", "segments"):
    print(r, 1000 * (after[r] - before[r]) / tick)
print("wall", took)

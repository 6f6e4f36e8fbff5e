#!/bin/bash
# put-cpu.sh [ROUNDS] BIN...: the service's CPU per PUT against its CPU per
# hit, at saturation and at the PUTs' own rate (docs/performance.md, "A PUT
# against a hit at its rate"). Each round serves each binary in turn, on
# the database that make bench fills (warmcache_bench, after a run of its
# hot and write scenarios, whose namespaces file is in loadtest/out), with
# change capture in one slot that each binary takes up where the one
# before left it (a slot per binary would hold the other binaries' writes
# for it to apply when it starts again), through the local stack's PgBouncer
# and Redis, and measures with wrk, 16 connections, 15 s each after a 5 s
# warm-up:
#   put       PUTs of random keys (put-cpu/put.lua)
#   hit       GETs of 10,000 keys, cached by a warm-up, at saturation
#   hit@rate  the same GETs paced to about the PUTs' rate (DELAY_MS per
#             request and connection: 7 gives about 2,000/s here)
# and prints the CPU of the service and of Redis per request, from /proc.
# With HITS_ONLY=1 it leaves the PUTs out and measures the hits alone.
# With PROFILE=DIR it also takes a 15 s CPU profile of each binary's PUTs,
# DIR/<binary>-put.pprof. The service, PostgreSQL, PgBouncer and Redis are
# pinned to CPU 0 and wrk to CPU 1.
#
#   loadtest/put-cpu.sh 3 bin/warmcache.before bin/warmcache
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
shift || true
(($# > 0)) || { echo "usage: loadtest/put-cpu.sh ROUNDS BIN..." >&2; exit 2; }
eval "$(bin/localstack env)"
db=${DATABASE:-warmcache_bench}
ns=${NAMESPACES:-loadtest/out/namespaces.yaml}
[[ -f $ns ]] || { echo "put-cpu.sh: no $ns: run make bench's hot and write scenarios first" >&2; exit 1; }
direct="postgres://postgres@$WARMCACHE_STACK_PG_ADDR/$db?sslmode=disable"
export ROWS=$(psql -X "$direct" -Atc "SELECT max(key) FROM widgets")
addr=127.0.0.1:18380
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
redis=$(pgrep -f "redis-server $WARMCACHE_TEST_REDIS_ADDR" | head -n1)
datadir=$(psql -X "$direct" -Atc "SHOW data_directory")
. loadtest/pin/pin.sh
pin() {
	local pm
	pm=$(head -n1 "$datadir/postmaster.pid")
	pin_pids "$1" "$pm" $(pgrep -P "$pm") $(pgrep -x pgbouncer) "$redis"
}
pin 1
svc=
stop() { [[ -z $svc ]] || { kill "$svc" 2>/dev/null; wait "$svc" 2>/dev/null || true; svc=; }; }
trap 'stop; pin "$all_cpus"' EXIT
# measure NAME SCRIPT [ENV]: one wrk attack of 15 s; prints its rate and the
# service's and Redis's CPU per request.
measure() {
	local s0 r0 s1 r1 n out
	s0=$(ticks "$svc"); r0=$(ticks "$redis")
	out=$(env ${3:-} taskset -c 1 wrk -t2 -c16 -d15s -s "loadtest/put-cpu/$2" "http://$addr")
	s1=$(ticks "$svc"); r1=$(ticks "$redis")
	n=$(awk '/requests in/ {print $1}' <<<"$out")
	printf '  %-9s %8.0f/s  service %4d µs  redis %3d µs\n' "$1" "$(awk '/Requests\/sec/ {print $2}' <<<"$out")" \
		$(( (s1 - s0) * 1000000 / $(getconf CLK_TCK) / n )) $(( (r1 - r0) * 1000000 / $(getconf CLK_TCK) / n ))
}
for r in $(seq "$rounds"); do
	for bin in "$@"; do
		name=$(basename "$bin")
		env -i PATH="$PATH" HOME="$HOME" WARMCACHE_HTTP_ADDR=$addr WARMCACHE_GRPC_ADDR= WARMCACHE_LOG_LEVEL=warn \
			WARMCACHE_POSTGRES_DSN="postgres://postgres@$WARMCACHE_STACK_PGBOUNCER_ADDR/$db?sslmode=disable" WARMCACHE_PG_POOLER=pgbouncer \
			WARMCACHE_REDIS_ADDRS="$WARMCACHE_TEST_REDIS_ADDR" WARMCACHE_REDIS_PREFIX=wcputcpu: WARMCACHE_NAMESPACES_FILE="$ns" \
			WARMCACHE_NEAR_CACHE_BYTES=0 WARMCACHE_PPROF_ADDR=127.0.0.1:18381 \
			WARMCACHE_REPLICATION_DSN="$direct" WARMCACHE_REPLICATION_SLOT=wcputcpu \
			taskset -c 0 "$bin" serve >"/tmp/put-cpu-$name.log" 2>&1 &
		svc=$!
		for _ in $(seq 100); do curl -fs "http://$addr/readyz" >/dev/null && break; sleep 0.1; done
		echo "round $r: $name"
		if [[ -z ${HITS_ONLY:-} ]]; then
			taskset -c 1 wrk -t2 -c16 -d5s -s loadtest/put-cpu/put.lua "http://$addr" >/dev/null
			prof=
			if [[ -n ${PROFILE:-} ]]; then
				mkdir -p "$PROFILE"
				curl -fs -o "$PROFILE/$name-put.pprof" 'http://127.0.0.1:18381/debug/pprof/profile?seconds=15' &
				prof=$!
			fi
			measure put put.lua
			[[ -z $prof ]] || wait "$prof"
		fi
		taskset -c 1 wrk -t2 -c32 -d5s -s loadtest/put-cpu/get.lua "http://$addr" >/dev/null
		measure hit get.lua
		measure hit@rate get.lua "DELAY_MS=${DELAY_MS:-7}"
		stop
		sleep 1
	done
done

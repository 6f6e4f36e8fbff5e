#!/bin/bash
# sweep-idle.sh NAME BINARY DSN PORT: the idle cost of the expired-row sweeper
# (docs/warehouse.md#the-sweeper-at-rest). It makes the database NAME's own on
# DSN's server, applies the namespaces of make run (deploy/local/namespaces.yaml),
# serves them with BINARY on 127.0.0.1:PORT (gRPC on PORT+1) with nothing to
# expire, and prints the sweeper's batches (warmcache_sweep_duration_seconds_count)
# and, on PostgreSQL, the index scans of the widgets tables, over the 2 minutes
# after a 5 s start. It drops the database at the end. Redis: 127.0.0.1:6379.
#
#   go build -o /tmp/warmcache ./cmd/warmcache
#   loadtest/sweep-idle.sh pg /tmp/warmcache 'postgres://postgres@127.0.0.1:55432/postgres?sslmode=disable' 18310
#   loadtest/sweep-idle.sh gp /tmp/warmcache 'postgres://gpadmin@127.0.0.1:7000/postgres?sslmode=disable' 18330
set -euo pipefail
name=$1 bin=$2 base=$3 port=$4
ns="$(cd "$(dirname "$0")/.." && pwd)/deploy/local/namespaces.yaml"
db="sweep_idle_$name"
psql "$base" -qc "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
dsn="${base%/*}/$db?sslmode=disable"
WARMCACHE_POSTGRES_DSN="$dsn" "$bin" migrate up --namespaces "$ns" >/dev/null 2>&1
WARMCACHE_POSTGRES_DSN="$dsn" WARMCACHE_REDIS_ADDRS=127.0.0.1:6379 WARMCACHE_REDIS_PREFIX="sweep-idle-$name:" \
	WARMCACHE_FRESHNESS=off WARMCACHE_HTTP_ADDR="127.0.0.1:$port" WARMCACHE_GRPC_ADDR="127.0.0.1:$((port + 1))" \
	WARMCACHE_LOG_LEVEL=error "$bin" serve --namespaces "$ns" >/dev/null 2>&1 &
pid=$!
trap 'kill $pid; wait $pid 2>/dev/null; psql "$base" -qc "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true' EXIT
sleep 5
batches() { curl -s "127.0.0.1:$port/metrics" | awk '/^warmcache_sweep_duration_seconds_count/ {s += $2} END {print s + 0}'; }
scans() { psql "$dsn" -Atc "SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_tables WHERE relname LIKE 'widgets%'"; }
b0=$(batches) s0=$(scans)
for t in 60 120; do
	sleep 60
	echo "$name t=${t}s sweeps=$(($(batches) - b0)) index_scans=$(($(scans) - s0))"
done

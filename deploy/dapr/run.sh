#!/usr/bin/env bash
# Runs warmcache as a Dapr pluggable state store on this machine, on the
# local stack (PostgreSQL, PgBouncer, Redis; bin/localstack), and, where the
# daprd kit is beside the project (shared/dapr/daprd.sh in a directory
# above it), a daprd that loads it beside Dapr's own state.postgresql and
# state.redis (builtin/), so that one command shows the whole thing:
#
#   deploy/dapr/run.sh                       # or: make run-dapr
#   curl -X POST -d '[{"key":"order-1","value":{"qty":1}}]' 127.0.0.1:3500/v1.0/state/statestore
#
# Without the kit it serves warmcache alone, for a daprd that you run
# yourself:
#
#   dapr run --app-id orders --resources-path deploy/dapr/components -- <your app>
#
# warmcache must be serving before daprd starts: daprd looks for component
# sockets once, at start. DAPR_COMPONENTS_SOCKETS_FOLDER, when set, moves
# the socket folder for both. DAPR_HTTP_PORT and DAPR_GRPC_PORT (3500 and
# 50001) move daprd's ports. Arguments are passed to warmcache serve.
set -euo pipefail
cd "$(dirname "$0")/../.."

make --no-print-directory build localstack
bin/localstack up
eval "$(bin/localstack run-env)"
namespaces=deploy/dapr/namespaces.yaml
# Migrations (DDL) go straight to PostgreSQL; the server goes through PgBouncer.
WARMCACHE_POSTGRES_DSN="$WARMCACHE_STACK_DIRECT_DSN" bin/warmcache migrate up --namespaces "$namespaces"

kit=""
for dir in .. ../.. ../../..; do
	if [ -x "$dir/shared/dapr/daprd.sh" ]; then
		kit="$dir/shared/dapr/daprd.sh"
		break
	fi
done
if [ -z "$kit" ]; then
	echo "run.sh: no daprd kit (shared/dapr/daprd.sh) above the project: serving warmcache alone" >&2
	exec bin/warmcache serve --namespaces "$namespaces" --dapr-components statestore "$@"
fi

daprd="$("$kit")"
export DAPR_COMPONENTS_SOCKETS_FOLDER="${DAPR_COMPONENTS_SOCKETS_FOLDER:-/tmp/dapr-components-sockets}"
socket="$DAPR_COMPONENTS_SOCKETS_FOLDER/warmcache.sock"
bin/warmcache serve --namespaces "$namespaces" --dapr-components statestore "$@" &
warmcache=$!
trap 'kill "$warmcache" 2>/dev/null; wait "$warmcache" 2>/dev/null' EXIT
for _ in $(seq 1 300); do
	[ -S "$socket" ] && break
	kill -0 "$warmcache" 2>/dev/null || { echo "run.sh: warmcache exited" >&2; exit 1; }
	sleep 0.1
done
http_port="${DAPR_HTTP_PORT:-3500}"
printf '%s\n' '' \
	"daprd's HTTP API on http://127.0.0.1:$http_port, gRPC on 127.0.0.1:${DAPR_GRPC_PORT:-50001}; stores statestore (warmcache), pgstate, redisstate; try:" \
	"  curl -si -X POST -d '[{\"key\":\"order-1\",\"value\":{\"qty\":1}}]' 127.0.0.1:$http_port/v1.0/state/statestore" \
	"  curl -si 127.0.0.1:$http_port/v1.0/state/statestore/order-1" \
	"  DAPR_GRPC_ENDPOINT=127.0.0.1:${DAPR_GRPC_PORT:-50001} go run ./cmd/dapr-example -store statestore" ''
"$daprd" --app-id orders --resources-path deploy/dapr/components --resources-path deploy/dapr/builtin \
	--dapr-http-port "$http_port" --dapr-grpc-port "${DAPR_GRPC_PORT:-50001}" \
	--dapr-listen-addresses 127.0.0.1 --dapr-internal-grpc-listen-address 127.0.0.1 \
	--enable-metrics=false --log-level warn

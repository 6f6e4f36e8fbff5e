#!/usr/bin/env bash
# Runs warmcache as a Dapr pluggable state store on this machine, on the
# local stack (PostgreSQL, PgBouncer, Redis; bin/localstack), for a daprd
# that you run yourself:
#
#   deploy/dapr/run.sh                       # or: make run-dapr
#   dapr run --app-id orders --resources-path deploy/dapr/components -- <your app>
#
# warmcache must be serving before daprd starts: daprd looks for component
# sockets once, at start. DAPR_COMPONENTS_SOCKETS_FOLDER, when set, moves
# the socket folder for both.
set -euo pipefail
cd "$(dirname "$0")/../.."

make --no-print-directory build localstack
bin/localstack up
eval "$(bin/localstack run-env)"
namespaces=deploy/dapr/namespaces.yaml
# Migrations (DDL) go straight to PostgreSQL; the server goes through PgBouncer.
WARMCACHE_POSTGRES_DSN="$WARMCACHE_STACK_DIRECT_DSN" bin/warmcache migrate up --namespaces "$namespaces"
exec bin/warmcache serve --namespaces "$namespaces" --dapr-components statestore "$@"

#!/usr/bin/env bash
# The local stack from a shell: runs cmd/localstack (internal/localstack) in
# the repository's root, e.g.
#   deploy/local/stack.sh up                 start what is missing (idempotent)
#   eval "$(deploy/local/stack.sh env)"      the tests' WARMCACHE_TEST_* servers
#   eval "$(deploy/local/stack.sh run-env)"  the service's settings, as make run
#   deploy/local/stack.sh down | install | seed FILE
set -euo pipefail
exec go run -C "$(dirname "${BASH_SOURCE[0]}")/../.." ./cmd/localstack "$@"

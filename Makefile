# Developer tasks for warmcache. The local stack (PostgreSQL, Redis and a
# PgBouncer sidecar on 127.0.0.1) is managed by deploy/local/stack.sh.

GO ?= go
BIN := bin/warmcache
STACK := deploy/local/stack.sh
NAMESPACES := deploy/local/namespaces.yaml
HTTP_ADDR ?= 127.0.0.1:8080
# Extra flags for `make test`, e.g. make test TESTFLAGS='-run TestTier -v'
TESTFLAGS ?=
# Extra flags for `make bench`, e.g. make bench BENCHFLAGS='-duration 10s -workers 64'
BENCHFLAGS ?=

# Migrations (DDL) go straight to PostgreSQL; the server goes through PgBouncer.
MIGRATE_DSN := postgres://postgres@127.0.0.1:5432/warmcache?sslmode=disable
SERVE_DSN := postgres://postgres@127.0.0.1:6432/warmcache?sslmode=disable

.PHONY: build run test vet clean proto stack-up stack-down bench

build:
	$(GO) build -o $(BIN) ./cmd/warmcache

# Start the stack, migrate, seed 100k widgets, then serve in the foreground.
run:
	$(STACK) up
	$(GO) build -o $(BIN) ./cmd/warmcache
	WARMCACHE_POSTGRES_DSN='$(MIGRATE_DSN)' $(BIN) migrate up --namespaces $(NAMESPACES)
	$(STACK) seed
	@printf '%s\n' \
		'' \
		'warmcache listens on http://$(HTTP_ADDR); try:' \
		'  curl -si http://$(HTTP_ADDR)/v1/kv/widgets/42    # miss: read from PostgreSQL' \
		'  curl -si http://$(HTTP_ADDR)/v1/kv/widgets/42    # hit: served from Redis' \
		"  curl -si -X PUT -H 'Content-Type: application/json' -d '{\"widget\":{\"id\":\"42\",\"debug\":\"off\"}}' http://$(HTTP_ADDR)/v1/kv/widgets/42" \
		'  curl -si -X DELETE http://$(HTTP_ADDR)/v1/kv/widgets/42' \
		"  curl -si -X POST -H 'Content-Type: application/json' -d '{\"keys\":[1,2,999999999]}' http://$(HTTP_ADDR)/v1/kv/widgets/_mget" \
		'  curl -s http://$(HTTP_ADDR)/metrics' \
		''
	exec env WARMCACHE_POSTGRES_DSN='$(SERVE_DSN)' WARMCACHE_PG_POOLER=pgbouncer \
		WARMCACHE_REDIS_ADDRS=127.0.0.1:6379 WARMCACHE_HTTP_ADDR=$(HTTP_ADDR) \
		$(BIN) serve --namespaces $(NAMESPACES)

# The WARMCACHE_TEST_* defaults from `stack.sh env` apply only to variables
# not already set in the environment (CI sets its own).
test:
	$(STACK) up
	@test_env="$$($(STACK) env)" && eval "$$test_env" && \
		echo "WARMCACHE_TEST_POSTGRES_DSN=$$WARMCACHE_TEST_POSTGRES_DSN" && \
		echo "WARMCACHE_TEST_PGBOUNCER_DSN=$$WARMCACHE_TEST_PGBOUNCER_DSN" && \
		echo "WARMCACHE_TEST_REDIS_ADDR=$$WARMCACHE_TEST_REDIS_ADDR" && \
		echo "$(GO) test -race -count=1 -timeout 15m $(TESTFLAGS) ./..." && \
		$(GO) test -race -count=1 -timeout 15m $(TESTFLAGS) ./...

vet:
	$(GO) vet ./...
	@unformatted="$$(find . -name '*.go' -not -path './.local/*' -not -path './vendor/*' -print0 | \
		xargs -0 -r "$$($(GO) env GOROOT)/bin/gofmt" -l)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt -w needed on:"; echo "$$unformatted"; exit 1; fi

clean:
	rm -rf bin

# Regenerate the gRPC code from internal/grpcapi/proto/ (commit the result): protoc from
# Debian's protobuf-compiler, and protoc-gen-go / protoc-gen-go-grpc at the
# versions pinned in internal/grpcapi/proto/gen.sh, built into bin/.
proto:
	@command -v protoc >/dev/null || { echo 'protoc missing: apt-get install protobuf-compiler'; exit 1; }
	internal/grpcapi/proto/gen.sh

# Load test: prepares its own 1M-row database (warmcache_bench), starts the
# service and a floor server on free loopback ports, runs the vegeta
# scenarios and the pgbench/redis-benchmark baselines, and writes
# loadtest/RESULTS.md with loadtest/results/*.png (logs in loadtest/out/).
bench:
	$(STACK) up
	$(GO) build -o $(BIN) ./cmd/warmcache
	$(GO) build -o bin/loadtest ./loadtest
	bin/loadtest -bin $(BIN) $(BENCHFLAGS)

stack-up:
	$(STACK) up

stack-down:
	$(STACK) down

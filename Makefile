# Developer tasks for warmcache. The local stack (PostgreSQL with logical
# replication, Redis and a PgBouncer sidecar on 127.0.0.1) is managed by
# deploy/local/stack.sh, which also names every address: `stack.sh run-env`
# for the service and `stack.sh env` for the tests.

GO ?= go
BIN := bin/warmcache
STACK := deploy/local/stack.sh
NAMESPACES := deploy/local/namespaces.yaml
HTTP_ADDR ?= 127.0.0.1:8080
# Extra flags for `make test`, e.g. make test TESTFLAGS='-run TestTier -v'
TESTFLAGS ?=
# Extra flags for `make bench`, e.g. make bench BENCHFLAGS='-duration 10s -workers 64'
BENCHFLAGS ?=
# Inputs each fuzz target tries in `make test`. A count, not a duration: with
# a duration, Go 1.26's fuzzing coordinator can report its own deadline as a
# failure (golang/go#75804).
FUZZ_EXECS ?= 50000x

.PHONY: build run test vet clean proto stack-up stack-down bench

build:
	$(GO) build -o $(BIN) ./cmd/warmcache

# Start the stack, migrate, seed 100k widgets, then serve in the foreground.
# Migrations (DDL) go straight to PostgreSQL; the server goes through PgBouncer.
run:
	$(STACK) up
	$(GO) build -o $(BIN) ./cmd/warmcache
	@eval "$$($(STACK) run-env)" && \
		WARMCACHE_POSTGRES_DSN="$$WARMCACHE_STACK_DIRECT_DSN" $(BIN) migrate up --namespaces $(NAMESPACES)
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
	@eval "$$($(STACK) run-env)" && exec env WARMCACHE_HTTP_ADDR=$(HTTP_ADDR) \
		WARMCACHE_REPLICATION_DSN="$$WARMCACHE_STACK_DIRECT_DSN" \
		$(BIN) serve --namespaces $(NAMESPACES)

# The node packages of the @dapr/dapr check that TestDaprJavaScriptSDKOverHTTP
# runs, installed from their committed package-lock.json.
DAPR_NODE := internal/daprapi/testdata/node

# The WARMCACHE_TEST_* defaults from `stack.sh env` apply only to variables
# not already set in the environment (CI sets its own).
test:
	$(STACK) up
	npm ci --prefix $(DAPR_NODE) --no-audit --no-fund
	@test_env="$$($(STACK) env)" && eval "$$test_env" && \
		echo "WARMCACHE_TEST_POSTGRES_DSN=$$WARMCACHE_TEST_POSTGRES_DSN" && \
		echo "WARMCACHE_TEST_PGBOUNCER_DSN=$$WARMCACHE_TEST_PGBOUNCER_DSN" && \
		echo "WARMCACHE_TEST_REDIS_ADDR=$$WARMCACHE_TEST_REDIS_ADDR" && \
		echo "WARMCACHE_TEST_GREENPLUM_DSN=$${WARMCACHE_TEST_GREENPLUM_DSN:-(unset: the Greenplum lane is left out)}" && \
		echo "$(GO) test -race -count=1 -timeout 15m $(TESTFLAGS) ./..." && \
		$(GO) test -race -count=1 -timeout 15m $(TESTFLAGS) ./... && \
		for target in warmcache:FuzzParseKey warmcache:FuzzCheckValue warmcache:FuzzCheckMatch loadfmt:FuzzCSVReader \
			httpapi:FuzzPathKey httpapi:FuzzDecodeMGet; do \
			echo "$(GO) test ./internal/$${target%%:*} -run '^$$' -fuzz '^$${target#*:}$$' -fuzztime=$(FUZZ_EXECS)" && \
			$(GO) test ./internal/$${target%%:*} -run '^$$' -fuzz "^$${target#*:}\$$" -fuzztime=$(FUZZ_EXECS) || exit 1; \
		done

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
	@eval "$$($(STACK) env)" && set -x && bin/loadtest -bin $(BIN) -postgres "$$WARMCACHE_STACK_PG_ADDR" \
		-pgbouncer "$$WARMCACHE_STACK_PGBOUNCER_ADDR" -redis "$$WARMCACHE_TEST_REDIS_ADDR" $(BENCHFLAGS)

stack-up:
	$(STACK) up

stack-down:
	$(STACK) down

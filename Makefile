# Developer tasks for warmcache. The local stack (PostgreSQL with logical
# replication, Redis and a PgBouncer sidecar on 127.0.0.1) is run by
# bin/localstack (cmd/localstack, internal/localstack), which installs what is
# missing and names every address: `localstack run-env` for the service and
# `localstack env` for the tests.

GO ?= go
BIN := bin/warmcache
STACK := bin/localstack
NAMESPACES := deploy/local/namespaces.yaml
HTTP_ADDR ?= 127.0.0.1:8080
# Extra flags for `make test`, e.g. make test TESTFLAGS='-run TestTier -v'
TESTFLAGS ?=
# The packages `make test` tests; the fuzz targets run only with all of them,
# e.g. make test PKGS=./e2e/fault TESTFLAGS='-run TestFaultRedis'
PKGS ?= ./...
# Extra flags for `make bench`, e.g. make bench BENCHFLAGS='-duration 10s -workers 64'
BENCHFLAGS ?=
# Build tags of `make test` and `make vet`. daprd builds the tests that link
# daprd's own client for pluggable state stores
# (github.com/dapr/dapr/pkg/components/state), which brings in Kubernetes'
# client packages: Dapr's conformance suite
# (e2e/conformance) and TestDaprPluggable (e2e/service).
# Without the tag, go test and go vet leave those tests out.
TAGS ?= daprd
# Inputs each fuzz target tries in `make test`. A count, not a duration: with
# a duration, Go 1.26's fuzzing coordinator can report its own deadline as a
# failure (golang/go#75804).
FUZZ_EXECS ?= 50000x

.PHONY: build run run-dapr unit test soak vet clean proto localstack install stack-up stack-down bench bench-scale load-tools

build:
	$(GO) build -o $(BIN) ./cmd/warmcache

# bin/localstack, built by every target that uses it (quick from Go's cache).
localstack:
	$(GO) build -o $(STACK) ./cmd/localstack

# Install, with apt-get, what is missing: the servers, and the tools that
# building and testing need. `make test` runs it; `make run` installs only
# the servers (localstack up).
install: localstack
	$(STACK) install

# Start the stack, migrate, seed 100k widgets, then serve in the foreground.
# Migrations (DDL) go straight to PostgreSQL; the server goes through PgBouncer.
run: localstack
	$(STACK) up
	$(GO) build -o $(BIN) ./cmd/warmcache
	@eval "$$($(STACK) run-env)" && \
		WARMCACHE_POSTGRES_DSN="$$WARMCACHE_STACK_DIRECT_DSN" $(BIN) migrate up --namespaces $(NAMESPACES)
	$(STACK) seed deploy/local/sample-widgets.sql
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
		$(BIN) serve --namespaces $(NAMESPACES)

# The tests that need no server, and nothing but Go: a newcomer's first
# command. They are the packages whose tests reach neither internal/testenv
# nor internal/testproc (nor testcontainers), as go list reports them, so a
# package whose tests start to use a server leaves the list by itself; the
# same of the load tools' module, loadtest/ (which ./... of this module
# leaves out). It installs nothing and starts nothing; `make test` runs
# these too.
unit:
	@for dir in . loadtest; do \
		cd "$(CURDIR)/$$dir" && \
		mod="$$($(GO) list -m)" && \
		deps="$$($(GO) list -test -f '{{.ImportPath}}{{range .Deps}} {{.}}{{end}}' ./...)" && \
		pkgs="$$(printf '%s\n' "$$deps" | awk -v mod="$$mod" \
			'$$1 ~ /\.test$$/ && !/ [^ ]*\/internal\/(testenv|testproc)( |$$)|testcontainers/ { \
				p = substr($$1, 1, length($$1) - 5); print (p == mod ? "." : "." substr(p, length(mod) + 1)) }')" && \
		echo "(cd $$dir && $(GO) test -count=1 $(TESTFLAGS)" $$pkgs")" && \
		$(GO) test -count=1 $(TESTFLAGS) $$pkgs || exit 1; \
	done

# Serve warmcache as daprd's pluggable state store on the local stack: the
# socket warmcache.sock in $DAPR_COMPONENTS_SOCKETS_FOLDER (default
# /tmp/dapr-components-sockets) serves the component statestore. Where the
# daprd kit is beside the project (shared/dapr), it also starts daprd with
# deploy/dapr/components and Dapr's own stores (deploy/dapr/builtin);
# otherwise start your daprd with --resources-path deploy/dapr/components
# (see deploy/dapr/README.md).
run-dapr:
	deploy/dapr/run.sh

# The node packages of the @dapr/dapr check that TestDaprJavaScriptSDKOverHTTP
# runs, installed from their committed package-lock.json.
DAPR_NODE := e2e/service/testdata/node

# The suites whose assertions bound a lag in wall time (the lag within
# the poll interval and a second, staleness within near_ttl) run after the
# rest, one at a time, so that the load of other tests does not eat into
# their bounds. `make test` runs every package either way.
ALONE := ./e2e/capture ./e2e/consistency

# The WARMCACHE_TEST_* defaults from `localstack env` apply only to
# variables not already set in the environment (CI may set its own).
test: install
	$(STACK) up
	npm ci --prefix $(DAPR_NODE) --no-audit --no-fund
	@test_env="$$($(STACK) env)" && eval "$$test_env" && \
		echo "WARMCACHE_TEST_POSTGRES_DSN=$$WARMCACHE_TEST_POSTGRES_DSN" && \
		echo "WARMCACHE_TEST_PGBOUNCER_DSN=$$WARMCACHE_TEST_PGBOUNCER_DSN" && \
		echo "WARMCACHE_TEST_REDIS_ADDR=$$WARMCACHE_TEST_REDIS_ADDR" && \
		echo "WARMCACHE_TEST_GREENPLUM_DSN=$${WARMCACHE_TEST_GREENPLUM_DSN:-(unset: the Greenplum lane is left out)}" && \
		echo "WARMCACHE_TEST_DAPRD=$${WARMCACHE_TEST_DAPRD:-(unset: the real-daprd lane looks for the daprd kit above the project)}" && \
		if [ "$(PKGS)" != ./... ]; then \
			echo "$(GO) test -race -count=1 -timeout 15m -tags '$(TAGS)' $(TESTFLAGS) $(PKGS)" && \
			exec $(GO) test -race -count=1 -timeout 15m -tags '$(TAGS)' $(TESTFLAGS) $(PKGS); \
		fi && \
		rest="$$($(GO) list -tags '$(TAGS)' ./... | grep -v $(foreach p,$(ALONE),-e '$(patsubst ./%,/%,$(p))$$'))" && \
		echo "$(GO) test -race -count=1 -timeout 15m -tags '$(TAGS)' $(TESTFLAGS) <every package but $(ALONE)>" && \
		$(GO) test -race -count=1 -timeout 15m -tags '$(TAGS)' $(TESTFLAGS) $$rest && \
		echo "$(GO) test -race -count=1 -timeout 15m -tags '$(TAGS)' -p 1 $(TESTFLAGS) $(ALONE)" && \
		$(GO) test -race -count=1 -timeout 15m -tags '$(TAGS)' -p 1 $(TESTFLAGS) $(ALONE) && \
		echo "cd loadtest && $(GO) test -race -count=1 -timeout 15m $(TESTFLAGS) ./..." && \
		(cd loadtest && $(GO) test -race -count=1 -timeout 15m $(TESTFLAGS) ./...) && \
		for target in warmcache:FuzzParseKey warmcache:FuzzCheckValue warmcache:FuzzCheckMatch loadfmt:FuzzCSVReader \
			httpapi:FuzzPathKey httpapi:FuzzDecodeMGet; do \
			echo "$(GO) test ./internal/$${target%%:*} -run '^$$' -fuzz '^$${target#*:}$$' -fuzztime=$(FUZZ_EXECS)" && \
			$(GO) test ./internal/$${target%%:*} -run '^$$' -fuzz "^$${target#*:}\$$" -fuzztime=$(FUZZ_EXECS) || exit 1; \
		done

# The linearizability suite's fault pass at length: every fault scenario
# (latency bursts, late commands, restarts, and the mix of them) with change
# capture and the near cache on and off, SOAK_RUN (20s) each, where `make
# test` runs the mix for 4s; the two-instance pass under each scenario; then
# one run of SOAK_LONG (10m) under the mix repeated, with the consistency
# monitor's figures (SOAK_LONG=0 leaves it out). docs/consistency.md has
# what they measured.
SOAK_RUN ?= 20s
SOAK_LONG ?= 10m
soak: install
	$(STACK) up
	@test_env="$$($(STACK) env)" && eval "$$test_env" && \
		WARMCACHE_TEST_FAULTS=all WARMCACHE_TEST_FAULT_RUN=$(SOAK_RUN) \
		WARMCACHE_TEST_SOAK=$(filter-out 0,$(SOAK_LONG)) \
		$(GO) test -race -count=1 -timeout 90m -run 'TestLinearizable/(faults|two-instances|soak)' -v ./e2e/consistency

# staticcheck, at the version named here (fetched by go run into the module
# cache), with its default checks: among them U1000, so an uncalled
# function fails vet.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.7.0

vet:
	$(GO) vet -tags '$(TAGS)' ./...
	$(GO) run $(STATICCHECK) -tags '$(TAGS)' ./...
	cd loadtest && $(GO) vet ./...
	@unformatted="$$(find . -name '*.go' -not -path './.local/*' -not -path './vendor/*' -print0 | \
		xargs -0 -r "$$($(GO) env GOROOT)/bin/gofmt" -l)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt -w needed on:"; echo "$$unformatted"; exit 1; fi

clean:
	rm -rf bin

# Regenerate the gRPC code from internal/grpcapi/proto/ (commit the result): protoc from
# Debian's protobuf-compiler and libprotobuf-dev, and protoc-gen-go / protoc-gen-go-grpc at the
# versions pinned in internal/grpcapi/proto/gen.sh, built into bin/.
proto:
	@command -v protoc >/dev/null || { echo 'protoc missing: apt-get install protobuf-compiler libprotobuf-dev'; exit 1; }
	internal/grpcapi/proto/gen.sh

# The load tools of loadtest/ (a module of its own, see loadtest/go.mod),
# built into bin/ and run from here, where their default paths point:
# bin/loadtest (make bench), bin/scale (make bench-scale), bin/gpbench
# (Greenplum) and bin/storagechart (docs/storage.md).
LOAD_TOOLS := loadtest scale gpbench storagechart
load-tools:
	cd loadtest && for tool in $(LOAD_TOOLS); do $(GO) build -o ../bin/$$tool ./cmd/$$tool || exit 1; done

# Load test: prepares its own 1M-row database (warmcache_bench) on the local
# stack, starts the service and a floor server on free loopback ports, runs the vegeta
# scenarios and the pgbench/redis-benchmark baselines, and writes
# loadtest/RESULTS.md with loadtest/results/*.png (logs in loadtest/out/).
bench: localstack
	$(STACK) up
	$(GO) build -o $(BIN) ./cmd/warmcache
	cd loadtest && $(GO) build -o ../bin/loadtest ./cmd/loadtest
	bin/loadtest -bin $(BIN) $(BENCHFLAGS)

# Cost curves (not in CI): misses, hits and writes at 100k and 1M rows and at
# values of 100 B to 1 MiB, and with WARMCACHE_TEST_GREENPLUM_DSN set at 100k,
# 1M and 5M rows on Greenplum, each table bulk-loaded with warmcache load into
# a database of its own (dropped at the end unless SCALEFLAGS=-keep); the
# batch size of _mget, one to four instances, the near cache's heap per entry;
# writes loadtest/scale/SCALE.md and its PNGs.
bench-scale: localstack
	$(STACK) up
	$(GO) build -o $(BIN) ./cmd/warmcache
	cd loadtest && $(GO) build -o ../bin/scale ./cmd/scale
	bin/scale -bin $(BIN) $(SCALEFLAGS)

stack-up: localstack
	$(STACK) up

stack-down: localstack
	$(STACK) down

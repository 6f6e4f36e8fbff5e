#!/usr/bin/env bash
# Generates the Go code of internal/grpcapi/proto/ into OUT_DIR (default: the repository, in
# place). protoc comes from Debian's protobuf-compiler (its well-known types from
# libprotobuf-dev); the Go plugins are
# built at the pinned versions below into BIN_DIR (default: bin/).
#
#   internal/grpcapi/proto/gen.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."

PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2

out="${1:-.}"
bin="${BIN_DIR:-$PWD/bin}"
command -v protoc >/dev/null || { echo "internal/grpcapi/proto/gen.sh: protoc not found: apt-get install protobuf-compiler libprotobuf-dev" >&2; exit 1; }
[ -f /usr/include/google/protobuf/timestamp.proto ] || { echo "internal/grpcapi/proto/gen.sh: protoc's well-known types not found: apt-get install libprotobuf-dev" >&2; exit 1; }
mkdir -p "$bin" "$out"
GOBIN="$bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
GOBIN="$bin" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION"
PATH="$bin:$PATH" protoc -I internal/grpcapi/proto \
	--go_out="$out" --go_opt=module=github.com/warmcache/warmcache \
	--go-grpc_out="$out" --go-grpc_opt=module=github.com/warmcache/warmcache \
	internal/grpcapi/proto/warmcache/v1/warmcache.proto

#!/usr/bin/env bash
# Regenerates the Go code of fence's two protocols with pinned tools: the API
# (api/fence/v1/fence.proto → api/fence.pb.go, api/fence_grpc.pb.go: Go package
# github.com/fencehq/fence/api) and the raft transport's
# messages (internal/transport/transportpb/transport.proto → transport.pb.go;
# it has no service, so no _grpc.pb.go):
#   protoc 3.21.12 (Debian bookworm package protobuf-compiler),
#   protoc-gen-go v1.36.12, protoc-gen-go-grpc v1.5.1,
#   protoc-gen-go-vtproto v0.6.1-0.20240319094008-0393e58bdf10, the version
#   go.mod requires (*_vtproto.pb.go: reflection-free Marshal, Unmarshal and
#   Size, which fence's gRPC codec uses: see api/codec.go).
# Usage: api/generate.sh   (installs the Go plugins into a temporary GOBIN)
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v protoc >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler
fi
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN=$bin go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
GOBIN=$bin go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
GOBIN=$bin go install github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@v0.6.1-0.20240319094008-0393e58bdf10
gen() { # dir proto go_opt [more protoc flags]
  (cd "$1" && PATH=$bin:$PATH protoc -I . -I /usr/include \
    --go_out=. --go_opt="$3" \
    --go-grpc_out=. --go-grpc_opt="$3" \
    "${@:4}" "$2")
}
# The API's import path is fence/v1/fence.proto (package fence.v1), its Go
# code stays in package api, next to this script. Only the API gets VT code:
# the raft transport's frames hold raft messages already marshalled.
gen . fence/v1/fence.proto module=github.com/fencehq/fence/api \
  --go-vtproto_out=. --go-vtproto_opt=module=github.com/fencehq/fence/api,features=marshal+unmarshal+size
gen ../internal/transport/transportpb transport.proto paths=source_relative

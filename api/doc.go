// Package api holds fence's gRPC contract: fence/v1/fence.proto (proto
// package fence.v1) and the Go code generated from it (fence.pb.go,
// fence_grpc.pb.go). Regenerate with ./generate.sh, which pins protoc and
// the plugin versions; buf.yaml sets the lint and breaking-change rules CI
// checks. Other languages generate their clients from fence/v1/fence.proto
// and follow docs/protocol.md, the client contract.
package api

// Package api holds fence's gRPC contract: fence.proto and the Go code
// generated from it (fence.pb.go, fence_grpc.pb.go). Regenerate with
// ./generate.sh, which pins protoc and the plugin versions. Other languages
// generate their clients from fence.proto.
package api

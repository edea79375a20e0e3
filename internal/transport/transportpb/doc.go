// Package transportpb holds the messages of fence's raft transport:
// transport.proto and the Go code generated from it (transport.pb.go).
// Regenerate with api/generate.sh (it regenerates the API too), which pins
// protoc and the plugin versions. Only package transport uses it.
package transportpb

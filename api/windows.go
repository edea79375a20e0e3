package api

// The flow-control windows of the client port, set by the server and by
// the Go client. With gRPC's default (windows sized by estimating the
// bandwidth-delay product) a receiver sends a BDP ping for nearly every
// message that arrives after a pause, which is every call of a lock
// service: one more frame and its acknowledgement, a write and a read on
// each side, per call. Static windows send none. fence's messages are
// small, and its largest (a Put of a maximal value, about 1 MiB) fits one
// stream window, so they cost no throughput.
const (
	StreamWindow = 2 << 20 // bytes a stream may send before its receiver acknowledges
	ConnWindow   = 8 << 20 // bytes all streams of a connection may
)

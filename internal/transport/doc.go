// Package transport carries raft messages (go.etcd.io/raft/v3 raftpb.Message)
// between fence nodes over gRPC on the raft port. The wire protocol is
// transportpb/transport.proto (service fence.transport.v1.Raft).
//
// # Streams
//
// A Transport serves the protocol on the Listener it is given and, for each
// peer named with SetPeer, keeps one gRPC connection and one long-lived Send
// stream, opened when the first message to the peer is sent. The stream's
// first Batch is an empty handshake that the receiver checks and accepts by
// answering with response headers; after it the sender packs everything
// queued for the peer into Batches of at most 4 MiB (a larger message, up to
// the 64 MiB gRPC message limit, travels alone). The receiver answers nothing
// else: raft's own messages are its acknowledgements.
//
// A MsgSnap does not go on the Send stream: it gets a Snapshot stream of its
// own, one at a time per peer, whose first chunk carries the message without
// its snapshot data and the following chunks the data, 1 MiB at a time. Its
// outcome is reported through Config.SnapshotDone (for RawNode.ReportSnapshot).
//
// # Ordering
//
// A peer's messages are delivered in the order Send was given them, as long as
// they travel on one stream. Across a reconnect, and between the Send stream
// and a snapshot, order is not kept: raft tolerates reordered and lost
// messages. Deliver is called from several goroutines at once, one per
// incoming stream.
//
// # Drops and backpressure
//
// Send never blocks. Each peer has a bounded queue (4096 messages, 64 MiB);
// when the peer's receiver is slow, gRPC flow control stops the sender
// goroutine and the queue fills. A message that finds the queue full, a
// message to an unknown peer, and a message too large for the wire are
// dropped, and the peer is reported through Config.Unreachable (for
// RawNode.ReportUnreachable: the leader then probes the follower instead of
// streaming to it). When a stream fails, what was queued is dropped and
// reported the same way, and the peer's messages are dropped while the
// transport waits to reconnect: 50 ms after the first failure, doubling to
// 2 s, jittered, and reset by a successful handshake. Callbacks run on a
// goroutine of the transport, never inside Send.
//
// # Cluster id
//
// Every Batch and every snapshot carries the sender's cluster id, its node id
// and the receiver's node id. A receiver refuses a stream from another
// cluster, or one addressed to another node id (a peer address pointing at the
// wrong node), with FailedPrecondition and a message naming both ids; it
// refuses malformed content, such as bytes that are no raft message or a
// message type that is local to a node, with InvalidArgument. Both sides log
// the refusal, and the sender retries with backoff, so a fixed configuration
// heals by itself.
//
// # TLS
//
// The transport dials with insecure (plaintext) credentials by default, which
// fits loopback and trusted networks only. Config.ServerOptions and
// Config.DialOptions are applied after the transport's own options, so TLS
// comes in as grpc.Creds(...) and grpc.WithTransportCredentials(...) without
// changing this package.
package transport

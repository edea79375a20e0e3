// Package transport carries raft messages (go.etcd.io/raft/v3 raftpb.Message)
// between fence nodes over TCP on the raft port, in mutual TLS when
// configured (see TLS below). The messages on the wire are
// transportpb/transport.proto's; the framing is this package's (wire.go).
//
// # Wire
//
// A connection carries one stream. It opens with the preface "FNCRAFT1" and a
// kind byte: 'M' for a stream of Batches, 'S' for one snapshot. Then come
// frames: a 4-byte big-endian length and that many bytes of a marshaled
// message (a Batch, or a SnapshotChunk). Frames over 64 MiB are refused, and
// so is a first frame over 1 KiB (a handshake) or 1 MiB (a snapshot's
// header), since it is read before anything about the peer is known; a
// frame's body is read as it arrives, never allocated on the peer's word. The
// receiver answers with frames of its own, each a google.rpc.Status: OK
// accepts a stream (after its first Batch) or a snapshot (once delivered);
// any other code refuses, and the receiver closes the connection. No gRPC
// and no HTTP/2 stand between raft and the socket: a message costs a write
// and the receiver's read, and a hand-off to the peer's sender goroutine
// only when the stream is busy (see Streams).
//
// # Streams
//
// A Transport serves the protocol on the Listener it is given and, for each
// peer named with SetPeer, keeps one long-lived message stream, opened when
// the first message to the peer is sent. The stream's first Batch is an empty
// handshake that the receiver checks and accepts with an OK answer; after it
// the sender packs everything queued for the peer into Batches of at most
// 4 MiB (a larger message, up to the 64 MiB frame limit, travels alone) and
// writes them in one flush. While a plaintext stream is idle (nothing
// queued, nothing being written), Send writes the peer's messages of the
// call itself, on its caller's goroutine, with one write that never blocks
// (a system call on the non-blocking socket); whatever the socket does not
// take at once is finished by the peer's sender goroutine, ahead of
// anything queued later. So a lone message (one client's commit) reaches
// the wire without waking a goroutine. Under TLS every message goes
// through the sender goroutine. The receiver answers nothing else: raft's
// own messages are its acknowledgements.
//
// A MsgSnap does not go on the message stream: it gets a connection of its
// own, one at a time per peer, whose first chunk carries the message without
// its snapshot data and the following chunks the data, 1 MiB at a time, then
// an empty frame. Its outcome (the receiver's answer) is reported through
// Config.SnapshotDone (for RawNode.ReportSnapshot).
//
// # Ordering
//
// A peer's messages are delivered in the order Send was given them, as long as
// they travel on one stream. Across a reconnect, and between the message
// stream and a snapshot, order is not kept: raft tolerates reordered and lost
// messages. Deliver is called from several goroutines at once, one per
// incoming connection.
//
// # Drops and backpressure
//
// Send never blocks. Each peer has a bounded queue (4096 messages, 64 MiB);
// when the peer's receiver is slow, TCP flow control stops the sender
// goroutine and the queue fills. A message that finds the queue full, a
// message to an unknown peer, and a message too large for the wire are
// dropped, and the peer is reported through Config.Unreachable (for
// RawNode.ReportUnreachable: the leader then probes the follower instead of
// streaming to it). A write that makes no progress for 10 s fails the stream,
// and TCP keepalive (10 s) finds a connection from a vanished peer. When a
// stream fails, what was queued is dropped and reported the same way, and the
// peer's messages are dropped while the transport waits to reconnect: 50 ms
// after the first failure, doubling to 2 s, jittered, and reset by a
// successful handshake. Callbacks run on a goroutine of the transport, never
// inside Send.
//
// # Cluster id
//
// Every Batch and every snapshot carries the sender's cluster id, its node id
// and the receiver's node id. A receiver refuses a stream from another
// cluster, or one addressed to another node id (a peer address pointing at the
// wrong node), with FailedPrecondition and a message naming both ids; it
// refuses malformed content, such as bytes that are no raft message, a
// message type that is local to a node, or another protocol, with
// InvalidArgument. Both sides log the refusal, and the sender retries with
// backoff, so a fixed configuration heals by itself.
//
// # TLS
//
// With Config.ServerTLS and Config.ClientTLS, every connection on the raft
// port is mutual TLS (crypto/tls) and the wire above runs inside it,
// unchanged. The server's handshake comes first, bounded by the connection's
// set-up deadline (10 s, which it shares with the preface and the first
// frame); the cluster's server config requires a client certificate and
// verifies it against the members' CA, so a connection without one, with
// one of another CA, or that speaks no TLS, is closed before a byte of the
// raft protocol is read, and the refusal is logged (Warn, with the remote
// address). The dialer does its handshake explicitly within the same 10 s,
// with a config that Config.ClientTLS gives per dial (so rotated
// certificates take effect on the next connection; open ones keep theirs),
// and verifies that the peer's certificate is of the CA and names the
// peer's host; a failed handshake fails the dial ("TLS handshake with
// <addr>: ..."), reported, logged and retried like any other. Under TLS 1.3
// the server checks the client's certificate after the client's handshake
// is over, so a refused client learns it from the server's alert when it
// reads the stream's answer ("the peer refused the TLS connection ...:
// remote error: tls: ..."). Closing a TLS connection closes the TCP
// connection at once, without a close_notify alert: the frames say where a
// stream ends.
//
// TLS authenticates the member at the other end (any holder of a
// certificate of the CA); which raft node it is remains the Batch's word,
// checked as above. Without ServerTLS and ClientTLS the connections are
// plaintext, which fits loopback and trusted networks only. A cluster sets
// both on every member; one alone is for tests.
package transport

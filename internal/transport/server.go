package transport

import (
	"bufio"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/internal/transport/transportpb"
)

const (
	// snapPrealloc bounds what a receiver allocates up front for snapshot
	// data on the word of the first chunk; beyond it the buffer grows as data
	// arrives.
	snapPrealloc = 8 << 20

	// refusalLogEvery spaces out identical refusal logs (a misconfigured
	// peer retries every few seconds).
	refusalLogEvery = 30 * time.Second

	// snapshotIdleTimeout is how long a snapshot stream may be silent
	// between two chunks.
	snapshotIdleTimeout = 30 * time.Second

	// readBufBytes is each connection's read buffer.
	readBufBytes = 64 << 10
)

// receiver is the server side: it checks what arrives and hands the messages
// to Deliver.
type receiver struct {
	clusterID uint64
	localID   uint64
	deliver   func(*raftpb.Message)
	authorize func(from uint64, cert *x509.Certificate) error // Config.AuthorizePeer
	peerAddr  func(from uint64, addr string) (ended func())   // Config.PeerClientAddr
	log       *slog.Logger

	mu       sync.Mutex
	refusals map[string]time.Time // when each refusal text was last logged
}

// serve handles one incoming connection: a stream of Batches or one
// snapshot, as its preface says. A refusal is answered (a status frame) and
// logged; then the connection is closed. A TLS connection (a *tlsConn, with
// Config.ServerTLS) first does its handshake, and one that fails it is
// logged and closed, before a byte of the raft protocol is read. The
// handshake, the preface and the first frame share one deadline,
// handshakeTimeout from the accept.
func (r *receiver) serve(c net.Conn) {
	defer c.Close()
	remote := c.RemoteAddr().String()
	deadline := time.Now().Add(handshakeTimeout)
	_ = c.SetReadDeadline(deadline)
	if tc, ok := c.(*tlsConn); ok {
		if err := serverHandshake(tc, deadline); err != nil {
			if quietHandshakeError(err) {
				r.log.Debug("raft connection from peer ended before its TLS handshake", "remote", remote, "err", err)
			} else {
				r.log.Warn("refused a TLS handshake on the raft port", "remote", remote, "err", err)
			}
			return
		}
	}
	br, bw := bufio.NewReaderSize(c, readBufBytes), bufio.NewWriter(c)
	var head [len(preface) + 1]byte
	if _, err := io.ReadFull(br, head[:]); err != nil {
		r.log.Debug("raft connection from peer ended before its preface", "remote", remote, "err", err)
		return
	}
	var what string
	var err error
	switch {
	case string(head[:len(preface)]) != preface:
		what, err = "raft connection", status.Error(codes.InvalidArgument, "not fence's raft protocol (bad preface)")
	case head[len(preface)] == kindMessages:
		what, err = "raft stream", r.receiveMessages(c, br, bw)
	case head[len(preface)] == kindSnapshot:
		what, err = "snapshot", r.receiveSnapshotConn(c, br, bw)
	default:
		what, err = "raft connection", status.Errorf(codes.InvalidArgument, "unknown stream kind %q", head[len(preface)])
	}
	if s, ok := status.FromError(err); ok && (s.Code() == codes.InvalidArgument || s.Code() == codes.FailedPrecondition || s.Code() == codes.PermissionDenied) {
		r.refuse(remote, what, err)
		_ = c.SetWriteDeadline(time.Now().Add(handshakeTimeout))
		_ = writeAnswer(bw, err)
	} else if err != nil {
		r.log.Debug(what+" from peer ended", "remote", remote, "err", err)
	}
}

// receiveMessages receives one peer's stream of Batches: the first is a
// handshake, answered OK once checked; the messages of every Batch are
// delivered in order. It returns when the stream ends.
func (r *receiver) receiveMessages(c net.Conn, br *bufio.Reader, bw *bufio.Writer) error {
	accepted := false
	var from uint64
	var cert *x509.Certificate // what admit judged the sender by (nil: plaintext)
	for {
		limit := maxFrameBytes
		if !accepted {
			limit = maxHandshakeBytes
		}
		raw, err := readFrame(br, limit)
		if err != nil {
			if accepted && errors.Is(err, io.EOF) {
				return nil
			}
			return noEOF(err)
		}
		b := new(transportpb.Batch)
		var msgs []*raftpb.Message
		switch {
		case proto.Unmarshal(raw, b) != nil:
			err = status.Error(codes.InvalidArgument, "a frame of the raft stream is no Batch")
		case accepted && b.GetFrom() != from:
			err = status.Errorf(codes.InvalidArgument, "a stream from node %d carried a batch from node %d", from, b.GetFrom())
		case !accepted:
			// Vet the sender before anything is said about this cluster.
			if cert, err = r.admit(c, b.GetFrom()); err == nil {
				msgs, err = r.decodeBatch(b)
			}
		default:
			if err = r.readmit(from, cert); err == nil {
				msgs, err = r.decodeBatch(b)
			}
		}
		if err != nil {
			return err
		}
		if !accepted {
			_ = c.SetDeadline(time.Time{}) // a stream may be quiet for long
			if err := writeAnswer(bw, nil); err != nil {
				return err
			}
			accepted, from = true, b.GetFrom()
			r.log.Debug("raft stream from peer accepted", "from", from, "remote", c.RemoteAddr().String())
			if addr := b.GetClientAddr(); addr != "" && r.peerAddr != nil {
				defer r.peerAddr(from, addr)()
			}
		}
		for _, m := range msgs {
			r.deliver(m)
		}
	}
}

// receiveSnapshotConn receives one MsgSnap, delivers it and answers OK.
func (r *receiver) receiveSnapshotConn(c net.Conn, br *bufio.Reader, bw *bufio.Writer) error {
	start := time.Now()
	first := true
	m, err := r.receiveSnapshot(func() (*transportpb.SnapshotChunk, error) {
		limit := snapChunkBytes + 1<<10 // a chunk of data and its field's tag
		if first {
			limit = maxFirstSnapBytes
		}
		raw, err := readFrame(br, limit)
		if err != nil {
			return nil, noEOF(err)
		}
		if len(raw) == 0 {
			return nil, io.EOF // the end of the chunks
		}
		first = false
		// A large snapshot takes what it takes, but its chunks keep coming.
		_ = c.SetReadDeadline(time.Now().Add(snapshotIdleTimeout))
		ch := new(transportpb.SnapshotChunk)
		if err := proto.Unmarshal(raw, ch); err != nil {
			return nil, status.Error(codes.InvalidArgument, "a frame of the snapshot stream is no SnapshotChunk")
		}
		return ch, nil
	}, func(from uint64) error {
		_, err := r.admit(c, from)
		return err
	})
	if err != nil {
		return err
	}
	// Judged again at the end: the sender may have been removed meanwhile.
	if _, err := r.admit(c, m.GetFrom()); err != nil {
		return err
	}
	meta := m.GetSnapshot().GetMetadata()
	r.log.Info("snapshot received", "from", m.GetFrom(), "index", meta.GetIndex(), "term", meta.GetTerm(),
		"bytes", len(m.GetSnapshot().GetData()), "took", time.Since(start))
	r.deliver(m)
	_ = c.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	return writeAnswer(bw, nil)
}

// checkHeader checks the ids that every Batch and every first SnapshotChunk
// carries.
func (r *receiver) checkHeader(clusterID, from, to uint64) error {
	switch {
	case clusterID != r.clusterID:
		return status.Errorf(codes.FailedPrecondition,
			"cluster id mismatch: node %d sent cluster id %d, but node %d is in cluster id %d",
			from, clusterID, r.localID, r.clusterID)
	case from == 0:
		return status.Error(codes.InvalidArgument, "no sender node id")
	case from == r.localID:
		return status.Errorf(codes.FailedPrecondition,
			"node id conflict: a node with id %d sent to node %d, which has that id too", from, r.localID)
	case to != r.localID:
		return status.Errorf(codes.FailedPrecondition,
			"wrong node: node %d sent messages for node %d to this address, which is node %d (check node %d's address for node %d)",
			from, to, r.localID, from, to)
	}
	return nil
}

// admit asks Config.AuthorizePeer about a stream over TLS from node from,
// and returns the certificate it judged (nil for plaintext).
func (r *receiver) admit(c net.Conn, from uint64) (*x509.Certificate, error) {
	tc, ok := c.(*tlsConn)
	if !ok || r.authorize == nil {
		return nil, nil
	}
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 { // the handshake requires one; a config that does not
		return nil, status.Errorf(codes.PermissionDenied, "node %d presented no certificate", from)
	}
	return certs[0], r.readmit(from, certs[0])
}

// readmit asks Config.AuthorizePeer again about an accepted stream's sender
// (every batch: a member removed since the stream opened is cut off).
func (r *receiver) readmit(from uint64, cert *x509.Certificate) error {
	if cert == nil {
		return nil
	}
	if err := r.authorize(from, cert); err != nil {
		return status.Errorf(codes.PermissionDenied, "node %d refused: %v", from, err)
	}
	return nil
}

// decodeBatch checks a Batch and unmarshals its messages. Its errors are
// gRPC statuses: FailedPrecondition for a batch meant for another cluster or
// node, InvalidArgument for anything malformed.
func (r *receiver) decodeBatch(b *transportpb.Batch) ([]*raftpb.Message, error) {
	if err := r.checkHeader(b.GetClusterId(), b.GetFrom(), b.GetTo()); err != nil {
		return nil, err
	}
	raw := b.GetMessages()
	if len(raw) == 0 {
		return nil, nil
	}
	msgs := make([]*raftpb.Message, len(raw))
	for i, data := range raw {
		m := new(raftpb.Message)
		if err := proto.Unmarshal(data, m); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "message %d of a batch from node %d does not decode: %v", i, b.GetFrom(), err)
		}
		if err := r.checkMessage(m, b.GetFrom()); err != nil {
			return nil, err
		}
		msgs[i] = m
	}
	return msgs, nil
}

// peerMessages are the raft messages one fence member sends another.
// fence forwards no proposals and reads nothing on followers, so a MsgProp
// or MsgReadIndex from the network is never a member's (raft would commit a
// MsgProp as if the leader had proposed it, and panics on an empty one);
// raft's local messages never cross the network.
var peerMessages = map[raftpb.MessageType]bool{
	raftpb.MsgApp: true, raftpb.MsgAppResp: true, raftpb.MsgVote: true, raftpb.MsgVoteResp: true,
	raftpb.MsgPreVote: true, raftpb.MsgPreVoteResp: true, raftpb.MsgSnap: true,
	raftpb.MsgHeartbeat: true, raftpb.MsgHeartbeatResp: true, raftpb.MsgTimeoutNow: true,
}

// PeerMessage reports whether a raft message of type t is one fence
// members send each other; the transport delivers no other, and the node
// steps no other from the network.
func PeerMessage(t raftpb.MessageType) bool { return peerMessages[t] }

// checkMessage checks a decoded message against its stream's sender.
func (r *receiver) checkMessage(m *raftpb.Message, from uint64) error {
	t := m.GetType()
	if !PeerMessage(t) {
		return status.Errorf(codes.InvalidArgument, "node %d sent a message of type %v, which no fence member sends", from, t)
	}
	if m.GetFrom() != from || m.GetTo() != r.localID {
		return status.Errorf(codes.InvalidArgument, "node %d sent a %v from node %d to node %d on its stream to node %d",
			from, t, m.GetFrom(), m.GetTo(), r.localID)
	}
	return nil
}

// receiveSnapshot reads one snapshot stream's chunks through recv and
// reassembles the MsgSnap message; admit vets the sender named by the first
// chunk. Its errors are gRPC statuses.
func (r *receiver) receiveSnapshot(recv func() (*transportpb.SnapshotChunk, error), admit func(from uint64) error) (*raftpb.Message, error) {
	c, err := recv()
	if errors.Is(err, io.EOF) {
		return nil, status.Error(codes.InvalidArgument, "the snapshot stream ended before its first chunk")
	}
	if err != nil {
		return nil, err
	}
	if err := admit(c.GetFrom()); err != nil {
		return nil, err
	}
	if err := r.checkHeader(c.GetClusterId(), c.GetFrom(), c.GetTo()); err != nil {
		return nil, err
	}
	from := c.GetFrom()
	if len(c.GetData()) != 0 {
		return nil, status.Errorf(codes.InvalidArgument, "the first snapshot chunk from node %d carries data", from)
	}
	m := new(raftpb.Message)
	if err := proto.Unmarshal(c.GetMessage(), m); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "the snapshot message from node %d does not decode: %v", from, err)
	}
	if m.GetType() != raftpb.MsgSnap {
		return nil, status.Errorf(codes.InvalidArgument, "node %d sent a %v on a snapshot stream", from, m.GetType())
	}
	if err := r.checkMessage(m, from); err != nil {
		return nil, err
	}
	size := c.GetDataSize()
	switch {
	case m.Snapshot == nil && size > 0:
		return nil, status.Errorf(codes.InvalidArgument, "the snapshot message from node %d has no snapshot but announces %d bytes of data", from, size)
	case len(m.GetSnapshot().GetData()) != 0:
		return nil, status.Errorf(codes.InvalidArgument, "the snapshot message from node %d carries its data in the first chunk", from)
	}
	data := make([]byte, 0, min(size, snapPrealloc))
	for {
		c, err := recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if c.GetClusterId() != 0 || c.GetFrom() != 0 || c.GetTo() != 0 || len(c.GetMessage()) != 0 || c.GetDataSize() != 0 {
			return nil, status.Errorf(codes.InvalidArgument, "a snapshot chunk from node %d after the first repeats its header", from)
		}
		d := c.GetData()
		if len(d) > snapChunkBytes {
			return nil, status.Errorf(codes.InvalidArgument, "a snapshot chunk from node %d carries %d bytes, over the %d allowed", from, len(d), snapChunkBytes)
		}
		if uint64(len(d)) > size-uint64(len(data)) {
			return nil, status.Errorf(codes.InvalidArgument, "node %d sent more snapshot data than the %d bytes it announced", from, size)
		}
		data = append(data, d...)
	}
	if uint64(len(data)) != size {
		return nil, status.Errorf(codes.InvalidArgument, "the snapshot stream from node %d ended after %d of the %d bytes it announced", from, len(data), size)
	}
	if size > 0 {
		m.Snapshot.Data = data
	}
	return m, nil
}

// refuse logs a refused stream, at most once per refusalLogEvery for the
// same refusal.
func (r *receiver) refuse(remote, what string, err error) {
	msg := err.Error()
	now := time.Now()
	r.mu.Lock()
	if r.refusals == nil || len(r.refusals) > 1000 {
		r.refusals = make(map[string]time.Time)
	}
	last, seen := r.refusals[msg]
	logIt := !seen || now.Sub(last) >= refusalLogEvery
	if logIt {
		r.refusals[msg] = now
	}
	r.mu.Unlock()
	if logIt {
		r.log.Warn("refused a "+what+" from a peer", "remote", remote, "err", err)
	} else {
		r.log.Debug("refused a "+what+" from a peer again", "remote", remote, "err", err)
	}
}

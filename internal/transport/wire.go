package transport

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The wire: a connection opens with preface and one kind byte, then carries
// frames, each a 4-byte big-endian length and that many bytes of a
// marshaled protobuf message (kindMessages: transportpb.Batch; kindSnapshot:
// transportpb.SnapshotChunk). A zero length ends a snapshot's chunks. The
// receiver answers with frames of google.rpc.Status: code OK accepts a
// stream (after its first Batch) or a snapshot (once delivered); any other
// code refuses, and the receiver closes the connection.
const (
	preface      = "FNCRAFT1"
	kindMessages = 'M'
	kindSnapshot = 'S'
)

// Frame bounds. maxFrameBytes is the largest frame the transport sends and
// accepts (a raft message must leave room for the Batch around it). The
// first frame of a connection, read before anything about the peer is
// checked, is held to far less: a handshake Batch carries three ids, a
// snapshot's first chunk its message without the data. A frame's body is
// read in steps of frameStep, so a length the peer announces but does not
// send costs no memory.
const (
	maxFrameBytes     = 64 << 20
	maxHandshakeBytes = 1 << 10
	maxFirstSnapBytes = 1 << 20
	frameStep         = 1 << 20
)

// writeFrame writes m as one frame to w (buffered: the caller flushes).
func writeFrame(w *bufio.Writer, m proto.Message) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	return writeFrameBytes(w, b)
}

// appendFrame appends m as one frame to dst.
func appendFrame(dst []byte, m proto.Message) ([]byte, error) {
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst, err := proto.MarshalOptions{}.MarshalAppend(dst, m)
	if err != nil {
		return nil, err
	}
	n := len(dst) - at - 4
	if n > maxFrameBytes {
		return nil, fmt.Errorf("frame of %d bytes is over the %d allowed", n, maxFrameBytes)
	}
	binary.BigEndian.PutUint32(dst[at:], uint32(n))
	return dst, nil
}

func writeFrameBytes(w *bufio.Writer, b []byte) error {
	if len(b) > maxFrameBytes {
		return fmt.Errorf("frame of %d bytes is over the %d allowed", len(b), maxFrameBytes)
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(b)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(b)
	return err
}

// readFrame reads one frame's bytes, refusing a frame over max; a
// zero-length frame is returned as empty, not nil. io.EOF only at a frame
// boundary.
func readFrame(r *bufio.Reader, max int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if n > max {
		return nil, status.Errorf(codes.InvalidArgument, "a frame of %d bytes is over the %d allowed here", n, max)
	}
	b := make([]byte, 0, min(n, frameStep))
	for len(b) < n {
		step := min(n-len(b), frameStep)
		b = slices.Grow(b, step)
		k, err := io.ReadFull(r, b[len(b):len(b)+step])
		b = b[:len(b)+k]
		if err != nil {
			return nil, noEOF(err)
		}
	}
	return b, nil
}

// noEOF turns an EOF inside a frame into ErrUnexpectedEOF.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// writeAnswer writes err's status (nil: OK) as a frame and flushes.
func writeAnswer(w *bufio.Writer, err error) error {
	if err := writeFrame(w, status.Convert(err).Proto()); err != nil {
		return err
	}
	return w.Flush()
}

// readAnswer reads an answer frame: nil for OK, else the refusal as a
// status error.
func readAnswer(r *bufio.Reader) error {
	b, err := readFrame(r, maxHandshakeBytes)
	if err != nil {
		return err
	}
	var st spb.Status
	if err := proto.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("the peer answered with something that is no status: %w", err)
	}
	return status.ErrorProto(&st)
}

// writeStep is the most a stream writes to the socket under one deadline.
const writeStep = 64 << 10

// deadlineConn is a connection whose every write must make progress within
// timeout: each Write, in pieces of at most writeStep, first moves the write
// deadline. A peer that reads slowly but steadily keeps its stream; one that
// stops reading (or vanished) fails it.
type deadlineConn struct {
	net.Conn
	timeout time.Duration
}

func (c deadlineConn) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		piece := p[:min(len(p), writeStep)]
		_ = c.SetWriteDeadline(time.Now().Add(c.timeout))
		n, err := c.Conn.Write(piece)
		written += n
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
}

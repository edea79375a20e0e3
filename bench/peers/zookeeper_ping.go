package peers

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/fencehq/fence/internal/bench"
)

// ZooKeeper's wire protocol, as much of it as a session's heartbeat
// needs: every frame is a big-endian int32 length and a body.
const (
	zkPingXid     = -2  // the xid of pings and their answers
	zkOpPing      = 11  // OpCode.ping
	zkOpClose     = -11 // OpCode.closeSession
	zkCloseXid    = 1
	zkPasswordLen = 16 // a new session's (empty) password
)

// Renewer opens a ZooKeeper session of its own on server w mod 3 and
// renews it with the protocol's heartbeat: a renewal is one ping, the
// request a ZooKeeper client sends to keep its session — and so its
// ephemeral lock nodes — alive. ZooKeeper has no per-lock lease: a
// session's ping is what etcd's lease keepalive and fence's renewal
// are to theirs. The server answers pings on a connection in order, like
// etcd's keepalive stream, so answers are matched to renewals in order.
// go-zookeeper sends pings only when idle and does not expose them, so
// this speaks the protocol itself (connect handshake, ping, close).
func (z *ZooKeeper) Renewer(ctx context.Context, w int) (bench.Renewer, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", z.Servers[w%len(z.Servers)])
	if err != nil {
		return nil, err
	}
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	r := &zkPinger{conn: conn, rd: bufio.NewReader(conn)}
	if err := r.handshake(z.TTL); err != nil {
		conn.Close()
		return nil, fmt.Errorf("zookeeper session: %w", err)
	}
	_ = conn.SetDeadline(time.Time{})
	return r, nil
}

// zkConnectRequest is a new session's ConnectRequest frame: protocol
// version 0, last zxid seen 0, the session timeout in milliseconds,
// session id 0, an empty 16-byte password, not read-only.
func zkConnectRequest(timeout time.Duration) []byte {
	body := binary.BigEndian.AppendUint32(nil, 0) // protocolVersion
	body = binary.BigEndian.AppendUint64(body, 0) // lastZxidSeen
	body = binary.BigEndian.AppendUint32(body, uint32(timeout.Milliseconds()))
	body = binary.BigEndian.AppendUint64(body, 0)             // sessionId
	body = binary.BigEndian.AppendUint32(body, zkPasswordLen) // passwd
	body = append(body, make([]byte, zkPasswordLen)...)
	body = append(body, 0) // readOnly
	return zkFrame(body)
}

// zkRequest is the frame of a request with no body but its header.
func zkRequest(xid, op int32) []byte {
	body := binary.BigEndian.AppendUint32(nil, uint32(xid))
	return zkFrame(binary.BigEndian.AppendUint32(body, uint32(op)))
}

func zkFrame(body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// zkSession reads a ConnectResponse body: the negotiated timeout and the
// session id; a timeout of 0 means the server refused the session.
func zkSession(body []byte) (timeout time.Duration, id int64, err error) {
	if len(body) < 16 {
		return 0, 0, fmt.Errorf("connect response of %d bytes", len(body))
	}
	ms := int32(binary.BigEndian.Uint32(body[4:8]))
	id = int64(binary.BigEndian.Uint64(body[8:16]))
	if ms <= 0 {
		return 0, 0, errors.New("server refused the session")
	}
	return time.Duration(ms) * time.Millisecond, id, nil
}

// zkReply reads a reply header: xid, zxid, error code (0: ok).
func zkReply(body []byte) (xid int32, zxid int64, code int32, err error) {
	if len(body) < 16 {
		return 0, 0, 0, fmt.Errorf("reply of %d bytes", len(body))
	}
	return int32(binary.BigEndian.Uint32(body[0:4])), int64(binary.BigEndian.Uint64(body[4:12])),
		int32(binary.BigEndian.Uint32(body[12:16])), nil
}

// zkPinger is one session's heartbeat stream.
type zkPinger struct {
	conn net.Conn
	rd   *bufio.Reader

	mu   sync.Mutex
	seqs []uint64
}

func (r *zkPinger) handshake(ttl time.Duration) error {
	if _, err := r.conn.Write(zkConnectRequest(ttl)); err != nil {
		return err
	}
	body, err := r.read()
	if err != nil {
		return err
	}
	_, _, err = zkSession(body)
	return err
}

// read reads one frame's body.
func (r *zkPinger) read() ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r.rd, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > 1<<20 {
		return nil, fmt.Errorf("frame of %d bytes", size)
	}
	body := make([]byte, size)
	_, err := io.ReadFull(r.rd, body)
	return body, err
}

var zkPing = zkRequest(zkPingXid, zkOpPing)

func (r *zkPinger) Send(seq uint64) error {
	r.mu.Lock()
	r.seqs = append(r.seqs, seq)
	r.mu.Unlock()
	_, err := r.conn.Write(zkPing)
	return err
}

func (r *zkPinger) Recv() (uint64, bool, error) {
	for {
		body, err := r.read()
		if err != nil {
			return 0, false, err
		}
		xid, _, code, err := zkReply(body)
		if err != nil {
			return 0, false, err
		}
		if xid != zkPingXid {
			continue // the close's answer
		}
		r.mu.Lock()
		if len(r.seqs) == 0 {
			r.mu.Unlock()
			return 0, false, errors.New("zookeeper answered a ping it was not sent")
		}
		seq := r.seqs[0]
		r.seqs = r.seqs[1:]
		r.mu.Unlock()
		return seq, code == 0, nil
	}
}

// Close ends the session (closeSession) and the connection.
func (r *zkPinger) Close() error {
	_ = r.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err := r.conn.Write(zkRequest(zkCloseXid, zkOpClose))
	return errors.Join(err, r.conn.Close())
}

package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Limits of the transport.
const (
	// maxQueueMsgs and maxQueueBytes bound one peer's send queue. A message
	// that would pass either bound is dropped (the queue always takes one
	// message when it is empty, whatever its size).
	maxQueueMsgs  = 4096
	maxQueueBytes = 64 << 20

	// maxBatchBytes bounds the messages packed into one Batch; a single larger
	// message travels alone.
	maxBatchBytes = 4 << 20

	// maxMsgBytes is the largest raft message: it leaves room in a frame
	// for the Batch around it.
	maxMsgBytes = maxFrameBytes - 1024

	// snapChunkBytes is the most snapshot data one SnapshotChunk carries.
	snapChunkBytes = 1 << 20

	// handshakeTimeout bounds a connection's set-up: the dial, the TLS
	// handshake, the preface and handshake Batch, the receiver's answer.
	handshakeTimeout = 10 * time.Second

	// defaultWriteTimeout fails a write that makes no progress for that
	// long: a peer whose machine vanished, or that stopped reading.
	defaultWriteTimeout = 10 * time.Second

	// keepaliveTime is the TCP keepalive period on both ends, so that a
	// receiver finds a connection from a vanished peer dead.
	keepaliveTime = 10 * time.Second

	// writeBufBytes is a stream's write buffer: a batch of small messages
	// goes out in one write.
	writeBufBytes = 64 << 10
)

// The reconnect backoff: minBackoff doubling up to maxBackoff, each wait
// jittered to between half and all of it.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// Config configures a Transport. ClusterID, LocalID, Listener and Deliver are
// required.
type Config struct {
	// ClusterID names the cluster. Every stream carries it, and a stream with
	// another cluster id is refused: it ends with FailedPrecondition and a
	// message naming both ids, logged on both sides. 0 is invalid.
	ClusterID uint64
	// LocalID is this node's raft id. A stream addressed to another id is
	// refused the same way. 0 is invalid.
	LocalID uint64
	// Listener is the raft port, opened by the caller. The Transport serves
	// on it and closes it in Close.
	Listener net.Listener
	// Deliver is called for each received message, in the order its sender
	// sent them (per sender; a reconnect or a snapshot, which has a stream of
	// its own, can reorder across streams, which raft tolerates). It is
	// called from several goroutines at once (one per sending peer and per
	// snapshot) and must not block for long: the node queues the message.
	// The message is the callee's.
	Deliver func(m *raftpb.Message)
	// Unreachable, if set, is called when messages to a peer were dropped or
	// may have been lost (a full queue, an unknown peer, a broken stream);
	// the node calls RawNode.ReportUnreachable, and raft retries. Calls are
	// made from a goroutine of the transport, never from Send, and a burst of
	// drops to one peer may be reported once.
	Unreachable func(id uint64)
	// SnapshotDone, if set, is called once for every MsgSnap given to Send:
	// ok when the peer took the whole message, false when it was dropped or
	// its stream failed (the node calls RawNode.ReportSnapshot). Called from
	// a goroutine of the transport, never from Send.
	SnapshotDone func(id uint64, ok bool)
	// ClientAddr is this node's client (gRPC) address, sent in the
	// handshake of each message stream it opens.
	ClientAddr string
	// PeerClientAddr, if set, is called with a peer's client address when a
	// message stream from it is accepted (its handshake named one), from
	// the goroutine serving that stream; the function it returns is called
	// when that stream ends (the address may be a process's that is gone).
	PeerClientAddr func(from uint64, addr string) (ended func())
	// Log receives the transport's log; nil means slog.Default().
	Log *slog.Logger

	// ServerTLS, if set, makes the raft port speak TLS: every accepted
	// connection does a TLS handshake with this config, bounded by the
	// handshake timeout (10 s, shared with the preface and the first Batch),
	// before anything of the raft protocol is read. A cluster's config
	// requires and verifies client certificates against the members' CA
	// (tls.RequireAndVerifyClientCert), so only a holder of a certificate
	// of that CA gets a stream: a refused handshake is logged (Warn, with
	// the remote address) and the connection closed, before a byte of raft
	// is read. The config's GetConfigForClient or GetCertificate may give
	// the current certificates per handshake, so they rotate without a
	// restart; open connections keep theirs.
	ServerTLS *tls.Config
	// AuthorizePeer, if set, is asked about every stream accepted over TLS,
	// with the sender's node id (of its first Batch or snapshot chunk) and
	// the certificate it presented (verified against ServerTLS's CA), and
	// again at every later Batch of a message stream: an error refuses the
	// stream with PermissionDenied and the error's text, logged on both
	// sides. The node checks that the certificate names the sender and that
	// the sender is a member, so one member's certificate cannot speak for
	// another and a removed member's stream ends.
	AuthorizePeer func(from uint64, cert *x509.Certificate) error
	// ClientTLS, if set, makes every connection to a peer (its message
	// stream and each snapshot) a TLS client of it: ClientTLS is called with
	// the peer's address for each dial, so its config (and a rotated
	// certificate) is fresh every time, and the handshake must complete
	// within the handshake timeout (10 s) or the dial fails, like a refused
	// connection (logged, the peer reported unreachable, retried with
	// backoff). The config must verify the peer's certificate (RootCAs: the
	// members' CA) and present this node's; a ServerName left empty is set
	// to the address's host, as tls.Dial does. A peer that refuses this
	// node's certificate says so after the handshake under TLS 1.3: the
	// stream then fails with the peer's alert ("remote error: tls: ...").
	//
	// With neither ServerTLS nor ClientTLS the raft port is plaintext. A
	// cluster sets both, with certificates of one CA, on every member: a
	// member with only one of them cannot talk to the others (setting one
	// alone is for tests).
	ClientTLS func(addr string) *tls.Config

	writeTimeout time.Duration // defaultWriteTimeout unless a test sets it
}

// Transport carries raft messages between this node and its peers over TCP
// connections, in TLS when Config.ServerTLS and Config.ClientTLS are set.
// Its methods are safe for concurrent use.
type Transport struct {
	cfg  Config
	log  *slog.Logger
	rep  *reporter
	recv *receiver

	mu      sync.RWMutex
	closed  bool
	peers   map[uint64]*peer
	inbound map[net.Conn]struct{} // accepted connections, closed by Close

	wg sync.WaitGroup // the accept loop, every peer's sender and every inbound connection's handler
}

// New checks cfg, then starts serving the raft protocol on cfg.Listener. It
// dials no peer: each peer's stream is opened when the first message to it is
// sent.
func New(cfg Config) (*Transport, error) {
	switch {
	case cfg.ClusterID == 0:
		return nil, errors.New("transport: ClusterID is 0")
	case cfg.LocalID == 0:
		return nil, errors.New("transport: LocalID is 0")
	case cfg.Listener == nil:
		return nil, errors.New("transport: no Listener")
	case cfg.Deliver == nil:
		return nil, errors.New("transport: no Deliver function")
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "transport", "local_id", cfg.LocalID)
	if cfg.writeTimeout == 0 {
		cfg.writeTimeout = defaultWriteTimeout
	}
	t := &Transport{
		cfg:     cfg,
		log:     log,
		rep:     newReporter(cfg.Unreachable, cfg.SnapshotDone),
		peers:   make(map[uint64]*peer),
		inbound: make(map[net.Conn]struct{}),
	}
	t.recv = &receiver{clusterID: cfg.ClusterID, localID: cfg.LocalID, deliver: cfg.Deliver, authorize: cfg.AuthorizePeer, peerAddr: cfg.PeerClientAddr, log: log}
	t.wg.Add(1)
	go t.accept()
	return t, nil
}

// accept serves each incoming connection on a goroutine of its own until
// the Listener is closed. Any other failure to accept (out of descriptors,
// say) is logged and retried after a pause: 5 ms, doubling to 1 s.
func (t *Transport) accept() {
	defer t.wg.Done()
	pause := time.Duration(0)
	for {
		c, err := t.cfg.Listener.Accept()
		if err != nil {
			t.mu.RLock()
			closed := t.closed
			t.mu.RUnlock()
			if closed || errors.Is(err, net.ErrClosed) {
				if !closed {
					t.log.Error("raft port stopped serving: its listener was closed", "addr", t.cfg.Listener.Addr().String(), "err", err)
				}
				return
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			t.log.Warn("raft port could not accept a connection; retrying", "addr", t.cfg.Listener.Addr().String(), "err", err, "retry_in", pause)
			time.Sleep(pause)
			continue
		}
		pause = 0
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetKeepAlivePeriod(keepaliveTime)
		}
		conn := c // what serve speaks on: c itself, or TLS over it
		if t.cfg.ServerTLS != nil {
			// The handshake is serve's, under the set-up deadline.
			conn = &tlsConn{Conn: tls.Server(c, t.cfg.ServerTLS), raw: c}
		}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			c.Close()
			return
		}
		t.inbound[c] = struct{}{} // the TCP connection: closing it never blocks
		t.wg.Add(1)
		t.mu.Unlock()
		go func() {
			defer t.wg.Done()
			t.recv.serve(conn)
			t.mu.Lock()
			delete(t.inbound, c)
			t.mu.Unlock()
		}()
	}
}

// Addr is the address the transport serves on (its Listener's).
func (t *Transport) Addr() string { return t.cfg.Listener.Addr().String() }

// SetPeer adds peer id at raft address addr, or moves it there. Moving a
// peer drops what was queued for it and ends its streams (an unfinished
// snapshot reports SnapshotDone(id, false)). Setting a peer to the address it
// has changes nothing. The local id and 0 are ignored.
func (t *Transport) SetPeer(id uint64, addr string) {
	if id == 0 || id == t.cfg.LocalID {
		t.log.Warn("SetPeer ignored: not a peer id", "peer", id, "addr", addr)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	old := t.peers[id]
	if old != nil && old.addr == addr {
		return
	}
	if old != nil {
		delete(t.peers, id)
		old.stop()
	}
	p, err := t.newPeer(id, addr)
	if err != nil {
		t.log.Error("peer not added: bad address", "peer", id, "addr", addr, "err", err)
		return
	}
	t.peers[id] = p
	t.wg.Add(1)
	go p.run()
	t.log.Debug("peer set", "peer", id, "addr", addr)
}

// RemovePeer forgets peer id: what was queued for it is dropped and its
// streams end (an unfinished snapshot reports SnapshotDone(id, false)).
// Messages to it are then dropped as to any unknown peer.
func (t *Transport) RemovePeer(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.peers[id]; p != nil {
		delete(t.peers, id)
		p.stop()
		t.log.Debug("peer removed", "peer", id)
	}
}

// Send hands messages to their peers' queues and returns at once: it never
// waits for the network. It keeps no message but a MsgSnap (whose snapshot
// data it reads while streaming it, so the caller must not change it), and
// so the caller may reuse the others. A message that cannot be queued is
// dropped and reported through Unreachable: a message to an unknown peer, to
// a peer whose queue is full or whose stream failed moments ago (it is
// waiting to reconnect), or one too large for the wire. A MsgSnap goes on a
// stream of its own, one at a time per peer, and always ends in a
// SnapshotDone call; a MsgSnap while another to the same peer is unfinished
// is dropped (SnapshotDone false). After Close, Send drops everything
// silently.
func (t *Transport) Send(msgs []*raftpb.Message) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return
	}
	var out []peerMsgs // per peer, in Send order: few peers, so a slice
	for _, m := range msgs {
		if m == nil {
			continue
		}
		to := m.GetTo()
		p := t.peers[to]
		if p == nil {
			t.log.Debug("message to unknown peer dropped", "peer", to, "type", m.GetType().String())
			t.rep.unreachable(to)
			if m.GetType() == raftpb.MsgSnap {
				t.rep.snapshotDone(to, false)
			}
			continue
		}
		if m.GetType() == raftpb.MsgSnap {
			p.sendSnapshot(m)
			continue
		}
		b, err := proto.Marshal(m)
		if err != nil {
			t.log.Error("message dropped: cannot marshal it", "peer", to, "type", m.GetType().String(), "err", err)
			t.rep.unreachable(to)
			continue
		}
		if len(b) > maxMsgBytes {
			t.log.Error("message dropped: larger than the transport's limit", "peer", to,
				"type", m.GetType().String(), "bytes", len(b), "limit", maxMsgBytes)
			t.rep.unreachable(to)
			continue
		}
		i := slices.IndexFunc(out, func(o peerMsgs) bool { return o.p == p })
		if i < 0 {
			i = len(out)
			out = append(out, peerMsgs{p: p})
		}
		out[i].msgs = append(out[i].msgs, b)
	}
	for _, o := range out {
		if o.p.send(o.msgs) > 0 {
			t.rep.unreachable(o.p.id)
		}
	}
}

// peerMsgs is one peer's marshaled messages of a Send.
type peerMsgs struct {
	p    *peer
	msgs [][]byte
}

// Close stops the transport: it ends every stream, stops the server (closing
// the Listener) and waits for all of the transport's goroutines, including
// Deliver calls under way; so a Deliver that blocks makes Close wait. No
// callback is called after Close returns. Close is idempotent.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	peers := t.peers
	t.peers = nil
	t.mu.Unlock()

	for _, p := range peers {
		p.stop()
	}
	t.cfg.Listener.Close()
	t.mu.Lock()
	for c := range t.inbound {
		c.Close() // ends its handler's read; a Deliver under way is waited for below
	}
	t.mu.Unlock()
	t.wg.Wait()
	t.rep.stop()
	return nil
}

// newPeer makes peer id at addr (which dials nothing until there is
// something to send).
func (t *Transport) newPeer(id uint64, addr string) (*peer, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &peer{
		t:      t,
		id:     id,
		addr:   addr,
		log:    t.log.With("peer", id, "addr", addr),
		ctx:    ctx,
		cancel: cancel,
		wake:   make(chan struct{}, 1),
	}, nil
}

// reporter calls Unreachable and SnapshotDone from a goroutine of its own,
// so that neither is ever called from Send (the node's raft loop), and so
// that a slow callback never holds up a sender.
type reporter struct {
	onUnreachable  func(uint64)
	onSnapshotDone func(uint64, bool)

	mu      sync.Mutex
	ids     map[uint64]struct{} // pending Unreachable calls (coalesced)
	snaps   []snapResult        // pending SnapshotDone calls, in order
	stopped bool

	wake chan struct{}
	quit chan struct{}
	done chan struct{}
}

type snapResult struct {
	id uint64
	ok bool
}

func newReporter(unreachable func(uint64), snapshotDone func(uint64, bool)) *reporter {
	r := &reporter{
		onUnreachable:  unreachable,
		onSnapshotDone: snapshotDone,
		ids:            make(map[uint64]struct{}),
		wake:           make(chan struct{}, 1),
		quit:           make(chan struct{}),
		done:           make(chan struct{}),
	}
	go r.run()
	return r
}

func (r *reporter) unreachable(id uint64) {
	if r.onUnreachable == nil {
		return
	}
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.ids[id] = struct{}{}
	r.mu.Unlock()
	r.signal()
}

func (r *reporter) snapshotDone(id uint64, ok bool) {
	if r.onSnapshotDone == nil {
		return
	}
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.snaps = append(r.snaps, snapResult{id, ok})
	r.mu.Unlock()
	r.signal()
}

func (r *reporter) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *reporter) run() {
	defer close(r.done)
	for {
		select {
		case <-r.quit:
			return
		case <-r.wake:
		}
		r.mu.Lock()
		var ids map[uint64]struct{}
		if len(r.ids) > 0 {
			ids, r.ids = r.ids, make(map[uint64]struct{})
		}
		snaps := r.snaps
		r.snaps = nil
		r.mu.Unlock()
		for id := range ids {
			r.onUnreachable(id)
		}
		for _, s := range snaps {
			r.onSnapshotDone(s.id, s.ok)
		}
	}
}

// stop ends the reporter, dropping what it has not reported yet, and waits
// for a callback under way.
func (r *reporter) stop() {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	close(r.quit)
	<-r.done
}

package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/fencehq/fence/internal/transport/transportpb"
)

// peer is one remote node: its send queue and the goroutine (run) that
// drains the queue into the peer's message stream. While the stream is open
// and idle (nothing queued, nothing being written), Send writes on its
// caller's goroutine instead (stream.tryWrite), so that a lone message costs
// no hand-off to run.
type peer struct {
	t    *Transport
	id   uint64
	addr string
	log  *slog.Logger

	ctx    context.Context // ends when the peer is removed or the transport closes
	cancel context.CancelFunc
	wake   chan struct{} // cap 1: the queue has something

	mu         sync.Mutex
	queue      [][]byte // marshaled messages, in Send order
	queueBytes int
	s          *stream // the open message stream, set by run (nil: none)
	down       bool    // the last stream failed and run waits to retry: drop
	snapBusy   bool    // a MsgSnap is being streamed

	// inline counts the messages send wrote on its caller's goroutine (or
	// left to run after a partial write), for tests.
	inline atomic.Uint64

	lastErr string         // run's last logged failure ("" while healthy)
	wg      sync.WaitGroup // the stream watcher and the snapshot senders
}

// stop makes the peer's goroutines end.
func (p *peer) stop() { p.cancel() }

// send writes msgs (marshaled, in Send order) on the open stream at once
// if it is idle, without blocking, or else queues them for run; it returns
// how many it dropped (enqueue).
func (p *peer) send(msgs [][]byte) (dropped int) {
	p.mu.Lock()
	if s := p.s; s != nil && !p.down && len(p.queue) == 0 && s.raw != nil && s.wmu.TryLock() {
		if len(s.pending) == 0 {
			// Nothing queued, left over or being written: nothing sent
			// earlier can reach the socket after msgs, since run takes the
			// queue only once it holds wmu.
			p.mu.Unlock()
			p.inline.Add(uint64(len(msgs)))
			if !s.tryWrite(msgs) {
				p.signal() // run writes the rest
			}
			return 0
		}
		s.wmu.Unlock()
	}
	defer p.mu.Unlock()
	for i, b := range msgs {
		if !p.enqueueLocked(b) {
			return len(msgs) - i
		}
	}
	return 0
}

// enqueueLocked appends a marshaled message to the queue unless the queue
// is full or the peer's stream has just failed; it reports whether it did.
// p.mu is held.
func (p *peer) enqueueLocked(b []byte) bool {
	switch {
	case p.down:
		return false
	case len(p.queue) >= maxQueueMsgs,
		len(p.queue) > 0 && p.queueBytes+len(b) > maxQueueBytes:
		p.log.Debug("message dropped: send queue full", "queued", len(p.queue))
		return false
	}
	p.queue = append(p.queue, b)
	p.queueBytes += len(b)
	p.signal()
	return true
}

// signal wakes run.
func (p *peer) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// setStream records the open stream (nil: none) for send.
func (p *peer) setStream(s *stream) {
	p.mu.Lock()
	p.s = s
	p.mu.Unlock()
}

// take empties the queue and returns what it held.
func (p *peer) take() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.queue
	p.queue, p.queueBytes = nil, 0
	return q
}

// run sends the queue's messages on the peer's stream, opening it when there
// is something to send and none is open, until the peer stops.
func (p *peer) run() {
	defer p.t.wg.Done()
	var s *stream
	defer func() {
		if s != nil {
			p.setStream(nil)
			s.close()
		}
		p.wg.Wait()
	}()
	bo := minBackoff
	for {
		var broken <-chan struct{}
		if s != nil {
			broken = s.broken
		}
		select {
		case <-p.ctx.Done():
			return
		case <-broken:
			err := s.err
			p.setStream(nil)
			s = nil
			if !p.failed(err, &bo) {
				return
			}
			continue
		case <-p.wake:
		}
		if s == nil {
			if !p.queued() {
				continue
			}
			var err error
			if s, err = p.open(); err != nil {
				if !p.failed(fmt.Errorf("opening the raft stream: %w", err), &bo) {
					return
				}
				continue
			}
			bo = minBackoff
			p.setStream(s)
		}
		if err := s.flush(); err != nil {
			p.setStream(nil)
			s = nil
			if !p.failed(err, &bo) {
				return
			}
		}
	}
}

// queued reports whether messages wait in the queue.
func (p *peer) queued() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue) > 0
}

// failed handles the loss of the stream (or the failure to open one): it
// drops the queue, reports the peer unreachable, logs, and waits out the
// backoff (*bo, which it then doubles) during which Send drops messages to
// the peer. It returns false, silently, if the peer was stopped.
func (p *peer) failed(err error, bo *time.Duration) bool {
	if p.ctx.Err() != nil {
		return false
	}
	p.mu.Lock()
	dropped := len(p.queue)
	p.queue, p.queueBytes = nil, 0
	p.down = true
	p.mu.Unlock()
	p.t.rep.unreachable(p.id)

	wait := *bo/2 + rand.N(*bo/2+1)
	*bo = min(*bo*2, maxBackoff)
	if msg := err.Error(); msg != p.lastErr {
		p.lastErr = msg
		p.log.Warn("raft stream to peer failed; its messages are dropped until it reconnects",
			"err", err, "dropped", dropped, "retry_in", wait)
	} else {
		p.log.Debug("raft stream to peer failed again", "err", err, "dropped", dropped, "retry_in", wait)
	}

	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-p.ctx.Done():
		return false
	case <-timer.C:
	}
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
	return true
}

// dial connects to the peer (with Config.ClientTLS, doing the TLS
// handshake) and sends the preface for a stream of kind. The connection
// closes when the peer stops.
func (p *peer) dial(kind byte) (net.Conn, *bufio.Reader, *bufio.Writer, error) {
	d := net.Dialer{Timeout: handshakeTimeout, KeepAlive: keepaliveTime}
	raw, err := d.DialContext(p.ctx, "tcp", p.addr)
	if err != nil {
		return nil, nil, nil, err
	}
	conn := raw
	if p.t.cfg.ClientTLS != nil {
		tc, err := p.clientTLS(raw)
		if err != nil {
			raw.Close()
			return nil, nil, nil, err
		}
		conn = tc // whose Close closes raw
	}
	// The hook closes the TCP connection, under TLS too: that ends a read
	// or write under way at once.
	c := &closeConn{Conn: conn, stop: context.AfterFunc(p.ctx, func() { raw.Close() })}
	bw := bufio.NewWriterSize(deadlineConn{c, p.t.cfg.writeTimeout}, writeBufBytes)
	_, _ = bw.WriteString(preface)
	_ = bw.WriteByte(kind)
	return c, bufio.NewReader(c), bw, nil
}

// closeConn is a connection that also drops the hook closing it when its
// peer stops. Under it is the TCP connection or a *tlsConn over it.
type closeConn struct {
	net.Conn
	stop func() bool
}

func (c *closeConn) Close() error {
	c.stop()
	return c.Conn.Close()
}

// open opens a message stream to the peer and waits for the peer to accept
// its handshake Batch.
func (p *peer) open() (*stream, error) {
	c, br, bw, err := p.dial(kindMessages)
	if err != nil {
		return nil, err
	}
	hello := &transportpb.Batch{ClusterId: p.t.cfg.ClusterID, From: p.t.cfg.LocalID, To: p.id, ClientAddr: p.t.cfg.ClientAddr}
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	err = writeFrame(bw, hello)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = readAnswer(br)
	}
	if err != nil {
		c.Close()
		switch {
		case errors.Is(err, io.EOF):
			err = errors.New("the peer ended the stream without accepting it")
		case errors.Is(err, os.ErrDeadlineExceeded):
			err = fmt.Errorf("the peer did not accept the stream within %v", handshakeTimeout)
		default:
			err = explainTLSRefusal(err)
		}
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	s := &stream{p: p, c: c, br: br, bw: bw, broken: make(chan struct{})}
	if tc, ok := c.(*closeConn).Conn.(*net.TCPConn); ok {
		s.raw, _ = tc.SyscallConn() // (nil on error: run writes everything)
	}
	p.wg.Add(1)
	go s.watch()
	if p.lastErr != "" {
		p.log.Info("raft stream to peer restored")
		p.lastErr = ""
	} else {
		p.log.Debug("raft stream to peer open")
	}
	return s, nil
}

// stream is an open message stream. run sends on it, and so does send
// while it is idle; watch waits for its end.
type stream struct {
	p      *peer
	c      net.Conn
	raw    syscall.RawConn // the TCP socket, for send's writes that never block (nil under TLS)
	br     *bufio.Reader
	bw     *bufio.Writer
	broken chan struct{} // closed by watch when the stream has ended
	err    error         // why; set before broken is closed

	// wmu is held by whoever writes to the connection: run (flush) or a
	// send on its caller's goroutine (tryWrite).
	wmu sync.Mutex
	// pending is what a tryWrite left unwritten (the socket took only part,
	// or failed): flush writes it before anything else. Guarded by wmu.
	pending []byte
}

// watch waits for the peer to end the stream (it only does so to refuse
// something, with an answer saying why, or when it goes away), so that run
// learns of it even while it has nothing to send.
func (s *stream) watch() {
	defer s.p.wg.Done()
	err := readAnswer(s.br)
	if err == nil || errors.Is(err, io.EOF) {
		err = errors.New("the peer ended the stream")
	}
	s.err = err
	close(s.broken)
	s.c.Close()
}

// flush writes what a tryWrite left and the queue's messages (a write that
// makes no progress for the write timeout fails: deadlineConn). It takes
// the queue only once it holds wmu, so that a tryWrite never overtakes
// messages queued before it. On error the stream is closed and the error
// is the best account of why.
func (s *stream) flush() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	msgs := s.p.take()
	if len(msgs) == 0 && len(s.pending) == 0 {
		return nil
	}
	b, err := s.frames(s.pending, msgs)
	s.pending = nil
	if err == nil {
		_, err = s.bw.Write(b)
	}
	if err == nil {
		err = s.bw.Flush()
	}
	if err != nil {
		return s.fail(err)
	}
	// The deadline deadlineConn set must not outlive these writes: once
	// passed, it would fail tryWrite's next write before it tried.
	_ = s.c.SetWriteDeadline(time.Time{})
	return nil
}

// tryWrite writes msgs to the socket with one non-blocking write on the
// caller's goroutine; whatever the socket does not take (it is full, or
// failed) is left in pending for flush, and tryWrite reports false. The
// caller holds wmu, which tryWrite releases.
func (s *stream) tryWrite(msgs [][]byte) bool {
	defer s.wmu.Unlock()
	b, err := s.frames(nil, msgs)
	if err != nil { // not reached: Send checked each message's size
		s.p.log.Error("messages dropped: cannot frame them", "err", err)
		return true
	}
	n := 0
	if werr := s.raw.Write(func(fd uintptr) bool {
		n, err = syscall.Write(int(fd), b)
		return true // one try: never wait for the socket
	}); werr != nil {
		err = werr
	}
	if n < 0 {
		n = 0
	}
	if err == nil && n == len(b) {
		return true
	}
	s.pending = b[n:] // flush writes it, or meets the error again and fails the stream
	return false
}

// frames appends to dst the frames of msgs: Batches of at most
// maxBatchBytes each (a larger message alone).
func (s *stream) frames(dst []byte, msgs [][]byte) ([]byte, error) {
	cfg := &s.p.t.cfg
	size := 0
	for _, m := range msgs {
		size += len(m) + 8 // with the field's tag and length
	}
	dst = slices.Grow(dst, size+64*(1+size/maxBatchBytes)) // and each frame's header and Batch fields
	for len(msgs) > 0 {
		n := batchLen(msgs)
		b := &transportpb.Batch{ClusterId: cfg.ClusterID, From: cfg.LocalID, To: s.p.id, Messages: msgs[:n]}
		var err error
		if dst, err = appendFrame(dst, b); err != nil {
			return nil, err
		}
		msgs = msgs[n:]
	}
	return dst, nil
}

// fail closes the stream after a write error and returns the best account
// of why: the peer's answer if it refused something.
func (s *stream) fail(err error) error {
	s.close()
	if s.err != nil && !errors.Is(s.err, io.EOF) && status.Code(s.err) != codes.Unknown {
		return s.err
	}
	return err
}

// batchLen is how many of msgs, from the first, go in the next Batch: as
// many as fit in maxBatchBytes, and at least one.
func batchLen(msgs [][]byte) int {
	n, size := 0, 0
	for n < len(msgs) && (n == 0 || size+len(msgs[n])+8 <= maxBatchBytes) {
		size += len(msgs[n]) + 8 // with the field's tag and length
		n++
	}
	return n
}

// close ends the stream and waits for watch.
func (s *stream) close() {
	s.c.Close()
	<-s.broken
}

// sendSnapshot starts streaming a MsgSnap, unless one to this peer is under
// way (then it is dropped and reported failed).
func (p *peer) sendSnapshot(m *raftpb.Message) {
	p.mu.Lock()
	if p.snapBusy {
		p.mu.Unlock()
		p.log.Warn("snapshot dropped: another one to this peer is under way",
			"index", m.GetSnapshot().GetMetadata().GetIndex())
		p.t.rep.snapshotDone(p.id, false)
		return
	}
	p.snapBusy = true
	p.mu.Unlock()
	p.wg.Add(1) // before stop (Send holds t.mu), so before run's Wait
	go p.runSnapshot(m)
}

// runSnapshot streams m and reports the outcome.
func (p *peer) runSnapshot(m *raftpb.Message) {
	defer p.wg.Done()
	meta := m.GetSnapshot().GetMetadata()
	size := len(m.GetSnapshot().GetData())
	start := time.Now()
	err := p.streamSnapshot(m)
	p.mu.Lock()
	p.snapBusy = false
	p.mu.Unlock()
	if err != nil {
		if p.ctx.Err() == nil {
			p.log.Warn("sending a snapshot failed", "index", meta.GetIndex(), "term", meta.GetTerm(), "bytes", size, "err", err)
		}
		p.t.rep.unreachable(p.id)
		p.t.rep.snapshotDone(p.id, false)
		return
	}
	p.log.Info("snapshot sent", "index", meta.GetIndex(), "term", meta.GetTerm(), "bytes", size, "took", time.Since(start))
	p.t.rep.snapshotDone(p.id, true)
}

// streamSnapshot sends m on a snapshot connection: the message without its
// data, then the data in chunks and an empty frame; it returns nil once the
// peer has taken it.
func (p *peer) streamSnapshot(m *raftpb.Message) error {
	hb, err := proto.Marshal(withoutSnapshotData(m))
	if err != nil {
		return fmt.Errorf("marshaling the snapshot message: %w", err)
	}
	data := m.GetSnapshot().GetData()
	c, br, bw, err := p.dial(kindSnapshot)
	if err != nil {
		return err
	}
	defer c.Close()
	// The peer answers early only to refuse: read that while sending.
	answer := make(chan error, 1)
	go func() { answer <- readAnswer(br) }()
	cfg := &p.t.cfg
	chunk := &transportpb.SnapshotChunk{
		ClusterId: cfg.ClusterID, From: cfg.LocalID, To: p.id,
		Message: hb, DataSize: uint64(len(data)),
	}
	for err == nil {
		if err = writeFrame(bw, chunk); err != nil || len(data) == 0 {
			break
		}
		n := min(len(data), snapChunkBytes)
		chunk = &transportpb.SnapshotChunk{Data: data[:n]}
		data = data[n:]
	}
	if err == nil {
		if err = writeFrameBytes(bw, nil); err == nil {
			err = bw.Flush()
		}
	}
	if err != nil { // the peer's answer, if it refused, says more
		c.Close()
		if a := <-answer; a != nil && !errors.Is(a, io.EOF) && !errors.Is(a, net.ErrClosed) {
			return explainTLSRefusal(a)
		}
		return err
	}
	if err := <-answer; err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("the peer ended the snapshot stream without taking it")
		}
		return explainTLSRefusal(err)
	}
	return nil
}

// withoutSnapshotData is a shallow copy of m whose snapshot has its metadata
// but no data (copying the data would double a large snapshot in memory).
func withoutSnapshotData(m *raftpb.Message) *raftpb.Message {
	h := new(raftpb.Message)
	hr := h.ProtoReflect()
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		hr.Set(fd, v)
		return true
	})
	if s := m.GetSnapshot(); s != nil {
		h.Snapshot = &raftpb.Snapshot{Metadata: s.GetMetadata()}
	}
	return h
}

package peers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// ZKMaxLeases is the most live "leases" — sessions — a leases curve asks
// of ZooKeeper. A ZooKeeper session is one TCP connection that pings (its
// ephemeral nodes, and so its locks, live as long as it does), so each
// costs peerbench a socket and a goroutine and the ensemble a connection;
// 10,000 stays well inside the 20,000 open files a process gets here and
// the servers' 1 GB heaps, where 100,000 would not.
const ZKMaxLeases = 10_000

// MaxLeases is ZKMaxLeases: the leases curve measures ZooKeeper up to
// that many live sessions.
func (z *ZooKeeper) MaxLeases() int64 { return ZKMaxLeases }

// zkHeld are the sessions LeaseCreator opened: they live until Stop,
// pinged every third of their timeout by one goroutine.
type zkHeld struct {
	mu     sync.Mutex
	conns  []net.Conn
	every  time.Duration // a third of the shortest session timeout
	stop   chan struct{}
	pinger sync.WaitGroup
}

// LeaseCreator gives worker w a way to open sessions on server w mod 3,
// each on its own connection: the connect handshake creates the session
// (createSession is a transaction: quorum-written and fsynced, as a
// lease grant is for the others). ZooKeeper caps a session's timeout at
// 20 ticks (40 s here), whatever ttl asks, so the sessions are kept
// alive by pings until Stop; closeFn leaves them open.
func (z *ZooKeeper) LeaseCreator(_ context.Context, w int, ttl time.Duration) (func(context.Context) error, func(), error) {
	addr := z.Servers[w%len(z.Servers)]
	create := func(ctx context.Context) error {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		if deadline, ok := ctx.Deadline(); ok {
			_ = conn.SetDeadline(deadline)
		}
		s := &zkPinger{conn: conn, rd: bufio.NewReader(conn)}
		if _, err := conn.Write(zkConnectRequest(ttl)); err != nil {
			conn.Close()
			return err
		}
		body, err := s.read()
		if err != nil {
			conn.Close()
			return err
		}
		timeout, _, err := zkSession(body)
		if err != nil {
			conn.Close()
			return fmt.Errorf("zookeeper session: %w", err)
		}
		_ = conn.SetDeadline(time.Time{})
		go func() { _, _ = io.Copy(io.Discard, conn) }() // the pings' answers
		return z.held.add(conn, timeout/3)
	}
	return create, func() {}, nil
}

// add keeps conn's session alive until stop, pinged every third of its
// timeout.
func (h *zkHeld) add(conn net.Conn, every time.Duration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stop == nil {
		h.stop, h.every = make(chan struct{}), every
		h.pinger.Add(1)
		go h.ping()
	}
	select {
	case <-h.stop:
		conn.Close()
		return errors.New("zookeeper stopped")
	default:
	}
	h.every = min(h.every, every)
	h.conns = append(h.conns, conn)
	return nil
}

// ping pings every held session each period until stop.
func (h *zkHeld) ping() {
	defer h.pinger.Done()
	last := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-h.stop:
			return
		case now := <-tick.C:
			h.mu.Lock()
			due := now.Sub(last) >= h.every
			conns := h.conns
			h.mu.Unlock()
			if !due {
				continue
			}
			last = now
			for _, c := range conns {
				_ = c.SetWriteDeadline(now.Add(time.Second))
				_, _ = c.Write(zkPing) // a dead session shows in the locks, not here
			}
		}
	}
}

// close stops the pings and closes every held connection (the servers
// end the sessions after their timeout, or are stopped themselves).
func (h *zkHeld) close() {
	h.mu.Lock()
	if h.stop == nil {
		h.stop = make(chan struct{})
	}
	select {
	case <-h.stop:
	default:
		close(h.stop)
	}
	conns := h.conns
	h.conns = nil
	h.mu.Unlock()
	h.pinger.Wait()
	for _, c := range conns {
		c.Close()
	}
}

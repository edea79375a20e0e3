package transport

// Red team (gRPC → raw TCP transport). Each TestRedTeamTCP... test below
// was written against the first version of the TCP transport and failed on
// it for the reason its comment gives; each is fixed since and stays as a
// regression test.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// FINDING: a connection that has proven nothing makes the receiver allocate
// a 64 MiB buffer with 4 bytes.
//
// serve reads the preface and then, still before any id was checked, the
// handshake frame through readFrame, which does make([]byte, n) for any
// announced n up to maxFrameBytes before a single byte of the body has
// arrived. The connection may then sit silent until handshakeTimeout (10 s)
// and the buffer stays allocated all that while. Anyone who can reach the
// raft port makes the node hold 64 MiB per 13-byte connection (no cluster
// id, no node id needed): a few hundred connections a second exhaust the
// memory of any machine. (After the handshake the read deadline is gone
// altogether, so a peer that knows the ids can park 64 MiB per connection
// for good.) The snapshot path already refuses to preallocate on a peer's
// word (snapPrealloc); readFrame does not.
func TestRedTeamTCPPreHandshakeFrameHeaderAllocates64MiB(t *testing.T) {
	b := newNode(t, 7, 2, "")
	const conns = 3
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	for range conns {
		c := dialRaw(t, b.tr.Addr(), kindMessages)
		var hdr [4]byte
		binary.BigEndian.PutUint32(hdr[:], maxFrameBytes) // the largest allowed: not refused
		_, _ = c.bw.Write(hdr[:])
		if err := c.bw.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// Give the handlers a moment to read the headers.
	var grew uint64
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if h := heap(); h > before {
			grew = h - before
		}
		if grew >= conns*maxFrameBytes {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	const allowed = 16 << 20
	if grew > allowed {
		t.Fatalf("%d unauthenticated connections that sent %d bytes each (preface, kind, a frame length) grew the receiver's heap by %d MiB (bound %d MiB): readFrame allocates the announced length before the body arrives",
			conns, len(preface)+1+4, grew>>20, allowed>>20)
	}
}

// tempErrListener passes its first Accept through, then fails one Accept
// with EMFILE (what accept(2) returns when the process is out of file
// descriptors, a temporary condition), then works again.
type tempErrListener struct {
	net.Listener
	calls atomic.Int32
}

func (l *tempErrListener) Accept() (net.Conn, error) {
	if l.calls.Add(1) == 2 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// FINDING: one transient Accept error stops the raft port for good.
//
// Transport.accept returns on any Accept error, logging "raft port stopped
// serving", whether or not the transport is closing. accept(2) fails
// transiently (EMFILE/ENFILE when descriptors run out, ENOBUFS, ENOMEM;
// net.Error.Temporary() is true for them); gRPC's Server.Serve, which this
// replaces, backs off (5 ms doubling to 1 s) and retries on such errors,
// as net/http does. Here the node keeps running with its sending side
// healthy but never accepts another connection: once its current inbound
// streams break it hears nothing from anyone, forever (until restarted).
// Combined with the finding above (each silent pre-handshake connection
// holds a descriptor for 10 s), a connection flood turns into a permanent
// outage of the node even after the flood ends.
func TestRedTeamTCPTransientAcceptErrorStopsServingForever(t *testing.T) {
	b := newNode(t, 7, 2, "", func(c *Config) { c.Listener = &tempErrListener{Listener: c.Listener} })
	a := newNode(t, 7, 1, "")
	connect(a, b)
	a.tr.Send([]*raftpb.Message{appMsg(1, 2, 1, 1)})
	waitFor(t, "the first message", func() bool { return b.numDelivered() == 1 })
	// The next Accept has failed once by now (or will as soon as a dial
	// arrives). A new peer connects after the transient error is over.
	c := newNode(t, 7, 3, "")
	c.tr.SetPeer(2, b.tr.Addr())
	deadline := time.Now().Add(3 * time.Second)
	for seq := uint64(1); time.Now().Before(deadline) && b.numDelivered() < 2; seq++ {
		c.tr.Send([]*raftpb.Message{appMsg(3, 2, seq, 1)})
		time.Sleep(20 * time.Millisecond)
	}
	if b.numDelivered() < 2 {
		stopped := b.logs.contains("raft port stopped serving")
		t.Fatalf("after one transient EMFILE from Accept, node 2 accepted no connection for 3 s (logged \"raft port stopped serving\": %v); node 3 reported it unreachable %d times",
			stopped, c.unreachable(2))
	}
}

// FINDING: stream.send gives a whole send a single 10 s deadline, so a peer
// that reads steadily but slower than (what was queued)/10 s is cut off
// forever.
//
// send's comment promises that "a write that makes no progress for
// writeTimeout" fails; it sets the write deadline once, before writing
// everything run took from the queue (up to maxQueueBytes, 64 MiB), and
// never moves it while the bytes flow. A follower catching up over a link
// slower than about 6.4 MB/s (a 50 Mbit/s WAN link) gets a full queue of
// 1 MiB MsgApps, the stream is reset after 10 s mid-transfer, the queue is
// dropped and reported unreachable, and raft's next burst fails the same
// way. gRPC had no such total deadline. Here the peer reads 1.6 MiB/s
// without pause and 16 MiB are sent with a 2 s write timeout: the stream
// broke after 2 s.
func TestRedTeamTCPSteadySlowPeerCutOffByTotalWriteDeadline(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	var received atomic.Int64
	accepted := make(chan struct{})
	ended := make(chan error, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	var conn atomic.Pointer[net.Conn]
	defer func() { // before wg.Wait: ends the reader
		if c := conn.Load(); c != nil {
			(*c).Close()
		}
	}()
	wg.Go(func() {
		c, err := lis.Accept()
		if err != nil {
			ended <- err
			return
		}
		conn.Store(&c)
		defer c.Close()
		_ = c.(*net.TCPConn).SetReadBuffer(64 << 10)
		br, bw := bufio.NewReaderSize(c, 64<<10), bufio.NewWriter(c)
		head := make([]byte, len(preface)+1)
		if _, err := io.ReadFull(br, head); err != nil {
			ended <- err
			return
		}
		if _, err := readFrame(br, maxFrameBytes); err != nil { // the handshake
			ended <- err
			return
		}
		_ = writeAnswer(bw, nil)
		close(accepted)
		_ = c.SetReadDeadline(time.Now().Add(failSafe))
		for {
			_, err := io.CopyN(counter{&received}, br, 160<<10) // 160 KiB every 50 ms: 3.2 MiB/s

			if err != nil {
				ended <- err
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	// A 2 s write timeout (10 s in production) keeps the test short: 16 MiB
	// at 3.2 MiB/s take 5 s, well past the timeout and what the socket
	// buffers hold (a blocked write wakes once half of a 4 MiB send buffer
	// has drained: 0.6 s at this pace).
	a := newNode(t, 7, 1, "", func(c *Config) { c.writeTimeout = 2 * time.Second })
	a.tr.SetPeer(2, lis.Addr().String())
	a.tr.Send([]*raftpb.Message{appMsg(1, 2, 1, 1)}) // opens the stream
	select {
	case <-accepted:
	case err := <-ended:
		t.Fatalf("the test's receiver failed before accepting: %v", err)
	case <-time.After(failSafe):
		t.Fatal("the stream never opened")
	}
	time.Sleep(100 * time.Millisecond)
	const n, size = 16, 1 << 20
	msgs := make([]*raftpb.Message, n)
	for i := range msgs {
		msgs[i] = appMsg(1, 2, uint64(2+i), size)
	}
	start := time.Now()
	a.tr.Send(msgs)
	const want = n * size
	for received.Load() < want {
		select {
		case err := <-ended:
			if received.Load() >= want {
				return
			}
			var ne net.Error
			timeout := errors.As(err, &ne) && ne.Timeout()
			t.Fatalf("the sender cut the stream after %v with %d of %d MiB delivered at a steady 3.2 MiB/s (receiver: %v, its own read timeout: %v; sender reported node 2 unreachable %d times): the write deadline covers the whole send, not progress",
				time.Since(start).Round(100*time.Millisecond), received.Load()>>20, want>>20, err, timeout, a.unreachable(2))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// FINDING: before any id is checked, the receiver decodes the first frame
// whole, and a Batch of empty messages costs about 60 times its size in
// allocations (a slice header per 2-byte element, append's regrowth, the
// decoder's own work).
//
// receiveMessages calls proto.Unmarshal on the handshake frame before
// decodeBatch looks at its ids. The handshake Batch a fence sender writes
// is about 30 bytes and carries no messages, yet the receiver takes any
// frame up to 64 MiB there: one frame of 64 MiB of 0x22 0x00 (field 4,
// empty) from an unauthenticated connection makes it allocate gigabytes
// before it refuses the connection for its cluster id (measured: 243 MiB
// for a 4 MiB frame). The gRPC receiver had the same order of checks, but
// the new wire makes the fix cheap: the first frame is the handshake and
// need never exceed a few dozen bytes.
func TestRedTeamTCPHandshakeFrameDecodeAmplification(t *testing.T) {
	b := newNode(t, 7, 2, "")
	const frame = 4 << 20
	body := make([]byte, frame)
	for i := 0; i < frame; i += 2 {
		body[i] = 0x22 // messages (field 4), length-delimited
	}
	c := dialRaw(t, b.tr.Addr(), kindMessages)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], frame)
	_, _ = c.bw.Write(hdr[:])
	_, _ = c.bw.Write(body)
	err := c.finish()
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("refusal: %v", err)
	if allocated > 3*frame {
		t.Fatalf("one unauthenticated %d MiB handshake frame made the process allocate %d MiB (%.0fx) before the receiver refused it (%v): the first frame of a stream is decoded whole before its ids are checked, and may be as large as any frame",
			frame>>20, allocated>>20, float64(allocated)/frame, err)
	}
}

// counter counts the bytes written to it.
type counter struct{ n *atomic.Int64 }

func (c counter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return len(p), nil
}

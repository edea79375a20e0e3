package transport

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/internal/transport/transportpb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// failSafe bounds every wait on a condition. It is no performance bound: the
// conditions hold within milliseconds on a healthy run; it only keeps a broken
// run from hanging.
const failSafe = 20 * time.Second

// waitFor polls cond until it holds, failing the test after failSafe.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(failSafe)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting (fail-safe %v) for %s", failSafe, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// logBuf collects a transport's log for the test to search.
type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuf) contains(s string) bool { return strings.Contains(l.String(), s) }

// node is a Transport under test with recorders on its callbacks.
type node struct {
	t    testing.TB
	id   uint64
	tr   *Transport
	logs *logBuf

	mu sync.Mutex
	// hook, if set, runs inside Deliver before the message is recorded (a
	// test stalls the receiver with it).
	hook    func(m *raftpb.Message)
	got     []*raftpb.Message
	unreach map[uint64]int
	snaps   []snapResult
	closed  bool
}

type nodeOpt func(*Config)

// newNode starts a transport for node id of cluster on addr ("" for a free
// loopback port).
func newNode(t testing.TB, cluster, id uint64, addr string, opts ...nodeOpt) *node {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var lis net.Listener
	var err error
	// A port just freed by a closed transport can take a moment to be free
	// again; retry briefly.
	for range 100 {
		if lis, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, id: id, logs: &logBuf{}, unreach: make(map[uint64]int)}
	cfg := Config{
		ClusterID: cluster,
		LocalID:   id,
		Listener:  lis,
		Deliver: func(m *raftpb.Message) {
			n.mu.Lock()
			hook := n.hook
			n.mu.Unlock()
			if hook != nil {
				hook(m)
			}
			n.mu.Lock()
			n.got = append(n.got, m)
			n.mu.Unlock()
		},
		Unreachable: func(id uint64) {
			n.mu.Lock()
			n.unreach[id]++
			n.mu.Unlock()
		},
		SnapshotDone: func(id uint64, ok bool) {
			n.mu.Lock()
			n.snaps = append(n.snaps, snapResult{id, ok})
			n.mu.Unlock()
		},
		Log: slog.New(slog.NewTextHandler(n.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	for _, o := range opts {
		o(&cfg)
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.tr = tr
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log of node %d:\n%s", id, n.logs.String())
		}
		n.close()
	})
	return n
}

func (n *node) close() {
	n.mu.Lock()
	already := n.closed
	n.closed = true
	n.mu.Unlock()
	if !already {
		if err := n.tr.Close(); err != nil {
			n.t.Error(err)
		}
	}
}

// setHook makes Deliver call hook first.
func (n *node) setHook(hook func(m *raftpb.Message)) {
	n.mu.Lock()
	n.hook = hook
	n.mu.Unlock()
}

// releaser is a channel that a stalled Deliver waits on, closed by the test
// or, if the test stops early, by its cleanup (which Close would wait for).
func releaser(t testing.TB) (wait <-chan struct{}, release func()) {
	ch := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(release)
	return ch, release
}

func (n *node) delivered() []*raftpb.Message {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.got)
}

func (n *node) numDelivered() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.got)
}

func (n *node) unreachable(id uint64) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.unreach[id]
}

func (n *node) snapshotResults() []snapResult {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.snaps)
}

// connect makes every node a peer of every other.
func connect(nodes ...*node) {
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				a.tr.SetPeer(b.id, b.tr.Addr())
			}
		}
	}
}

// appMsg is a MsgApp from -> to whose Index is seq, with an entry of pad
// bytes.
func appMsg(from, to, seq uint64, pad int) *raftpb.Message {
	return &raftpb.Message{
		Type:    raftpb.MsgApp.Enum(),
		From:    new(from),
		To:      new(to),
		Term:    new(uint64(3)),
		Index:   new(seq),
		Commit:  new(seq / 2),
		Entries: []*raftpb.Entry{{Term: new(uint64(3)), Index: new(seq + 1), Data: bytes.Repeat([]byte{byte(seq)}, pad)}},
	}
}

// TestOrderedDelivery3Nodes: three transports send to each other at once;
// every node receives every peer's messages, whole and in the order sent.
func TestOrderedDelivery3Nodes(t *testing.T) {
	const perPeer = 3000 // under the queue bound: nothing may be dropped
	nodes := []*node{newNode(t, 7, 1, ""), newNode(t, 7, 2, ""), newNode(t, 7, 3, "")}
	connect(nodes...)
	var wg sync.WaitGroup
	for _, a := range nodes {
		wg.Go(func() {
			var seq uint64
			for seq < perPeer {
				// Calls of varying size, each with messages to both peers.
				var msgs []*raftpb.Message
				for range 1 + seq%37 {
					if seq == perPeer {
						break
					}
					seq++
					for _, b := range nodes {
						if b != a {
							msgs = append(msgs, appMsg(a.id, b.id, seq, int(seq%200)))
						}
					}
				}
				a.tr.Send(msgs)
			}
		})
	}
	wg.Wait()
	for _, b := range nodes {
		waitFor(t, fmt.Sprintf("node %d to receive everything", b.id), func() bool {
			return b.numDelivered() >= 2*perPeer
		})
	}
	for _, b := range nodes {
		got := b.delivered()
		if len(got) != 2*perPeer {
			t.Fatalf("node %d received %d messages, want %d", b.id, len(got), 2*perPeer)
		}
		next := map[uint64]uint64{}
		for _, m := range got {
			next[m.GetFrom()]++
			want := appMsg(m.GetFrom(), b.id, next[m.GetFrom()], int(next[m.GetFrom()]%200))
			if !proto.Equal(m, want) {
				t.Fatalf("node %d: message %d from node %d is %v, want %v", b.id, next[m.GetFrom()], m.GetFrom(), m, want)
			}
		}
		for _, a := range nodes {
			if a != b && next[a.id] != perPeer {
				t.Errorf("node %d got %d messages from node %d, want %d", b.id, next[a.id], a.id, perPeer)
			}
		}
	}
	for _, a := range nodes {
		for _, b := range nodes {
			if n := a.unreachable(b.id); n != 0 {
				t.Errorf("node %d reported node %d unreachable %d times", a.id, b.id, n)
			}
		}
	}
}

// TestClusterIDMismatchRefused: nodes of different clusters refuse each
// other in both directions; both sides log a message naming both cluster
// ids, the sender reports the peer unreachable, and nothing is delivered.
func TestClusterIDMismatchRefused(t *testing.T) {
	a := newNode(t, 7, 1, "")
	b := newNode(t, 9, 2, "")
	connect(a, b)
	a.tr.Send([]*raftpb.Message{appMsg(1, 2, 1, 10)})
	b.tr.Send([]*raftpb.Message{appMsg(2, 1, 1, 10)})

	aToB := "cluster id mismatch: node 1 sent cluster id 7, but node 2 is in cluster id 9"
	bToA := "cluster id mismatch: node 2 sent cluster id 9, but node 1 is in cluster id 7"
	for _, c := range []struct {
		n    *node
		text string
	}{{a, aToB}, {b, aToB}, {a, bToA}, {b, bToA}} {
		waitFor(t, fmt.Sprintf("node %d to log %q", c.n.id, c.text), func() bool { return c.n.logs.contains(c.text) })
	}
	// The sender's log carries the status code the receiver ended it with.
	for _, n := range []*node{a, b} {
		if !n.logs.contains("code = FailedPrecondition") {
			t.Errorf("node %d's log does not show FailedPrecondition:\n%s", n.id, n.logs)
		}
	}
	waitFor(t, "both to report the other unreachable", func() bool {
		return a.unreachable(2) > 0 && b.unreachable(1) > 0
	})

	// A client of the wrong cluster gets exactly that status.
	err := rawSend(t, b.tr.Addr(), &transportpb.Batch{ClusterId: 7, From: 1, To: 2})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), aToB) {
		t.Errorf("wrong-cluster stream ended with %v, want FailedPrecondition %q", err, aToB)
	}
	// Nor does a snapshot of the wrong cluster get through.
	a.tr.Send([]*raftpb.Message{snapMsg(1, 2, 1000)})
	waitFor(t, "the snapshot to fail", func() bool { return len(a.snapshotResults()) == 1 })
	if got := a.snapshotResults(); got[0] != (snapResult{2, false}) {
		t.Errorf("snapshot result %v, want {2 false}", got)
	}
	if n, m := a.numDelivered(), b.numDelivered(); n != 0 || m != 0 {
		t.Errorf("delivered %d and %d messages across clusters", n, m)
	}
}

// TestWrongNodeRefused: a peer address that points at another node is
// refused by that node, with a message naming both node ids.
func TestWrongNodeRefused(t *testing.T) {
	a := newNode(t, 7, 1, "")
	c := newNode(t, 7, 3, "")
	a.tr.SetPeer(2, c.tr.Addr()) // node 2's address is really node 3's
	a.tr.Send([]*raftpb.Message{appMsg(1, 2, 1, 10)})
	text := "wrong node: node 1 sent messages for node 2 to this address, which is node 3"
	for _, n := range []*node{a, c} {
		waitFor(t, fmt.Sprintf("node %d to log %q", n.id, text), func() bool { return n.logs.contains(text) })
	}
	waitFor(t, "node 2 to be reported unreachable", func() bool { return a.unreachable(2) > 0 })
	if n := c.numDelivered(); n != 0 {
		t.Errorf("node 3 delivered %d messages meant for node 2", n)
	}
}

// TestPeerRestartReconnects: a peer whose transport closes and comes back on
// the same address receives again, after the sender's backoff; meanwhile the
// sender reports it unreachable.
func TestPeerRestartReconnects(t *testing.T) {
	a := newNode(t, 7, 1, "")
	b := newNode(t, 7, 2, "")
	connect(a, b)
	a.tr.Send([]*raftpb.Message{appMsg(1, 2, 1, 10)})
	waitFor(t, "the first message", func() bool { return b.numDelivered() == 1 })

	addr := b.tr.Addr()
	b.close()
	waitFor(t, "node 2 reported unreachable after it closed", func() bool { return a.unreachable(2) > 0 })
	// While it is gone, messages are dropped, not delivered anywhere.
	for seq := uint64(2); seq < 10; seq++ {
		a.tr.Send([]*raftpb.Message{appMsg(1, 2, seq, 10)})
	}

	b2 := newNode(t, 7, 2, addr)
	// Raft resends; so does the test, until the new transport receives.
	seq := uint64(100)
	waitFor(t, "the restarted peer to receive", func() bool {
		seq++
		a.tr.Send([]*raftpb.Message{appMsg(1, 2, seq, 10)})
		time.Sleep(10 * time.Millisecond)
		return b2.numDelivered() > 0
	})
	got := b2.delivered()
	for i, m := range got {
		if m.GetIndex() <= 100 || (i > 0 && m.GetIndex() <= got[i-1].GetIndex()) {
			t.Fatalf("restarted peer received index %d at position %d (of %v)", m.GetIndex(), i, indexes(got))
		}
	}
	if !a.logs.contains("raft stream to peer restored") {
		t.Errorf("the sender did not log the reconnect:\n%s", a.logs)
	}
}

func indexes(msgs []*raftpb.Message) []uint64 {
	var out []uint64
	for _, m := range msgs {
		out = append(out, m.GetIndex())
	}
	return out
}

// TestQueueFullDropsAndNeverBlocks: with the receiver stalled inside
// Deliver, Send keeps returning; the peer's queue fills, messages are
// dropped and the peer is reported unreachable. What does arrive after the
// receiver resumes arrives in order.
func TestQueueFullDropsAndNeverBlocks(t *testing.T) {
	a := newNode(t, 7, 1, "")
	b := newNode(t, 7, 2, "")
	wait, release := releaser(t)
	var once sync.Once
	stalled := make(chan struct{})
	b.setHook(func(*raftpb.Message) {
		once.Do(func() { close(stalled) })
		<-wait
	})
	connect(a, b)

	// 40 MiB of 1 KiB messages: far past what the queue (4096), the
	// messages taken for sending (up to 2 batches of 4 MiB) and the
	// loopback socket buffers hold.
	const total = 40000
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for seq := uint64(1); seq <= total; seq += 100 {
			msgs := make([]*raftpb.Message, 0, 100)
			for i := range uint64(100) {
				msgs = append(msgs, appMsg(1, 2, seq+i, 1024))
			}
			a.tr.Send(msgs)
		}
	}()
	select {
	case <-sent:
	case <-time.After(failSafe):
		t.Fatal("Send blocked while the receiver was stalled")
	}
	<-stalled
	waitFor(t, "node 2 reported unreachable", func() bool { return a.unreachable(2) > 0 })
	if !a.logs.contains("send queue full") {
		t.Errorf("no queue-full drop logged:\n%s", a.logs)
	}
	release()

	// A marker sent after the flood arrives after everything that survived
	// it (one stream, in order); resend it until one gets through.
	marker := uint64(total + 1)
	waitFor(t, "a marker after the flood", func() bool {
		a.tr.Send([]*raftpb.Message{appMsg(1, 2, marker, 1)})
		marker++
		time.Sleep(5 * time.Millisecond)
		for _, m := range b.delivered() {
			if m.GetIndex() > total {
				return true
			}
		}
		return false
	})
	got := b.delivered()
	n := 0
	for i, m := range got {
		if i > 0 && m.GetIndex() <= got[i-1].GetIndex() {
			t.Fatalf("out of order: index %d after %d", m.GetIndex(), got[i-1].GetIndex())
		}
		if m.GetIndex() <= total {
			n++
		}
	}
	if n == 0 || n >= total {
		t.Errorf("%d of %d flood messages delivered; want some dropped and some delivered", n, total)
	}
	t.Logf("%d of %d messages delivered, the rest dropped", n, total)
}

// TestCloseWithStalledPeer: Close returns while its streams to a stalled
// receiver are blocked (in flow control, or waiting for the snapshot's
// answer), and leaves no goroutine behind.
func TestCloseWithStalledPeer(t *testing.T) {
	a := newNode(t, 7, 1, "")
	b := newNode(t, 7, 2, "")
	wait, release := releaser(t)
	b.setHook(func(*raftpb.Message) { <-wait })
	connect(a, b)
	for seq := uint64(1); seq <= 40000; seq++ { // see TestQueueFullDropsAndNeverBlocks
		a.tr.Send([]*raftpb.Message{appMsg(1, 2, seq, 1024)})
	}
	waitFor(t, "the queue to fill", func() bool { return a.unreachable(2) > 0 })
	a.tr.Send([]*raftpb.Message{snapMsg(1, 2, 8<<20)}) // its stream stalls too
	a.close()
	release()
	b.close()
	checkOwnGoroutinesGone(t)
	goleak.VerifyNone(t)
}

// snapMsg is a MsgSnap from -> to with size bytes of data.
func snapMsg(from, to uint64, size int) *raftpb.Message {
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i/4096)
	}
	return &raftpb.Message{
		Type: raftpb.MsgSnap.Enum(),
		From: new(from),
		To:   new(to),
		Term: new(uint64(5)),
		Snapshot: &raftpb.Snapshot{
			Data: data,
			Metadata: &raftpb.SnapshotMetadata{
				Index:     new(uint64(12345)),
				Term:      new(uint64(4)),
				ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}},
			},
		},
	}
}

// TestSnapshot20MiB: a 20 MiB snapshot arrives whole, in 1 MiB chunks after
// its header chunk, and SnapshotDone(id, true) is reported.
func TestSnapshot20MiB(t *testing.T) {
	a := newNode(t, 7, 1, "")
	b := newNode(t, 7, 2, "")
	connect(a, b)
	m := snapMsg(1, 2, 20<<20)
	a.tr.Send([]*raftpb.Message{m})
	waitFor(t, "the snapshot's outcome", func() bool { return len(a.snapshotResults()) > 0 })
	if got := a.snapshotResults(); !slices.Equal(got, []snapResult{{2, true}}) {
		t.Fatalf("snapshot results %v, want [{2 true}]", got)
	}
	got := b.delivered()
	if len(got) != 1 {
		t.Fatalf("%d messages delivered, want the snapshot", len(got))
	}
	if !proto.Equal(got[0], m) {
		t.Errorf("the snapshot arrived changed: %d bytes of data, metadata %v (sent %v)",
			len(got[0].GetSnapshot().GetData()), got[0].GetSnapshot().GetMetadata(), m.GetSnapshot().GetMetadata())
	}
	if n := a.unreachable(2); n != 0 {
		t.Errorf("node 2 reported unreachable %d times", n)
	}
}

// TestSnapshotFailureReportsFalse: a snapshot that cannot be delivered
// reports SnapshotDone(id, false): to a peer that is down, to an unknown
// peer, and one sent while another to the same peer is under way.
func TestSnapshotFailureReportsFalse(t *testing.T) {
	t.Run("peer down", func(t *testing.T) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := lis.Addr().String()
		lis.Close()
		a := newNode(t, 7, 1, "")
		a.tr.SetPeer(2, dead)
		a.tr.Send([]*raftpb.Message{snapMsg(1, 2, 3<<20)})
		waitFor(t, "the snapshot's outcome", func() bool { return len(a.snapshotResults()) > 0 })
		if got := a.snapshotResults(); !slices.Equal(got, []snapResult{{2, false}}) {
			t.Errorf("results %v, want [{2 false}]", got)
		}
		waitFor(t, "node 2 reported unreachable", func() bool { return a.unreachable(2) > 0 })
	})
	t.Run("unknown peer", func(t *testing.T) {
		a := newNode(t, 7, 1, "")
		a.tr.Send([]*raftpb.Message{snapMsg(1, 4, 10)})
		waitFor(t, "the snapshot's outcome", func() bool { return len(a.snapshotResults()) > 0 })
		if got := a.snapshotResults(); !slices.Equal(got, []snapResult{{4, false}}) {
			t.Errorf("results %v, want [{4 false}]", got)
		}
	})
	t.Run("one at a time", func(t *testing.T) {
		a := newNode(t, 7, 1, "")
		b := newNode(t, 7, 2, "")
		inDeliver := make(chan struct{})
		wait, release := releaser(t)
		b.setHook(func(m *raftpb.Message) {
			if m.GetType() == raftpb.MsgSnap {
				close(inDeliver)
				<-wait
			}
		})
		connect(a, b)
		a.tr.Send([]*raftpb.Message{snapMsg(1, 2, 2<<20)})
		<-inDeliver // the first is in the receiver's hands, not yet answered
		a.tr.Send([]*raftpb.Message{snapMsg(1, 2, 10)})
		waitFor(t, "the second snapshot refused", func() bool { return len(a.snapshotResults()) == 1 })
		release()
		waitFor(t, "the first snapshot's outcome", func() bool { return len(a.snapshotResults()) == 2 })
		if got := a.snapshotResults(); !slices.Equal(got, []snapResult{{2, false}, {2, true}}) {
			t.Errorf("results %v, want [{2 false} {2 true}]", got)
		}
		if n := b.numDelivered(); n != 1 {
			t.Errorf("%d snapshots delivered, want 1", n)
		}
	})
}

// rawConn is a connection to a transport's address that speaks the wire
// by hand, to put anything on it.
type rawConn struct {
	net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

// dialRaw connects to addr and sends the preface of a stream of kind.
func dialRaw(t testing.TB, addr string, kind byte) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, failSafe)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(failSafe))
	rc := &rawConn{Conn: c, br: bufio.NewReader(c), bw: bufio.NewWriter(c)}
	rc.bw.WriteString(preface)
	rc.bw.WriteByte(kind)
	return rc
}

// finish flushes what was written, half-closes, and returns how the
// receiver answered: the first refusal, or nil if it refused nothing.
func (c *rawConn) finish() error {
	if err := c.bw.Flush(); err != nil {
		return err
	}
	_ = c.Conn.(*net.TCPConn).CloseWrite()
	for {
		err := readAnswer(c.br)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// rawSend sends batches on a message stream of its own and returns how the
// receiver answered.
func rawSend(t testing.TB, addr string, batches ...*transportpb.Batch) error {
	t.Helper()
	c := dialRaw(t, addr, kindMessages)
	for _, b := range batches {
		if err := writeFrame(c.bw, b); err != nil {
			t.Fatal(err)
		}
	}
	return c.finish()
}

// rawSnapshot sends chunks and the end frame on a snapshot stream of its
// own and returns how the receiver answered.
func rawSnapshot(t testing.TB, addr string, chunks ...*transportpb.SnapshotChunk) error {
	t.Helper()
	c := dialRaw(t, addr, kindSnapshot)
	for _, ch := range chunks {
		if err := writeFrame(c.bw, ch); err != nil {
			t.Fatal(err)
		}
	}
	_ = writeFrameBytes(c.bw, nil)
	return c.finish()
}

// TestGarbageRefused: bytes that are no Batch, messages that are no raft
// message, local message types and inconsistent snapshots end their stream
// with an error; nothing is delivered, nothing panics, and the receiver
// still works.
func TestGarbageRefused(t *testing.T) {
	b := newNode(t, 7, 2, "")
	good, err := proto.Marshal(appMsg(1, 2, 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	hup, _ := proto.Marshal(&raftpb.Message{Type: raftpb.MsgHup.Enum(), From: new(uint64(1)), To: new(uint64(2))})
	cases := []struct {
		name  string
		batch *transportpb.Batch
		code  codes.Code
		text  string
	}{
		{"garbage message", &transportpb.Batch{ClusterId: 7, From: 1, To: 2, Messages: [][]byte{{0xff, 0xff, 0xff, 0xff, 0x0f}}}, codes.InvalidArgument, "does not decode"},
		{"local message type", &transportpb.Batch{ClusterId: 7, From: 1, To: 2, Messages: [][]byte{hup}}, codes.InvalidArgument, "no fence member sends"},
		{"message from someone else", &transportpb.Batch{ClusterId: 7, From: 3, To: 2, Messages: [][]byte{good}}, codes.InvalidArgument, "from node 1"},
		{"no sender", &transportpb.Batch{ClusterId: 7, To: 2}, codes.InvalidArgument, "no sender"},
		{"same id", &transportpb.Batch{ClusterId: 7, From: 2, To: 2}, codes.FailedPrecondition, "node id conflict"},
		{"no cluster id", &transportpb.Batch{From: 1, To: 2, Messages: [][]byte{good}}, codes.FailedPrecondition, "sent cluster id 0"},
	}
	for _, c := range cases {
		err := rawSend(t, b.tr.Addr(), c.batch)
		if status.Code(err) != c.code || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%s: stream ended with %v, want %v containing %q", c.name, err, c.code, c.text)
		}
	}
	// A sender that switches identity mid-stream.
	err = rawSend(t, b.tr.Addr(), &transportpb.Batch{ClusterId: 7, From: 1, To: 2},
		&transportpb.Batch{ClusterId: 7, From: 3, To: 2})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("identity switch: %v, want InvalidArgument", err)
	}

	// Bytes that are no Batch at all, no protocol, or frames too large.
	junk := dialRaw(t, b.tr.Addr(), kindMessages)
	_ = writeFrameBytes(junk.bw, []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02})
	if err := junk.finish(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a stream of junk ended with %v, want InvalidArgument", err)
	}
	for _, c := range []struct {
		name  string
		bytes []byte
		text  string
	}{
		{"another protocol", []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), "bad preface"},
		{"unknown kind", []byte(preface + "X"), "unknown stream kind"},
		{"huge frame", append([]byte(preface+"M"), 0xff, 0xff, 0xff, 0xff), "over the"},
	} {
		raw := dialRaw(t, b.tr.Addr(), 0)
		raw.bw.Reset(raw.Conn) // drop the preface dialRaw wrote
		raw.bw.Write(c.bytes)
		if err := raw.finish(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%s: %v, want InvalidArgument containing %q", c.name, err, c.text)
		}
	}

	// Snapshots that do not add up.
	snap := snapMsg(1, 2, 0)
	snap.Snapshot.Data = nil
	hdr, _ := proto.Marshal(snap)
	snapCases := []struct {
		name   string
		chunks []*transportpb.SnapshotChunk
		text   string
	}{
		{"short", []*transportpb.SnapshotChunk{{ClusterId: 7, From: 1, To: 2, Message: hdr, DataSize: 10}, {Data: []byte("12345")}}, "ended after 5 of the 10"},
		{"long", []*transportpb.SnapshotChunk{{ClusterId: 7, From: 1, To: 2, Message: hdr, DataSize: 3}, {Data: []byte("12345")}}, "more snapshot data"},
		{"not a snapshot", []*transportpb.SnapshotChunk{{ClusterId: 7, From: 1, To: 2, Message: good}}, "on a snapshot stream"},
		{"garbage", []*transportpb.SnapshotChunk{{ClusterId: 7, From: 1, To: 2, Message: []byte{0xff}}}, "does not decode"},
		{"header twice", []*transportpb.SnapshotChunk{{ClusterId: 7, From: 1, To: 2, Message: hdr, DataSize: 3}, {ClusterId: 7, Data: []byte("123")}}, "repeats its header"},
	}
	for _, c := range snapCases {
		err := rawSnapshot(t, b.tr.Addr(), c.chunks...)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.text) {
			t.Errorf("snapshot %s: %v, want InvalidArgument containing %q", c.name, err, c.text)
		}
	}

	if n := b.numDelivered(); n != 0 {
		t.Fatalf("%d messages delivered from garbage", n)
	}
	// The receiver still takes good traffic.
	a := newNode(t, 7, 1, "")
	connect(a, b)
	a.tr.Send([]*raftpb.Message{appMsg(1, 2, 1, 1)})
	waitFor(t, "a good message after the garbage", func() bool { return b.numDelivered() == 1 })
}

// TestLargeMessages: a message over the batch bound travels alone and
// arrives; one over the wire limit is dropped with an error log and the peer
// reported unreachable.
func TestLargeMessages(t *testing.T) {
	a := newNode(t, 7, 1, "")
	b := newNode(t, 7, 2, "")
	connect(a, b)
	big := appMsg(1, 2, 1, 6<<20)
	a.tr.Send([]*raftpb.Message{appMsg(1, 2, 1, 10), big, appMsg(1, 2, 2, 10)})
	waitFor(t, "three messages", func() bool { return b.numDelivered() == 3 })
	if got := b.delivered(); !proto.Equal(got[1], big) || got[0].GetIndex() != 1 || got[2].GetIndex() != 2 {
		t.Errorf("got indexes %v, want the big message between the small ones", indexes(got))
	}

	huge := appMsg(1, 2, 3, maxMsgBytes+1)
	a.tr.Send([]*raftpb.Message{huge})
	waitFor(t, "node 2 reported unreachable", func() bool { return a.unreachable(2) > 0 })
	if !a.logs.contains("larger than the transport's limit") {
		t.Errorf("no error logged for the huge message:\n%s", a.logs)
	}
	a.tr.Send([]*raftpb.Message{appMsg(1, 2, 4, 10)})
	waitFor(t, "the message after the huge one", func() bool { return b.numDelivered() == 4 })
}

// TestBatchLen: batches hold as many messages as fit in 4 MiB, and a
// larger message alone.
func TestBatchLen(t *testing.T) {
	mib := make([]byte, 1<<20)
	big := make([]byte, 6<<20)
	small := make([]byte, 100)
	for _, c := range []struct {
		name string
		msgs [][]byte
		want []int
	}{
		{"ten of 1 MiB", slices.Repeat([][]byte{mib}, 10), []int{3, 3, 3, 1}},
		{"big alone", [][]byte{small, big, small, small}, []int{1, 1, 2}},
		{"many small", slices.Repeat([][]byte{small}, 50000), []int{38836, 11164}}, // 4 MiB / 108
	} {
		var got []int
		for msgs := c.msgs; len(msgs) > 0; {
			n := batchLen(msgs)
			got = append(got, n)
			msgs = msgs[n:]
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: batches of %v, want %v", c.name, got, c.want)
		}
	}
}

// TestPeers: SetPeer moves a peer, RemovePeer forgets it, and messages to
// unknown peers are dropped and reported unreachable.
func TestPeers(t *testing.T) {
	a := newNode(t, 7, 1, "")
	b := newNode(t, 7, 2, "")
	b2 := newNode(t, 7, 2, "") // node 2 after a move
	a.tr.SetPeer(2, b.tr.Addr())
	a.tr.SetPeer(2, b.tr.Addr()) // no change
	a.tr.Send([]*raftpb.Message{appMsg(1, 2, 1, 1)})
	waitFor(t, "delivery at the first address", func() bool { return b.numDelivered() == 1 })

	a.tr.SetPeer(2, b2.tr.Addr())
	a.tr.Send([]*raftpb.Message{appMsg(1, 2, 2, 1)})
	waitFor(t, "delivery at the new address", func() bool { return b2.numDelivered() == 1 })
	if b.numDelivered() != 1 {
		t.Errorf("the old address got %d messages, want 1", b.numDelivered())
	}

	a.tr.RemovePeer(2)
	a.tr.Send([]*raftpb.Message{appMsg(1, 2, 3, 1), appMsg(1, 5, 1, 1)})
	waitFor(t, "both reported unreachable", func() bool { return a.unreachable(2) > 0 && a.unreachable(5) > 0 })
	a.tr.SetPeer(1, b.tr.Addr()) // itself: ignored
	a.tr.SetPeer(0, b.tr.Addr())
	if !a.logs.contains("SetPeer ignored") {
		t.Error("SetPeer of the local id was not logged")
	}
	if b.numDelivered() != 1 || b2.numDelivered() != 1 {
		t.Errorf("delivered %d and %d after the removal, want 1 and 1", b.numDelivered(), b2.numDelivered())
	}
}

// TestNewChecksConfig: a config without a required field is refused.
func TestNewChecksConfig(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	ok := Config{ClusterID: 1, LocalID: 1, Listener: lis, Deliver: func(*raftpb.Message) {}}
	for name, mutate := range map[string]func(*Config){
		"ClusterID": func(c *Config) { c.ClusterID = 0 },
		"LocalID":   func(c *Config) { c.LocalID = 0 },
		"Listener":  func(c *Config) { c.Listener = nil },
		"Deliver":   func(c *Config) { c.Deliver = nil },
	} {
		c := ok
		mutate(&c)
		if tr, err := New(c); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("without %s: New returned %v", name, err)
			if tr != nil {
				tr.Close()
			}
		}
	}
}

// ownFrame matches a stack frame of the package's code (not of its tests).
var ownFrame = regexp.MustCompile(`fence/internal/transport\.(\(\*(Transport|peer|stream|receiver|reporter)\)|New|newReporter)`)

// checkOwnGoroutinesGone fails the test if any goroutine runs the
// transport's code shortly after Close (which waits for all of them).
func checkOwnGoroutinesGone(t testing.TB) {
	t.Helper()
	// A goroutine that has signalled its WaitGroup may still be returning
	// when Close does: allow it a moment (as goleak does), then report.
	var left []string
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		buf := make([]byte, 1<<22)
		buf = buf[:runtime.Stack(buf, true)]
		left = left[:0]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if ownFrame.MatchString(g) {
				left = append(left, g)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, g := range left {
		t.Errorf("a goroutine of the transport outlived Close:\n%s", g)
	}
}

// TestCloseWaitsForDeliver: Close waits for a Deliver call under way.
func TestCloseWaitsForDeliver(t *testing.T) {
	a := newNode(t, 7, 1, "")
	b := newNode(t, 7, 2, "")
	wait, release := releaser(t)
	inDeliver := make(chan struct{})
	var once sync.Once
	deliverDone := false
	var mu sync.Mutex
	b.setHook(func(*raftpb.Message) {
		once.Do(func() { close(inDeliver) })
		<-wait
		mu.Lock()
		deliverDone = true
		mu.Unlock()
	})
	connect(a, b)
	a.tr.Send([]*raftpb.Message{appMsg(1, 2, 1, 1)})
	<-inDeliver
	closed := make(chan bool)
	go func() {
		b.close()
		mu.Lock()
		defer mu.Unlock()
		closed <- deliverDone
	}()
	// Give a Close that does not wait the chance to return early.
	time.Sleep(50 * time.Millisecond)
	release()
	if !<-closed {
		t.Error("Close returned while Deliver was still running")
	}
}

// TestCloseLeavesNoGoroutines: transports that carried messages and a
// snapshot stop every goroutine they started; Close is idempotent, and Send
// after Close does nothing.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	nodes := []*node{newNode(t, 7, 1, ""), newNode(t, 7, 2, ""), newNode(t, 7, 3, "")}
	connect(nodes...)
	for seq := uint64(1); seq <= 100; seq++ {
		nodes[0].tr.Send([]*raftpb.Message{appMsg(1, 2, seq, 10), appMsg(1, 3, seq, 10)})
		nodes[1].tr.Send([]*raftpb.Message{appMsg(2, 1, seq, 10)})
	}
	nodes[2].tr.Send([]*raftpb.Message{snapMsg(3, 1, 2<<20)})
	waitFor(t, "the traffic", func() bool {
		return nodes[1].numDelivered() == 100 && nodes[2].numDelivered() == 100 && nodes[0].numDelivered() == 101
	})
	for _, n := range nodes {
		n.close()
		if err := n.tr.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	}
	before := nodes[1].numDelivered()
	nodes[0].tr.Send([]*raftpb.Message{appMsg(1, 2, 101, 10), appMsg(1, 9, 1, 1)})
	nodes[0].tr.SetPeer(4, "127.0.0.1:1")
	checkOwnGoroutinesGone(t)
	goleak.VerifyNone(t)
	if nodes[1].numDelivered() != before || nodes[0].unreachable(9) != 0 {
		t.Error("Send after Close delivered or reported something")
	}
}

// TestSnapshotOnTheWire: a sender streams a 20 MiB snapshot as its header
// chunk, 20 chunks of 1 MiB and the end frame, and takes the receiver's OK
// as success (a test-side receiver reads the wire).
func TestSnapshotOnTheWire(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	chunks := make(chan []int, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br, bw := bufio.NewReader(c), bufio.NewWriter(c)
		head := make([]byte, len(preface)+1)
		if _, err := io.ReadFull(br, head); err != nil || string(head) != preface+string(rune(kindSnapshot)) {
			chunks <- nil
			return
		}
		var sizes []int
		for {
			f, err := readFrame(br, maxFrameBytes)
			if err != nil {
				chunks <- nil
				return
			}
			if len(f) == 0 {
				break
			}
			var ch transportpb.SnapshotChunk
			if proto.Unmarshal(f, &ch) != nil {
				chunks <- nil
				return
			}
			sizes = append(sizes, len(ch.GetData()))
		}
		chunks <- sizes
		_ = writeAnswer(bw, nil)
	}()
	a := newNode(t, 7, 1, "")
	a.tr.SetPeer(2, lis.Addr().String())
	a.tr.Send([]*raftpb.Message{snapMsg(1, 2, 20<<20)})
	sizes := <-chunks
	if len(sizes) != 21 || sizes[0] != 0 || slices.ContainsFunc(sizes[1:], func(n int) bool { return n != snapChunkBytes }) {
		t.Fatalf("chunk data sizes %v, want a header chunk and 20 of %d", sizes, snapChunkBytes)
	}
	waitFor(t, "the snapshot's outcome", func() bool { return len(a.snapshotResults()) > 0 })
	if got := a.snapshotResults(); !slices.Equal(got, []snapResult{{2, true}}) {
		t.Fatalf("snapshot results %v, want [{2 true}]", got)
	}
}

// TestDeadPeerWarnsOnce: a peer that stays down is one WARN line, however
// often the stream is retried (each retry is a DEBUG line), so one dead
// member does not flood the other members' logs.
func TestDeadPeerWarnsOnce(t *testing.T) {
	a := newNode(t, 7, 1, "")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close() // nothing listens there: every dial is refused
	a.tr.SetPeer(2, dead)
	retries := func() int { return strings.Count(a.logs.String(), "raft stream to peer failed again") }
	seq := uint64(0)
	waitFor(t, "four retries of the dead peer", func() bool {
		seq++
		a.tr.Send([]*raftpb.Message{appMsg(1, 2, seq, 10)})
		time.Sleep(5 * time.Millisecond)
		return retries() >= 4
	})
	if n := strings.Count(a.logs.String(), "level=WARN"); n != 1 {
		t.Fatalf("%d WARN lines for one dead peer after %d retries, want 1:\n%s", n, retries(), a.logs)
	}
}

// TestIdleSendWritesInline: once a peer's stream is open and idle, Send
// writes each message itself, on its caller's goroutine (no hand-off to the
// peer's sender goroutine), and the messages arrive whole and in order.
func TestIdleSendWritesInline(t *testing.T) {
	a := newNode(t, 7, 1, "")
	b := newNode(t, 7, 2, "")
	connect(a, b)
	a.tr.Send([]*raftpb.Message{appMsg(1, 2, 1, 10)}) // opens the stream
	waitFor(t, "the first message", func() bool { return b.numDelivered() == 1 })
	const n = 100
	p := a.peer(2)
	for seq := uint64(2); seq <= n; seq++ {
		waitFor(t, "an idle stream", p.idle) // the sender may still hold the last write it made
		a.tr.Send([]*raftpb.Message{appMsg(1, 2, seq, 10)})
		waitFor(t, "the next message", func() bool { return b.numDelivered() == int(seq) })
	}
	for i, m := range b.delivered() {
		if m.GetIndex() != uint64(i+1) {
			t.Fatalf("message %d has index %d", i, m.GetIndex())
		}
	}
	if got := p.inline.Load(); got != n-1 {
		t.Errorf("%d of the %d messages sent on an idle stream were written by Send itself; want all", got, n-1)
	}
}

// TestInlineWritesMeetFullSocket: Send's own writes against a receiver that
// stalls: the socket fills, a write goes in part, the sender goroutine
// finishes it and the rest queue behind it; once the receiver reads again
// every message arrives, whole and in order, none dropped.
func TestInlineWritesMeetFullSocket(t *testing.T) {
	a := newNode(t, 7, 1, "")
	b := newNode(t, 7, 2, "")
	connect(a, b)
	a.tr.Send([]*raftpb.Message{appMsg(1, 2, 1, 10)})
	waitFor(t, "the first message", func() bool { return b.numDelivered() == 1 })
	wait, release := releaser(t)
	b.setHook(func(*raftpb.Message) { <-wait })

	// 3,000 messages of 8 KiB, one Send each: far more than the loopback
	// socket buffers hold, under the queue's bounds (nothing is dropped).
	const total = 3001
	for seq := uint64(2); seq <= total; seq++ {
		a.tr.Send([]*raftpb.Message{appMsg(1, 2, seq, 8<<10)})
	}
	inline := a.peer(2).inline.Load()
	release()
	waitFor(t, "every message", func() bool { return b.numDelivered() == total })
	for i, m := range b.delivered() {
		if m.GetIndex() != uint64(i+1) || i > 0 && len(m.GetEntries()[0].GetData()) != 8<<10 {
			t.Fatalf("message %d: index %d, %d bytes", i, m.GetIndex(), len(m.GetEntries()[0].GetData()))
		}
	}
	if inline == 0 || inline >= total-1 {
		t.Errorf("%d of %d messages written by Send itself; want some (while the socket took them) and not all", inline, total-1)
	}
	if a.unreachable(2) != 0 {
		t.Errorf("peer reported unreachable %d times; want none", a.unreachable(2))
	}
	t.Logf("%d of %d messages written by Send itself", inline, total-1)
}

// peer returns the transport's peer id.
func (n *node) peer(id uint64) *peer {
	n.tr.mu.RLock()
	defer n.tr.mu.RUnlock()
	return n.tr.peers[id]
}

// idle reports whether the peer's stream is open with nothing queued and
// no write under way.
func (p *peer) idle() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.s == nil || len(p.queue) > 0 || !p.s.wmu.TryLock() {
		return false
	}
	p.s.wmu.Unlock()
	return true
}

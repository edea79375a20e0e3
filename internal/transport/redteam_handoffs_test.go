package transport

import (
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// TestInlineWritesOutliveTheWriteDeadline: the sender goroutine's writes
// (flush, through deadlineConn) set the socket's write deadline; once that
// has passed, Send's own non-blocking write on an idle stream must still go
// through, not fail on the stale deadline and hand the message to the
// sender goroutine (the hand-off inline writes exist to spare; with the
// default 10 s timeout, the first inline write 10 s after each of the
// sender goroutine's writes).
func TestInlineWritesOutliveTheWriteDeadline(t *testing.T) {
	const timeout = 50 * time.Millisecond
	a := newNode(t, 7, 1, "", func(c *Config) { c.writeTimeout = timeout })
	b := newNode(t, 7, 2, "")
	connect(a, b)
	a.tr.Send([]*raftpb.Message{appMsg(1, 2, 1, 10)}) // opens the stream: the sender goroutine writes it
	waitFor(t, "the first message", func() bool { return b.numDelivered() == 1 })
	time.Sleep(3 * timeout) // the deadline the sender goroutine's write set passes
	p := a.peer(2)
	waitFor(t, "an idle stream", p.idle)
	p.mu.Lock()
	s := p.s
	p.mu.Unlock()
	msg, err := proto.Marshal(appMsg(1, 2, 2, 10))
	if err != nil {
		t.Fatal(err)
	}
	s.wmu.Lock()
	if !s.tryWrite([][]byte{msg}) {
		p.signal() // as send does: the sender goroutine writes it
		t.Error("Send's own write on an idle stream failed once the sender goroutine's write deadline had passed: every message now takes the hand-off")
	}
	waitFor(t, "the second message", func() bool { return b.numDelivered() == 2 })
}

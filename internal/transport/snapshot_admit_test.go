package transport

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/internal/transport/transportpb"
)

// A snapshot stream is judged again (AuthorizePeer) after its last chunk,
// before its MsgSnap reaches raft: a member removed while it streamed gets
// it refused (found by a red team: it was judged at its first chunk only).
func TestSnapshotJudgedAgainAtItsEnd(t *testing.T) {
	ca := newTestCA(t, "test CA")
	var member atomic.Bool
	member.Store(true)
	var asked atomic.Int64
	b := newNode(t, 7, 2, "", withTLS(ca.node("2")), func(c *Config) {
		c.AuthorizePeer = func(from uint64, cert *x509.Certificate) error {
			asked.Add(1)
			if !member.Load() {
				return errors.New("not a member of this cluster as this node knows it")
			}
			return nil
		}
	})
	rl1 := ca.node("1")
	raw, err := net.DialTimeout("tcp", b.tr.Addr(), failSafe)
	if err != nil {
		t.Fatal(err)
	}
	cfg := rl1.ClientConfig(b.tr.Addr())
	c := tls.Client(raw, cfg)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(failSafe))
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	br, bw := bufio.NewReader(c), bufio.NewWriter(c)
	bw.WriteString(preface)
	bw.WriteByte(kindSnapshot)
	m := snapMsg(1, 2, 4096)
	data := m.Snapshot.Data
	m.Snapshot.Data = nil
	mb, _ := proto.Marshal(m)
	if err := writeFrame(bw, &transportpb.SnapshotChunk{ClusterId: 7, From: 1, To: 2, Message: mb, DataSize: uint64(len(data))}); err != nil {
		t.Fatal(err)
	}
	bw.Flush()
	// Let the receiver admit the first chunk, then remove the sender.
	waitFor(t, "the first chunk to be admitted", func() bool { return asked.Load() > 0 })
	member.Store(false)
	time.Sleep(200 * time.Millisecond) // it is removed well before the rest arrives
	writeFrame(bw, &transportpb.SnapshotChunk{Data: data})
	writeFrameBytes(bw, nil)
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	ans := readAnswer(br)
	delivered := 0
	for _, d := range b.delivered() {
		if d.GetType() == raftpb.MsgSnap {
			delivered++
		}
	}
	if delivered > 0 || ans == nil {
		t.Errorf("a snapshot from node 1, removed before its stream ended, was delivered (%d MsgSnap; answer %v; AuthorizePeer asked %d time(s))",
			delivered, ans, asked.Load())
	}
}

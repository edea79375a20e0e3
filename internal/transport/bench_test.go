package transport

import (
	"log/slog"
	"net"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// BenchmarkRoundTrip measures one small message from node 1 to node 2 and
// node 2's answer back, over real gRPC on loopback, one at a time.
func BenchmarkRoundTrip(b *testing.B) {
	back := make(chan struct{}, 1)
	var t1, t2 *Transport
	start := func(id uint64, deliver func(*raftpb.Message)) *Transport {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		tr, err := New(Config{ClusterID: 7, LocalID: id, Listener: lis, Deliver: deliver, Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { tr.Close() })
		return tr
	}
	t1 = start(1, func(*raftpb.Message) { back <- struct{}{} })
	t2 = start(2, func(m *raftpb.Message) {
		t2.Send([]*raftpb.Message{{Type: raftpb.MsgHeartbeatResp.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: m.Term}})
	})
	t1.SetPeer(2, t2.Addr())
	t2.SetPeer(1, t1.Addr())
	ping := []*raftpb.Message{{Type: raftpb.MsgHeartbeat.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(1)), Commit: new(uint64(42))}}
	// Warm up: open both streams.
	t1.Send(ping)
	<-back
	b.ResetTimer()
	for b.Loop() {
		t1.Send(ping)
		<-back
	}
}

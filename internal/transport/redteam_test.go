package transport

// Red team (engine replacement): a finding that failed on the code it was
// written against; it passes now and stays as a regression test.

import (
	"io"
	"log/slog"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/internal/transport/transportpb"
)

// FINDING: the receiver delivers message types no fence node ever sends,
// in shapes raft panics on. fence runs raft with DisableProposalForwarding
// and serves reads on the leader only, so a MsgProp never legitimately
// crosses the network; yet checkMessage accepts it (it only refuses local
// types and mismatched ids), from any sender id, member or not. Delivered
// to a leader, a MsgProp is committed as the leader's own proposal, and an
// empty one (or one with an undecodable conf change) panics the raft loop
// (see internal/node TestRedTeamLeaderCommitsProposalFromNetwork and
// TestRedTeamGarbageMessagePanicsLeader).
func TestRedTeamReceiverDeliversNetworkProposals(t *testing.T) {
	var got []*raftpb.Message
	r := &receiver{clusterID: 7, localID: 2, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		deliver: func(m *raftpb.Message) { got = append(got, m) }}
	rogue := uint64(0xbad)
	for _, m := range []*raftpb.Message{
		{Type: raftpb.MsgProp.Enum(), From: new(rogue), To: new(uint64(2))},
		{Type: raftpb.MsgProp.Enum(), From: new(rogue), To: new(uint64(2)),
			Entries: []*raftpb.Entry{{Type: raftpb.EntryConfChange.Enum(), Data: []byte{0xff, 0xff}}}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := r.decodeBatch(&transportpb.Batch{ClusterId: 7, From: rogue, To: 2, Messages: [][]byte{b}})
		if err == nil {
			t.Errorf("a %v with %d entries from node %x (unknown to this node) was accepted for delivery (%d messages): "+
				"fence never forwards proposals, and raft panics on an empty MsgProp or an undecodable conf change",
				m.GetType(), len(m.GetEntries()), rogue, len(msgs))
		}
	}
}

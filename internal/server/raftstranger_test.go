package server_test

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/node"
	"github.com/fencehq/fence/internal/pki"
	"github.com/fencehq/fence/internal/transport/transportpb"
)

// Found by a red team (fixed: a node that is in its own member list now
// refuses every non-member): the raft port admits a name outside the membership while the
// node "has no leader or follows it" (104d00c). A stranger's node
// certificate (any of the CA, e.g. one made for a node never added)
// needs only one leaderless moment — an election, a restart, a follower
// cut off for an election timeout — to send a MsgHeartbeat with a higher
// term: etcd raft then makes the sender its leader (becomeFollower(term,
// from) takes no membership check), so the node "follows" the stranger,
// and from then on every batch of the stranger is admitted (st.lead ==
// from). The gate meant to admit only the real leader is opened by the
// stranger naming itself leader. Impact: the stranger keeps the member
// captured and, by raising the term every few ms, makes the captured
// member's higher-term replies depose every leader the rest elects: here
// the 3-node cluster had a serving leader in about 1 of 377 samples over
// 4 s — a whole-cluster outage from one non-member node certificate (and
// it may feed the captured member MsgApp).
// Fix: admit a non-member only for a leader this node learned through the
// membership (e.g. a MsgApp/MsgSnap whose conf state lists it), never
// because raft's lead is the sender; or refuse non-members' messages that
// carry a term above this node's (a joiner's leader replies, it does not
// raise terms), and step no message whose From is not in the ConfState
// except from the leader recorded in a committed conf change.
func TestStrangerCannotLeadAMember(t *testing.T) {
	certs := locktest.NewCerts(t)
	c := locktest.NewCluster(t, 3, certs.Serve)
	cluster := c.ClusterID()
	leader := c.Leader()
	var target *locktest.Node
	for _, nd := range c.Nodes {
		if nd != leader {
			target = nd
			break
		}
	}
	stranger := mustTLS(t, certs.Issue(pki.Node, "n9", time.Hour))
	from, to := node.RaftID("n9"), node.RaftID(target.ID)
	batch := func(term uint64) *transportpb.Batch {
		m := &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: proto.Uint64(from), To: proto.Uint64(to), Term: proto.Uint64(term)}
		raw, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return &transportpb.Batch{ClusterId: cluster, From: from, To: to, Messages: [][]byte{raw}}
	}

	// The target follows the leader: the stranger is refused.
	if ans, err := rtRaftHello(t, target.Server.RaftAddr(), stranger, batch(1<<40)); err != nil || ans == nil {
		t.Fatalf("a stranger to a node that follows a member: answer %v, transport %v (want a refusal)", ans, err)
	}
	// Cut the target off until it has no leader (an election timeout).
	c.Partition(target)
	var st *raftStream
	for end := time.Now().Add(10 * time.Second); st == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Skip("the cut-off target never admitted the stranger within 10 s")
		}
		s, err := dialRaftStream(target.Server.RaftAddr(), stranger)
		if err != nil {
			continue
		}
		if err := s.send(batch(1 << 40)); err != nil {
			s.Close()
			continue
		}
		if ans, err := s.answer(); ans == nil && err == nil {
			st = s
		} else {
			s.Close()
		}
	}
	defer st.Close()
	c.Heal()
	// The stranger is now the leader the target follows: its batches keep
	// being admitted, for as long as it cares to send them.
	refused := make(chan error, 1)
	go func() {
		st.SetReadDeadline(time.Now().Add(20 * time.Second))
		ans, err := st.answer()
		if err == nil {
			err = ans
		}
		refused <- err
	}()
	end := time.Now().Add(4 * time.Second)
	samples, led := 0, 0
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for time.Now().Before(end) {
			samples++
			for _, nd := range c.Nodes {
				if nd.Server.Ready() {
					led++
					break
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	for term := uint64(1<<40 + 1<<20); time.Now().Before(end); term += 1 << 20 {
		if err := st.send(batch(term)); err != nil {
			break
		}
		select {
		case err := <-refused:
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			var ne net.Error
			if errors.As(err, &ne) {
				break
			}
			return // cut off: the gate held
		case <-time.After(20 * time.Millisecond):
		}
	}
	<-sampled
	t.Errorf("a non-member's node certificate, admitted once while %s had no leader, made itself %s's leader (a heartbeat at a higher term) and talked raft to it for 4 s after the partition healed; a serving leader existed in %d of %d samples",
		target.ID, target.ID, led, samples)
}

package server

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/fencehq/fence/internal/node"
)

// Red team (fixed): a first start with --join asks the cluster to add it
// (AddMember commits a learner) BEFORE it opens anything local, so a start
// that then fails — here a bad --audit-file, the same for a data dir held
// by another process, a FORMAT it refuses, … — has changed the cluster:
// its membership now lists a learner that never comes up (members ls shows
// it; the leader replicates to it forever). A retry on another raft
// address is then refused ("a member with another address; remove it
// first"), and once removed the name never comes back, so the operator
// must pick a new --node-id. "A start that fails changes nothing" does not
// hold for a joiner. Fix: open everything local that can fail (audit file,
// data dir lock and format check) before asking to join; or remove the
// learner again when the start fails after the join.
//
//	go test -count=1 -run TestRedteamFailedJoinStartLeavesALearner ./internal/server/
func TestRedteamFailedJoinStartLeavesALearner(t *testing.T) {
	n := startNode(t, nil)
	cfg := startConfig(filepath.Join(t.TempDir(), "n2"))
	cfg.NodeID, cfg.Insecure, cfg.MetricsAddr = "n2", true, ""
	cfg.Join, cfg.JoinTimeout = []string{n.srv.GRPCAddr()}, 5*time.Second
	cfg.AuditFile = filepath.Join(t.TempDir(), "no-such-dir", "audit.jsonl")
	s, err := New(cfg)
	if err == nil {
		s.Close()
		t.Fatal("the start with a bad --audit-file succeeded")
	}
	t.Logf("the joiner's start failed: %v", err)
	ms, merr := n.srv.node.Members(ctx(t))
	if merr != nil {
		t.Fatal(merr)
	}
	if len(ms) != 1 {
		t.Errorf("a join whose start failed (%v) left the cluster with %d members: %+v", err, len(ms), ms)
	}
}

// Red team (fixed): the audit file was opened (O_CREATE) before the data
// dir's lock and before checkRecordedAddr, so a start that is refused —
// here a second process on a data dir in use — still creates its
// --audit-file. (Same for a member refused for a changed raft address,
// where the README says "nothing on disk changed".) Fix: open the audit
// file after the checks that refuse a start (or remove it when this start
// created it and fails).
//
//	go test -count=1 -run TestRedteamRefusedStartCreatesItsAuditFile ./internal/server/
func TestRedteamRefusedStartCreatesItsAuditFile(t *testing.T) {
	n := startNode(t, nil)
	cfg := startConfig(n.dir)
	cfg.Insecure, cfg.MetricsAddr = true, ""
	cfg.AuditFile = filepath.Join(t.TempDir(), "audit.jsonl")
	s, err := New(cfg)
	if err == nil {
		s.Close()
		t.Fatal("a second server on a data dir in use started")
	}
	if _, serr := os.Stat(cfg.AuditFile); !errors.Is(serr, fs.ErrNotExist) {
		t.Errorf("the refused start (%v) created its audit file %s", err, cfg.AuditFile)
	}
}

// dropAll drops every raft message while cut is set.
type dropAll struct {
	node.Transport
	cut *atomic.Bool
}

func (d *dropAll) Send(msgs []*raftpb.Message) {
	if !d.cut.Load() {
		d.Transport.Send(msgs)
	}
}

// Red team (fixed): checkRecordedAddr decided "a lone member may move" on
// the member list with every conf change in the log applied, committed or
// not. A leader of {n1, n2} that appended the removal of n2 but could not
// commit it (n2 was cut off: fence members remove n2 timed out) reads
// itself as alone, so a restart on another raft address is let through —
// but raft's configuration is still {n1, n2} (only committed changes
// count), moved() never runs (n1 never leads: it needs n2's vote), and n2
// answers n1 at the old recorded address. The cluster has no leader at
// all, even with both up and the network healed — exactly what the
// refusal exists to prevent. Fix: decide on the committed configuration
// (entries up to the hard state's commit index, or the ConfState raft
// will restore), and let only a member that is the sole voter there move.
//
//	go test -count=1 -run TestRedteamUncommittedRemovalLetsAMemberMove ./internal/server/
func TestRedteamUncommittedRemovalLetsAMemberMove(t *testing.T) {
	var cut atomic.Bool
	peers, cfgs := memberConfigs(t, 2, func(cfg *Config) {
		// Slow elections: the leader keeps leading a moment after the cut (CheckQuorum).
		cfg.HeartbeatTimeout, cfg.ElectionTimeout = 100*time.Millisecond, time.Second
		cfg.WrapTransport = func(tr node.Transport) node.Transport { return &dropAll{Transport: tr, cut: &cut} }
	})
	var srvs []*Server
	for i := range cfgs {
		cfgs[i].Bootstrap = peers
		s, err := New(cfgs[i])
		if err != nil {
			t.Fatal(err)
		}
		srvs = append(srvs, s)
	}
	waitLeader(t, srvs)
	lead, other := 0, 1
	if !srvs[0].Ready() {
		lead, other = 1, 0
	}
	cut.Store(true)
	rctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := srvs[lead].node.RemoveMember(rctx, cfgs[other].NodeID)
	cancel()
	if err == nil || errors.Is(err, node.ErrNotLeader) || errors.Is(err, node.ErrUnknownMember) {
		for _, s := range srvs {
			s.Close()
		}
		t.Fatalf("the removal was not left pending in the leader's log (%v): the test proves nothing", err)
	}
	t.Logf("removal of %s while cut off: %v (appended, not committed)", cfgs[other].NodeID, err)
	for _, s := range srvs {
		s.Close()
	}
	cut.Store(false)

	// The former leader restarts on another raft port; the other member on its own.
	moved := cfgs[lead]
	moved.RaftListener, moved.RaftAddr, moved.Bootstrap, moved.Registerer = nil, "127.0.0.1:0", nil, prometheus.NewRegistry()
	s1, err := New(moved)
	if err != nil {
		t.Logf("refused, as it should be: %v", err)
		return
	}
	defer s1.Close()
	t.Logf("%s restarted on %s although %s (a voter: its removal never committed) dials it at %s",
		moved.NodeID, s1.RaftAddr(), cfgs[other].NodeID, peers[lead].RaftAddr)
	stay := cfgs[other]
	stay.RaftListener, stay.RaftAddr, stay.Bootstrap, stay.Registerer = nil, peers[other].RaftAddr, nil, prometheus.NewRegistry()
	s2, err := New(stay)
	if err != nil {
		t.Fatalf("restart %s on its recorded address: %v", stay.NodeID, err)
	}
	defer s2.Close()
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) {
		if s1.Ready() || s2.Ready() {
			t.Logf("a leader emerged after all")
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("the start on a new raft address was let through (the pending removal made %s look alone), and the two members, both up, elect no leader in 6s",
		moved.NodeID)
}

// Red team (fixed; a race): a lone member that restarts on another raft
// address records it once, in moved(), right after it first leads; if a
// join lands first (moved sees two members and returns) or is still
// pending (raft drops the UpdateNode: one change at a time), the new
// address is never recorded — only a WARN at most. The joiner is then
// handed, and dials, the old address (it never catches up), and the next
// restart of the old node on the address it serves on is refused by
// checkRecordedAddr (two members now, recorded ≠ given), though the
// node's start was accepted as a lone move. Seen in about 1 of 15 tries
// here with AddMember sent as soon as the node is up. Fix: keep the move
// pending until it is recorded (retry moved() while the recorded address
// differs, whatever the member count — an UpdateNode of this node's own
// address is safe with others present), or have AddMember wait for it.
//
//	go test -count=1 -run TestRedteamSingleNodeMoveLostToAJoin ./internal/server/
func TestRedteamSingleNodeMoveLostToAJoin(t *testing.T) {
	for i := range 40 {
		cfg := startConfig(t.TempDir())
		cfg.Insecure, cfg.MetricsAddr = true, ""
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "a leader", s.Ready)
		old := s.RaftAddr()
		s.Close()
		cfg.Registerer = prometheus.NewRegistry() // restart on a new port: a lone member may move
		if s, err = New(cfg); err != nil {
			t.Fatal(err)
		}
		now := s.RaftAddr()
		for { // a node joins as soon as this one is up
			jctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := s.node.AddMember(jctx, "n2", "127.0.0.1:1")
			cancel()
			if err == nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
		var ms []node.MemberStatus
		eventually(t, "the move recorded", func() bool { // it retries until it is
			ms, err = s.node.Members(ctx(t))
			for _, m := range ms {
				if m.Name == cfg.NodeID {
					return m.RaftAddr == now
				}
			}
			return false
		})
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.Name != cfg.NodeID || m.RaftAddr == now {
				continue
			}
			cfg.RaftAddr, cfg.Registerer = now, prometheus.NewRegistry()
			s2, err := New(cfg)
			if err == nil {
				s2.Close()
			}
			t.Fatalf("try %d: %s moved %s → %s, but a join came first and the membership still records %s (the joiner dials that); "+
				"restarting it on %s, where it served: %v", i, cfg.NodeID, old, now, m.RaftAddr, now, err)
		}
	}
	t.Log("no move was lost in 40 tries")
}

package node

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/raftstore"
)

// lazyLog is a simLog whose SetHardState syncs nothing, not even a new term
// or vote: a crash loses every hard state written through it since the last
// Append. core.persist must not rest a vote on SetHardState.
type lazyLog struct{ *simLog }

func (l lazyLog) SetHardState(hs *raftpb.HardState) error {
	return l.MemoryStorage.SetHardState(proto.Clone(hs).(*raftpb.HardState))
}

// voteNode is one core of TestRedTeamLostVoteElectsTwoLeaders.
type voteNode struct {
	id  uint64
	log lazyLog
	c   *core
}

func (n *voteNode) start(t *testing.T, boot []Member) {
	t.Helper()
	c, err := newCore(coreConfig{id: n.id, log: n.log, sm: &replica{state: fsm.New(), log: discard},
		electionTick: 10, heartbeatTick: 1, snapshotThreshold: 1000, trailing: 5,
		logger: discard, raftLogLevel: slog.LevelError + 100,
		leadership: func(bool) {}, membersChanged: func(members, removedSet) {}}, boot, n.id)
	if err != nil {
		t.Fatal(err)
	}
	n.c = c
}

// exchange runs the nodes until nothing moves: every log write is made
// (persist) and taken back (persisted) at once, and every message between
// two nodes that up allows is delivered.
func exchange(t *testing.T, nodes []*voteNode, up func(from, to *voteNode) bool) {
	t.Helper()
	for range 1000 {
		var msgs []*raftpb.Message
		var sender []*voteNode
		wrote := false
		for _, n := range nodes {
			send, appends := n.c.ready()
			if len(appends) > 0 {
				wrote = true
				if err := n.c.persist(appends); err != nil {
					t.Fatal(err)
				}
				for _, m := range appends {
					more, err := n.c.persisted(m)
					if err != nil {
						t.Fatal(err)
					}
					send = append(send, more...)
				}
			}
			for _, m := range send {
				msgs, sender = append(msgs, m), append(sender, n)
			}
		}
		if len(msgs) == 0 && !wrote {
			return
		}
		for i, m := range msgs {
			for _, to := range nodes {
				if to.id == m.GetTo() && up(sender[i], to) {
					to.c.step(proto.Clone(m).(*raftpb.Message))
				}
			}
		}
	}
	t.Fatal("the nodes never went quiet")
}

// TestRedTeamLostVoteElectsTwoLeaders: a vote is a promise that must survive
// a crash (raft's election safety: one leader per term). n2 votes n1 leader
// of term 2 and crashes right after its MsgVoteResp left; its log's
// SetHardState syncs nothing (lazyLog), so only core.persist's own choice
// keeps the vote. Restarted, n2 must refuse n3 in term 2; if the vote were
// lost, n3 would lead term 2 too. (Fails with persist's term-or-vote clause
// removed: two leaders of term 2.)
func TestRedTeamLostVoteElectsTwoLeaders(t *testing.T) {
	var nodes []*voteNode
	var boot []Member
	for _, name := range []string{"n1", "n2", "n3"} {
		n := &voteNode{id: RaftID(name), log: lazyLog{newSimLog()}}
		nodes = append(nodes, n)
		boot = append(boot, Member{Name: name, RaftAddr: name, ID: n.id})
	}
	for _, n := range nodes {
		n.start(t, boot)
	}
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	exchange(t, nodes, func(_, _ *voteNode) bool { return true }) // the bootstrap entries, written

	// n1 campaigns and n2 alone hears it: n1 leads term 2 on n2's vote.
	// n1's entries of term 2 reach no one (n2's log stays no newer than n3's).
	if err := n1.c.rn.Campaign(); err != nil {
		t.Fatal(err)
	}
	exchange(t, nodes, func(from, to *voteNode) bool {
		return from != n3 && to != n3 && (from != n1 || n1.c.state != raft.StateLeader)
	})
	if n1.c.state != raft.StateLeader {
		t.Fatalf("n1 is %v, want the leader", n1.c.state)
	}
	term := n1.c.term
	if hs, _, _ := n2.log.InitialState(); hs.GetTerm() != term || hs.GetVote() != n1.id {
		t.Fatalf("n2's hard state is %v; want its vote for n1 in term %d", hs, term)
	}

	// n2 crashes and restarts from its log; n1 is cut off; n3 campaigns.
	n2.log.crash()
	n2.c.stop()
	n2.start(t, nil)
	if hs, _, _ := n2.log.InitialState(); hs.GetTerm() != term || hs.GetVote() != n1.id {
		t.Errorf("after a crash n2's hard state is %v: its vote for n1 in term %d, which n1's leadership rests on, is lost", hs, term)
	}
	if err := n3.c.rn.Campaign(); err != nil {
		t.Fatal(err)
	}
	exchange(t, nodes, func(from, to *voteNode) bool { return from != n1 && to != n1 })
	if n3.c.state == raft.StateLeader && n3.c.term == term {
		t.Errorf("n1 and n3 both lead term %d: n2 voted twice in it", term)
	}
}

// readerNet delivers each directed link's messages in order on a goroutine
// of its own, as a transport's stream reader does (so deliver's stepNow
// runs rounds on it), and drops what a full link or a cut node cannot take.
type readerNet struct {
	sent   func(m *raftpb.Message) // told every message sent, if set
	groups map[uint64]*group
	links  map[[2]uint64]chan *raftpb.Message
	cut    sync.Map // raft id → true while its links drop everything
	wg     sync.WaitGroup
}

func newReaderNet(groups map[uint64]*group) *readerNet {
	n := &readerNet{groups: groups, links: map[[2]uint64]chan *raftpb.Message{}}
	for from := range groups {
		for to, g := range groups {
			if from == to {
				continue
			}
			ch := make(chan *raftpb.Message, 1024)
			n.links[[2]uint64{from, to}] = ch
			n.wg.Go(func() {
				for m := range ch {
					g.deliver(m)
				}
			})
		}
	}
	return n
}

func (n *readerNet) Send(msgs []*raftpb.Message) {
	for _, m := range msgs {
		if n.sent != nil {
			n.sent(m)
		}
		if _, cut := n.cut.Load(m.GetFrom()); cut {
			continue
		}
		if _, cut := n.cut.Load(m.GetTo()); cut {
			continue
		}
		status := raft.SnapshotFinish
		select {
		case n.links[[2]uint64{m.GetFrom(), m.GetTo()}] <- proto.Clone(m).(*raftpb.Message):
		default:
			status = raft.SnapshotFailure
		}
		if m.GetType() == raftpb.MsgSnap { // as the transport reports a snapshot's fate
			to := m.GetTo()
			n.groups[m.GetFrom()].tryControl(func(c *core) { c.rn.ReportSnapshot(to, status) })
		}
	}
}

func (*readerNet) SetPeer(uint64, string) {}
func (*readerNet) RemovePeer(uint64)      {}

func (n *readerNet) close() {
	for _, ch := range n.links {
		close(ch)
	}
	n.wg.Wait()
}

// contractLog is an on-disk log that notes what a write has surely made
// durable: everything up to an Append's return, and nothing SetHardState
// wrote (not even a term or vote: persist must make those durable itself).
type contractLog struct {
	*raftstore.Store
	mu   sync.Mutex
	hs   termVote // durable
	last uint64   // durable last index
}

func (l *contractLog) Append(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot) error {
	if err := l.Store.Append(hs, ents, snap); err != nil {
		return err
	}
	st, _, _ := l.InitialState()
	last, _ := l.LastIndex()
	l.mu.Lock()
	l.hs, l.last = termVoteOf(st), last
	l.mu.Unlock()
	return nil
}

// dependsOnDisk returns why m must not have left its sender yet (raft's
// contract: a vote granted and an append acknowledged are durable first),
// or "".
func (l *contractLog) dependsOnDisk(m *raftpb.Message) string {
	l.mu.Lock()
	hs, last := l.hs, l.last
	l.mu.Unlock()
	switch {
	case m.GetReject():
	case m.GetType() == raftpb.MsgVoteResp && (hs.term < m.GetTerm() || hs.term == m.GetTerm() && hs.vote != m.GetTo()):
		return fmt.Sprintf("a vote for %x in term %d left with the durable term %d and vote %x", m.GetTo(), m.GetTerm(), hs.term, hs.vote)
	case m.GetType() == raftpb.MsgAppResp && m.GetIndex() > last:
		return fmt.Sprintf("an append acknowledged up to %d left with the log durable up to %d", m.GetIndex(), last)
	}
	return ""
}

// recordSM records the entries it applies and answers an fsm batch with a
// zero result per command (what the proposer wants).
type recordSM struct {
	mu      sync.Mutex
	entries map[uint64]string
	leases  map[fsm.LeaseID]bool
}

func (s *recordSM) apply(index uint64, data []byte, _ []trace.TraceID) any {
	cmds, err := fsm.DecodeBatch(data)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries[index] = string(data)
	for _, c := range cmds {
		s.leases[c.Lease] = true
	}
	if err != nil {
		return nil
	}
	return make([]fsm.Result, len(cmds))
}

// recordState is a recordSM's snapshot.
type recordState struct {
	Entries map[uint64]string
	Leases  []fsm.LeaseID
}

func (s *recordSM) snapshot(w io.Writer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := recordState{Entries: s.entries}
	for id := range s.leases {
		st.Leases = append(st.Leases, id)
	}
	return gob.NewEncoder(w).Encode(st)
}

func (s *recordSM) restore(_ uint64, b []byte) error {
	var st recordState
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&st); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries, s.leases = st.Entries, map[fsm.LeaseID]bool{}
	if s.entries == nil {
		s.entries = map[uint64]string{}
	}
	for _, id := range st.Leases {
		s.leases[id] = true
	}
	return nil
}

// TestRedTeamHandoffsUnderChurn: three groups on on-disk logs whose
// messages are stepped by per-link reader goroutines (stepNow) while
// proposers take their batches to raft themselves (kick), leadership is
// transferred, nodes are cut off and back, and a learner joins and leaves
// (applied on whichever goroutine runs the round). No vote or append ack
// leaves before the write it rests on is durable, every command a proposer
// was told committed is applied by every node, the nodes applied the same
// entry at every index, and nothing deadlocks (run it under -race). With
// snapshots every 16 entries, a node cut off catches up from one, restored
// on the goroutine that delivered it.
func TestRedTeamHandoffsUnderChurn(t *testing.T) {
	t.Run("log", func(t *testing.T) { churn(t, math.MaxUint64) })
	t.Run("snapshots", func(t *testing.T) { churn(t, 16) })
}

func churn(t *testing.T, snapshotEvery uint64) {
	peers := []uint64{RaftID("n1"), RaftID("n2"), RaftID("n3")}
	groups := map[uint64]*group{}
	sms := map[uint64]*recordSM{}
	logs := map[uint64]*contractLog{}
	var nodes []*group
	for _, id := range peers {
		s, err := raftstore.Create(t.TempDir(), nil, benchLogger)
		if err != nil {
			t.Fatal(err)
		}
		logs[id] = &contractLog{Store: s}
		n := newAsyncBenchNode(id, logs[id], peers)
		sm := &recordSM{entries: map[uint64]string{}, leases: map[fsm.LeaseID]bool{}}
		n.g.c.cfg.sm, sms[id] = sm, sm
		n.g.c.cfg.snapshotThreshold, n.g.c.cfg.trailing = snapshotEvery, 8
		groups[id] = n.g
		nodes = append(nodes, n.g)
		t.Cleanup(func() { s.Close() })
	}
	net := newReaderNet(groups)
	var early, snaps atomic.Int64
	net.sent = func(m *raftpb.Message) {
		if m.GetType() == raftpb.MsgSnap {
			snaps.Add(1)
		}
		if why := logs[m.GetFrom()].dependsOnDisk(m); why != "" && early.Add(1) <= 5 {
			t.Errorf("%x sent %v early: %s", m.GetFrom(), m.GetType(), why)
		}
	}
	for _, g := range nodes {
		g.start(net)
	}
	leader := func() *group {
		for _, g := range nodes {
			if g.status.Load().state == raft.StateLeader {
				return g
			}
		}
		return nodes[0]
	}
	for failSafe := time.Now().Add(time.Minute); !leader().status.Load().leading && time.Now().Before(failSafe); {
		time.Sleep(benchTick)
	}

	var committed sync.Map // fsm.LeaseID → true: told committed
	var told, refused, changes atomic.Int64
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for i := range 150 {
				id := fsm.LeaseID{byte(w + 1), byte(i), byte(i >> 8)}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a hang's end, not a bound
				out := leader().p.proposeAll(ctx, []fsm.Command{{Kind: fsm.KindRenew, Lease: id}})
				cancel()
				if out[0].err == nil {
					committed.Store(id, true)
					told.Add(1)
				} else {
					refused.Add(1)
					time.Sleep(benchTick) // a leader change: let it settle
				}
			}
		})
	}
	wg.Go(func() { // churn: leadership transfers and cut nodes
		for i := range 40 {
			if i%10 == 2 { // a learner joins (nothing runs it), and leaves
				m := Member{Name: "n4", RaftAddr: "n4", ID: RaftID("n4")}
				typ := raftpb.ConfChangeAddLearnerNode
				if i%20 == 12 {
					typ = raftpb.ConfChangeRemoveNode
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := leader().changeMembers(ctx, &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: typ.Enum(), NodeId: new(m.ID)}},
					Context: encodeContext(m, 0)})
				cancel()
				if err == nil {
					changes.Add(1)
				}
			}
			g := leader()
			to := peers[i%3]
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = g.control(ctx, func(c *core) { c.rn.TransferLeader(to) })
			cancel()
			if i%5 == 4 {
				net.cut.Store(to, true)
				time.Sleep(30 * benchTick) // long enough for an election without it
				net.cut.Delete(to)
			}
			time.Sleep(5 * benchTick)
		}
	})
	wg.Wait()
	t.Logf("%d commands told committed, %d refused or indeterminate; %d snapshots sent; %d membership changes", told.Load(), refused.Load(), snaps.Load(), changes.Load())

	// Every node catches up (a fail-safe deadline, not a bound).
	for failSafe := time.Now().Add(time.Minute); ; time.Sleep(benchTick) {
		commit := leader().status.Load().commit
		caught := true
		for _, g := range nodes {
			caught = caught && g.status.Load().applied >= commit
		}
		if caught || time.Now().After(failSafe) {
			break
		}
	}
	for _, g := range nodes {
		g.close()
	}
	net.close()
	for _, a := range peers {
		for _, b := range peers {
			for i, e := range sms[a].entries {
				if f, ok := sms[b].entries[i]; ok && f != e {
					t.Errorf("index %d applied differently on %x and %x", i, a, b)
				}
			}
		}
	}
	committed.Range(func(k, _ any) bool {
		for _, id := range peers {
			if !sms[id].leases[k.(fsm.LeaseID)] {
				t.Errorf("command %v was told committed, but %x never applied it", k, id)
			}
		}
		return true
	})
}

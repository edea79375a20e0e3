package node

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/raftstore"
)

// TestLeaderCommitWritesSkipTheWorker: one proposal at a time on three
// nodes with on-disk logs; the leader's writes of the commit index alone
// (Log.SetHardState: nothing waits on them) are performed by its loop, not
// handed to the append worker and back (two goroutine wake-ups each), and
// every proposal commits.
func TestLeaderCommitWritesSkipTheWorker(t *testing.T) {
	type where struct{ loop, worker atomic.Int64 }
	byNode := map[uint64]*where{}
	c := startBenchCluster(t, func(id uint64, log Log, peers []uint64) benchNode {
		w := &where{}
		byNode[id] = w
		return newAsyncBenchNode(id, whereLog{log, &w.loop, &w.worker}, peers)
	})
	l, err := c.leader(time.Now().Add(time.Minute)) // a fail-safe, not a bound
	if err != nil {
		t.Fatal(err)
	}
	w := byNode[l.(*asyncBenchNode).g.c.cfg.id]
	loop0, worker0 := w.loop.Load(), w.worker.Load()
	const n = 20
	for range n {
		if err := c.commit(benchPayload()); err != nil {
			t.Fatal(err)
		}
	}
	c.check(t)
	if c.retries.Load() > 0 {
		t.Skip("leadership moved during the run; the counts are another leader's")
	}
	loop, worker := w.loop.Load()-loop0, w.worker.Load()-worker0
	t.Logf("the leader's commit-index writes: %d on its loop, %d on the append worker", loop, worker)
	if loop < n/4 {
		t.Errorf("%d of the leader's commit-index writes of %d lone proposals were made by its loop; want at least %d", loop, n, n/4)
	}
}

// whereLog counts the SetHardState calls made by a group's loop and by its
// append worker.
type whereLog struct {
	Log
	loop, worker *atomic.Int64
}

func (l whereLog) SetHardState(hs *raftpb.HardState) error {
	buf := make([]byte, 16<<10)
	stack := string(buf[:runtime.Stack(buf, false)])
	switch {
	case strings.Contains(stack, "(*group).appendWorker"):
		l.worker.Add(1)
	case strings.Contains(stack, "(*group).loop"):
		l.loop.Add(1)
	}
	return l.Log.SetHardState(hs)
}

// TestDeliverStepsOnIdleLoop: three groups whose messages go through
// deliver, as the transport's readers hand them over; one proposal at a time,
// each follower's log write of the entry (Log.Append) is made by the
// goroutine that delivered the MsgApp (stepNow), not by its loop after a
// hand-off, and every proposal commits. deliver refuses to step a message
// itself while one waits in the inbox (it would overtake it) and after the
// loop ended.
func TestDeliverStepsOnIdleLoop(t *testing.T) {
	nodes, leader, appends, _ := startDeliverCluster(t)
	ctx := context.Background()
	if err := leader.propose(ctx, benchPayload()); err != nil { // its term's first entry is committed
		t.Fatal(err)
	}
	before := map[uint64]int64{}
	for id, c := range appends {
		before[id] = c.delivered.Load()
	}
	const n = 20
	for range n {
		if err := leader.propose(ctx, benchPayload()); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range nodes {
		if f == leader {
			continue
		}
		id := f.g.c.cfg.id
		got := appends[id].delivered.Load() - before[id]
		t.Logf("follower %x: %d of its entry writes made by the goroutine that delivered the entry", id, got)
		if got < n/4 {
			t.Errorf("follower %x: %d of the writes of %d lone entries made by deliver's caller; want at least %d", id, got, n, n/4)
		}
	}

	// Refusals: a message waiting in the inbox, and a loop that ended.
	g := nodes[0].g
	g.queued.Add(1)
	if g.stepNow(&raftpb.Message{}) {
		t.Error("stepNow stepped a message while another waited in the inbox")
	}
	g.queued.Add(-1)
	g.close()
	if g.stepNow(&raftpb.Message{}) {
		t.Error("stepNow stepped a message after the loop ended")
	}
}

// TestIdleLeaderProposesOnCallersGoroutine: one command at a time through
// the proposer of an idle leader; the caller's goroutine takes its batch to
// raft and sends the MsgApp itself (group.kick), with no hand-off to the
// loop, and every command commits.
func TestIdleLeaderProposesOnCallersGoroutine(t *testing.T) {
	_, leader, _, sends := startDeliverCluster(t)
	id := leader.g.c.cfg.id
	before := sends[id].delivered.Load()
	const n = 20
	for i := range n {
		cmd := fsm.Command{Kind: fsm.KindRenew, Lease: fsm.LeaseID{byte(i + 1)}}
		if out := leader.g.p.proposeAll(context.Background(), []fsm.Command{cmd}); out[0].err != nil {
			t.Fatal(out[0].err)
		}
	}
	got := sends[id].delivered.Load() - before
	t.Logf("%d of the %d MsgApps (one per follower) sent by the proposing goroutine", got, 2*n)
	if got < n/2 {
		t.Errorf("%d of the MsgApps of %d lone commands were sent by the proposing goroutine; want at least %d", got, n, n/2)
	}

	// After the loop ended, kick takes nothing to raft.
	g := leader.g
	g.close()
	g.p.mu.Lock()
	g.p.queue = []*proposal{{cmd: fsm.Command{Kind: fsm.KindRenew, Lease: fsm.LeaseID{1}}, done: make(chan proposalResult, 1)}}
	g.p.mu.Unlock()
	g.kick()
	if !g.p.waiting() {
		t.Error("kick took a batch to raft after the loop ended")
	}
}

// startDeliverCluster starts three groups (asyncBenchNode's, over on-disk
// logs) connected by a deliverNet, and waits for a leader. It returns
// them, the leader, and per node the count of its log writes with entries
// and of its Sends with a MsgApp that holds entries made under kick or
// stepNow.
func startDeliverCluster(t *testing.T) (nodes []*asyncBenchNode, leader *asyncBenchNode, appends, sends map[uint64]*stackCount) {
	peers := []uint64{RaftID("n1"), RaftID("n2"), RaftID("n3")}
	net := deliverNet{groups: map[uint64]*group{}, sends: map[uint64]*stackCount{}}
	appends = map[uint64]*stackCount{}
	for _, id := range peers {
		s, err := raftstore.Create(t.TempDir(), nil, benchLogger)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		appends[id], net.sends[id] = &stackCount{}, &stackCount{}
		n := newAsyncBenchNode(id, appendLog{s, appends[id]}, peers)
		n.g.c.cfg.sm = resultSM{n.sm} // the proposer wants a result per command
		net.groups[id] = n.g
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		n.g.start(net)
		t.Cleanup(n.g.close)
	}
	failSafe := time.Now().Add(time.Minute) // not a bound: a hang's end
	for leader == nil && time.Now().Before(failSafe) {
		for _, n := range nodes {
			if n.isLeader() {
				leader = n
			}
		}
		time.Sleep(time.Millisecond)
	}
	if leader == nil {
		t.Fatal("no leader")
	}
	return nodes, leader, appends, net.sends
}

// resultSM is countingSM answering each command of an fsm batch with a zero
// result (a proposer's entry) and anything else with nil.
type resultSM struct{ *countingSM }

func (s resultSM) apply(index uint64, data []byte, traces []trace.TraceID) any {
	s.countingSM.apply(index, data, traces)
	cmds, err := fsm.DecodeBatch(data)
	if err != nil {
		return nil
	}
	return make([]fsm.Result, len(cmds))
}

// deliverNet hands each message to its group's deliver, on the sender's
// goroutine, noting the sender's MsgApps with entries sent under kick or
// stepNow.
type deliverNet struct {
	groups map[uint64]*group
	sends  map[uint64]*stackCount
}

func (n deliverNet) Send(msgs []*raftpb.Message) {
	for _, m := range msgs {
		if m.GetType() == raftpb.MsgApp && len(m.GetEntries()) > 0 {
			n.sends[m.GetFrom()].note("(*group).kick")
		}
		n.groups[m.GetTo()].deliver(proto.Clone(m).(*raftpb.Message))
	}
}

func (deliverNet) SetPeer(uint64, string) {}
func (deliverNet) RemovePeer(uint64)      {}

// stackCount counts calls made under a function.
type stackCount struct{ delivered atomic.Int64 }

// note counts this call if fn is on the caller's stack.
func (c *stackCount) note(fn string) {
	buf := make([]byte, 16<<10)
	if strings.Contains(string(buf[:runtime.Stack(buf, false)]), fn) {
		c.delivered.Add(1)
	}
}

// appendLog counts the Appends with entries made under stepNow.
type appendLog struct {
	Log
	c *stackCount
}

func (l appendLog) Append(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot) error {
	if len(ents) > 0 {
		l.c.note("(*group).stepNow")
	}
	return l.Log.Append(hs, ents, snap)
}

// TestPersistSyncsOnlyEntries: a log write whose only change is the commit
// index — a follower's, with its MsgAppResp as the write's response — goes
// to SetHardState (unsynced, as etcd's WAL leaves it), not to a synced
// Append; a write with entries, or with a new term or vote and a response
// that depends on it, is appended (synced).
func TestPersistSyncsOnlyEntries(t *testing.T) {
	resp := []*raftpb.Message{{Type: raftpb.MsgAppResp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Index: new(uint64(7))}}
	hs := func(term, vote, commit uint64) *raftpb.Message {
		return &raftpb.Message{Type: raftpb.MsgStorageAppend.Enum(), Term: new(term), Vote: new(vote), Commit: new(commit), Responses: resp}
	}
	withEntry := hs(3, 2, 0)
	withEntry.Entries = []*raftpb.Entry{{Term: new(uint64(3)), Index: new(uint64(1))}}
	for _, tc := range []struct {
		name          string
		ms            []*raftpb.Message
		appends, sets int
	}{
		{"commit moved, with a response", []*raftpb.Message{hs(3, 2, 7)}, 0, 1},
		{"new term and vote, with a response", []*raftpb.Message{hs(4, 1, 7)}, 1, 0},
		{"commit moved, then a new vote, with a response", []*raftpb.Message{hs(3, 2, 7), hs(3, 1, 7)}, 1, 0},
		{"an entry, then the commit", []*raftpb.Message{withEntry, hs(3, 2, 1)}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &recordingLog{simLog: newSimLog()}
			c := &core{cfg: coreConfig{log: log}, written: termVote{3, 2}}
			if err := c.persist(tc.ms); err != nil {
				t.Fatal(err)
			}
			if log.appends != tc.appends || log.sets != tc.sets {
				t.Errorf("%d Appends and %d SetHardStates; want %d and %d", log.appends, log.sets, tc.appends, tc.sets)
			}
		})
	}
}

// recordingLog counts a simLog's Appends and SetHardStates.
type recordingLog struct {
	*simLog
	appends, sets int
}

func (l *recordingLog) Append(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot) error {
	l.appends++
	return l.simLog.Append(hs, ents, snap)
}

func (l *recordingLog) SetHardState(hs *raftpb.HardState) error {
	l.sets++
	return l.simLog.SetHardState(hs)
}

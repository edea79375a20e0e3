package node

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencehq/fence/internal/metrics"
	"github.com/fencehq/fence/internal/raftstore"
)

const (
	benchTick        = 10 * time.Millisecond
	benchPayloadSize = 100
	benchConcurrency = 64
	benchInbox       = 4096 // as newGroup's inbox
)

var (
	benchLogger  = slog.New(slog.DiscardHandler)
	benchRaftLog = raftLogger{benchLogger, slog.LevelError + 100}
)

// BenchmarkModes compares the two ways of driving raft's storage writes,
// on three nodes in one process, each over its own on-disk
// internal/raftstore log (every Append fsynced) in the test's temporary
// directory:
//
//   - async: the package's own engine, newCore under a group (loop goroutine
//     and append worker), raft with AsyncStorageWrites: log writes go to the
//     append worker and raft keeps stepping while they are fsynced; the
//     worker makes everything queued one write, and leaves a write nothing
//     waits on (the commit index moving) unsynced.
//   - readyadvance: raft's classic Ready/Advance mode, driven here the way
//     etcd's etcdserver/raft.go does it: per Ready a leader sends its
//     messages first (Raft thesis 10.2.1: it writes its log in parallel with
//     replication), then the Ready is saved (fsync), a follower sends its
//     messages after the save, the committed entries are applied, Advance.
//   - readyadvance-mustsync: the same, but honouring Ready.MustSync as
//     etcd's WAL does: a Ready whose only durable change is the commit index
//     is not fsynced (raftstore has no unsynced write, so that hard state is
//     held back and written with the next Append instead).
//
// Messages go between the nodes over Go channels, copied as the wire would
// copy them, with no delay added (no loopback or network cost is
// modelled). Raft ticks every 10ms, elections take 10 ticks, heartbeats 1.
// Proposals carry 100 bytes. BenchmarkModes/fsync is the floor: one Append
// of one 100-byte entry, alone.
//
//	go test ./internal/node -run '^$' -bench Modes -benchtime 3s -count 3
func BenchmarkModes(b *testing.B) {
	b.Run("fsync", benchFsync)
	modes := []struct {
		name  string
		start func(id uint64, log Log, peers []uint64) benchNode
	}{
		{"async", func(id uint64, log Log, peers []uint64) benchNode { return newAsyncBenchNode(id, log, peers) }},
		{"readyadvance", readyBenchNodes(false)},
		{"readyadvance-mustsync", readyBenchNodes(true)},
	}
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			c := startBenchCluster(b, m.start)
			b.Run("sequential", func(b *testing.B) { benchProposals(b, c, 1) })
			b.Run(fmt.Sprintf("concurrent-%d", benchConcurrency), func(b *testing.B) { benchProposals(b, c, benchConcurrency) })
			c.check(b)
		})
	}
}

// benchFsync times one durable Append of one 100-byte entry and a hard
// state, as a Ready or an append worker makes it, with nothing else running.
func benchFsync(b *testing.B) {
	s, err := raftstore.Create(b.TempDir(), nil, benchLogger)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	data := benchPayload()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := uint64(1); i <= uint64(b.N); i++ {
		e := &raftpb.Entry{Index: new(i), Term: new(uint64(1)), Data: data}
		hs := &raftpb.HardState{Term: new(uint64(1)), Commit: new(i - 1)}
		t0 := time.Now()
		if err := s.Append(hs, []*raftpb.Entry{e}, nil); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	b.ReportMetric(micros(median(lat)), "fsync-µs")
}

// benchProposals commits b.N proposals from workers goroutines, each
// proposing one at a time on the leader, and reports the median commit
// latency (proposal to applied on the leader), the throughput, and the log
// writes (Append calls, each an fsync if it changes anything) the three
// nodes made per proposal.
func benchProposals(b *testing.B, c *benchCluster, workers int) {
	data := benchPayload()
	writes := c.writes.Load()
	lats := make([][]time.Duration, workers)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if err := c.commit(data); err != nil {
					b.Error(err)
					return
				}
				lats[w] = append(lats[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(micros(median(slices.Concat(lats...))), "p50-µs")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "proposals/s")
	b.ReportMetric(float64(c.writes.Load()-writes)/float64(b.N), "log-writes/op")
}

func benchPayload() []byte { return bytes.Repeat([]byte("x"), benchPayloadSize) }

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// benchNode is one member of the benchmark's cluster, in either mode.
type benchNode interface {
	// offer hands the node a message from the network, or drops it if its
	// inbox is full.
	offer(m *raftpb.Message)
	start(net *benchNet)
	// propose commits data as one entry; it fails at once with ErrNotLeader
	// on a follower.
	propose(ctx context.Context, data []byte) error
	isLeader() bool
	applied() int64 // proposals applied so far
	close() error
}

// benchNet delivers raft messages over Go channels: a copy of each goes into
// its receiver's inbox at once, or is dropped if that is full (raft recovers
// from lost messages). It is the Transport of the async mode's groups.
type benchNet struct {
	nodes map[uint64]benchNode // filled before any node starts
}

func (n *benchNet) Send(msgs []*raftpb.Message) {
	for _, m := range msgs {
		n.nodes[m.GetTo()].offer(proto.Clone(m).(*raftpb.Message))
	}
}

func (n *benchNet) SetPeer(uint64, string) {}
func (n *benchNet) RemovePeer(uint64)      {}

// benchCluster is three nodes of one mode, stopped by the benchmark's
// cleanup.
type benchCluster struct {
	nodes     []benchNode
	writes    atomic.Int64 // Log.Append calls, all nodes
	retries   atomic.Int64 // proposals tried again on (maybe) another leader
	committed atomic.Int64
}

func startBenchCluster(b testing.TB, start func(id uint64, log Log, peers []uint64) benchNode) *benchCluster {
	peers := []uint64{RaftID("n1"), RaftID("n2"), RaftID("n3")}
	net := &benchNet{nodes: map[uint64]benchNode{}}
	c := &benchCluster{}
	for _, id := range peers {
		s, err := raftstore.Create(b.TempDir(), nil, benchLogger)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() }) // after the nodes stop (cleanups run last first)
		n := start(id, countingLog{s, &c.writes}, peers)
		net.nodes[id] = n
		c.nodes = append(c.nodes, n)
	}
	b.Cleanup(func() {
		for _, n := range c.nodes {
			if err := n.close(); err != nil {
				b.Error(err)
			}
		}
	})
	for _, n := range c.nodes {
		n.start(net)
	}
	if err := c.commit(benchPayload()); err != nil { // warm up: a leader, and its term's first entry committed
		b.Fatal(err)
	}
	c.committed.Store(0)
	return c
}

// leader returns the node that believes it leads, waiting for one.
func (c *benchCluster) leader(deadline time.Time) (benchNode, error) {
	for {
		for _, n := range c.nodes {
			if n.isLeader() {
				return n, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, errors.New("no leader")
		}
		time.Sleep(time.Millisecond)
	}
}

// commit proposes data on the leader until it commits there, trying again
// (counted in retries) if leadership moved; a retried proposal may commit
// twice, which the benchmark does not mind.
func (c *benchCluster) commit(data []byte) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := c.leader(deadline)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err = l.propose(ctx, data)
		cancel()
		switch {
		case err == nil:
			c.committed.Add(1)
			return nil
		case !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrIndeterminate):
			return err
		case time.Now().After(deadline):
			return fmt.Errorf("proposal not committed in time: %w", err)
		}
		c.retries.Add(1)
	}
}

// check reports the retries and fails the benchmark if the leader applied
// fewer proposals than were acknowledged.
func (c *benchCluster) check(b testing.TB) {
	if n := c.retries.Load(); n > 0 {
		b.Logf("%d proposals were retried after a leader change", n)
	}
	var most int64
	for _, n := range c.nodes {
		most = max(most, n.applied())
	}
	if most < c.committed.Load() {
		b.Errorf("%d proposals acknowledged, at most %d applied", c.committed.Load(), most)
	}
}

// countingLog counts the log writes of a raftstore.Store.
type countingLog struct {
	*raftstore.Store
	writes *atomic.Int64
}

func (l countingLog) Append(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot) error {
	l.writes.Add(1)
	return l.Store.Append(hs, ents, snap)
}

// asyncBenchNode is the package's engine: a core under a group.
type asyncBenchNode struct {
	g  *group
	sm *countingSM
}

// countingSM is a state machine that only counts what it applies.
type countingSM struct{ n atomic.Int64 }

func (s *countingSM) apply(uint64, []byte, []trace.TraceID) any { s.n.Add(1); return nil }
func (s *countingSM) snapshot(io.Writer) error                  { return nil }
func (s *countingSM) restore(uint64, []byte) error              { return nil }

func newAsyncBenchNode(id uint64, log Log, peers []uint64) *asyncBenchNode {
	sm := &countingSM{}
	boot := make([]Member, len(peers))
	for i, p := range peers {
		name := fmt.Sprintf("n%d", i+1)
		boot[i] = Member{Name: name, RaftAddr: name, ID: p}
	}
	c, err := newCore(coreConfig{
		id: id, log: log, sm: sm, electionTick: 10, heartbeatTick: 1,
		snapshotThreshold: math.MaxUint64, // no snapshots in either mode
		logger:            benchLogger, raftLogLevel: benchRaftLog.min,
		leadership: func(bool) {}, membersChanged: func(members, removedSet) {},
	}, boot, id) // proposal ids: distinct per node, as readyBenchNode's
	if err != nil {
		panic(err) // a fresh store and a fixed config: cannot fail
	}
	// Proposals go straight to the loop (group.propose): the proposer stays empty.
	p := newProposer(1, metrics.NewServer(prometheus.NewRegistry(), metrics.Gauges{}))
	return &asyncBenchNode{g: newGroup(c, p, benchTick), sm: sm}
}

func (n *asyncBenchNode) start(net *benchNet) { n.g.start(net) }

// offer queues m in the group's inbox as its deliver does, but never waits.
func (n *asyncBenchNode) offer(m *raftpb.Message) {
	n.g.queued.Add(1)
	select {
	case n.g.inbox <- m:
	default:
		n.g.queued.Add(-1)
	}
}

func (n *asyncBenchNode) isLeader() bool { return n.g.status.Load().state == raft.StateLeader }
func (n *asyncBenchNode) applied() int64 { return n.sm.n.Load() }
func (n *asyncBenchNode) close() error   { n.g.close(); return n.g.err }

func (n *asyncBenchNode) propose(ctx context.Context, data []byte) error {
	return n.g.propose(ctx, data).err
}

func readyBenchNodes(mustSync bool) func(uint64, Log, []uint64) benchNode {
	return func(id uint64, log Log, peers []uint64) benchNode {
		return newReadyBenchNode(id, log, peers, mustSync)
	}
}

// readyBenchNode drives a RawNode in the classic Ready/Advance mode on one
// goroutine, which also makes the log writes.
type readyBenchNode struct {
	rn       *raft.RawNode
	log      Log
	mustSync bool // skip the fsync of Readys that are not Ready.MustSync
	net      *benchNet

	in    chan *raftpb.Message
	props chan *request
	stop  chan struct{}
	done  chan struct{} // closed when the loop has returned
	err   error         // why the loop returned, if not told to stop

	leader atomic.Bool
	count  atomic.Int64 // proposals applied

	// owned by the loop
	state   raft.StateType
	nextID  uint64
	waiting map[uint64]*request // proposals by id, until applied
	heldHS  *raftpb.HardState   // a hard state not yet written (mustSync)
}

func newReadyBenchNode(id uint64, log Log, peers []uint64, mustSync bool) *readyBenchNode {
	rn, err := raft.NewRawNode(raftConfig(id, log, 10, 1, benchRaftLog)) // newCore's settings, AsyncStorageWrites off
	if err == nil {
		ps := make([]raft.Peer, len(peers))
		for i, p := range peers {
			ps[i] = raft.Peer{ID: p}
		}
		err = rn.Bootstrap(ps)
	}
	if err != nil {
		panic(err) // a fresh store and a fixed config: cannot fail
	}
	return &readyBenchNode{rn: rn, log: log, mustSync: mustSync,
		in: make(chan *raftpb.Message, benchInbox), props: make(chan *request, benchInbox),
		stop: make(chan struct{}), done: make(chan struct{}),
		nextID:  id, // so that no two leaders hand out the same proposal id
		waiting: map[uint64]*request{}}
}

func (n *readyBenchNode) offer(m *raftpb.Message) {
	select {
	case n.in <- m:
	default:
	}
}

func (n *readyBenchNode) isLeader() bool { return n.leader.Load() }
func (n *readyBenchNode) applied() int64 { return n.count.Load() }

func (n *readyBenchNode) start(net *benchNet) {
	n.net = net
	go func() {
		defer close(n.done)
		n.err = n.loop()
		for id, req := range n.waiting {
			req.finish(outcome{err: ErrStopped})
			delete(n.waiting, id)
		}
	}()
}

func (n *readyBenchNode) close() error {
	close(n.stop)
	<-n.done
	return n.err
}

func (n *readyBenchNode) propose(ctx context.Context, data []byte) error {
	req := newRequest()
	req.data = data
	select {
	case n.props <- req:
	case <-n.done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case o := <-req.done:
		return o.err
	case <-n.done: // the loop failed everything waiting; req.done may hold it
		return ErrStopped
	case <-ctx.Done():
		return fmt.Errorf("%w (%v)", ErrIndeterminate, ctx.Err())
	}
}

// loop takes ticks, messages and proposals, batched as group.loop does,
// and handles the Readys they lead to.
func (n *readyBenchNode) loop() error {
	t := time.NewTicker(benchTick)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return nil
		case <-t.C:
			n.rn.Tick()
		case m := <-n.in:
			_ = n.rn.Step(m)
			for i := 0; i < 256 && len(n.in) > 0; i++ {
				_ = n.rn.Step(<-n.in)
			}
		case req := <-n.props:
			n.proposeOne(req)
			for i := 0; i < 1024 && len(n.props) > 0; i++ {
				n.proposeOne(<-n.props)
			}
		}
		for n.rn.HasReady() {
			if err := n.handle(n.rn.Ready()); err != nil {
				return err
			}
		}
	}
}

func (n *readyBenchNode) proposeOne(req *request) {
	if n.state != raft.StateLeader {
		req.finish(outcome{err: ErrNotLeader})
		return
	}
	n.nextID++
	data := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(req.data)), n.nextID)
	if err := n.rn.Propose(append(data, req.data...)); err != nil {
		req.finish(outcome{err: fmt.Errorf("%w (%v)", ErrNotLeader, err)})
		return
	}
	n.waiting[n.nextID] = req
}

// handle is one Ready: a leader sends before its log write, a follower
// after it; then the committed entries are applied and raft told.
func (n *readyBenchNode) handle(rd raft.Ready) error {
	if rd.SoftState != nil {
		n.state = rd.RaftState
		n.leader.Store(n.state == raft.StateLeader)
		if n.state != raft.StateLeader {
			for id, req := range n.waiting {
				req.finish(outcome{err: ErrIndeterminate})
				delete(n.waiting, id)
			}
		}
	}
	leading := n.state == raft.StateLeader
	if leading {
		n.net.Send(rd.Messages)
	}
	if err := n.save(rd); err != nil {
		return err
	}
	if !leading {
		n.net.Send(rd.Messages)
	}
	n.apply(rd.CommittedEntries)
	n.rn.Advance(rd)
	return nil
}

// save makes the Ready's hard state, entries and snapshot durable. With
// mustSync, a Ready that needs no sync (only the commit index moved) is
// not written: its hard state goes with the next write.
func (n *readyBenchNode) save(rd raft.Ready) error {
	hs := rd.HardState
	if n.mustSync && !rd.MustSync && raft.IsEmptySnap(rd.Snapshot) {
		if hs != nil {
			n.heldHS = hs
		}
		return nil
	}
	if hs == nil {
		hs = n.heldHS
	}
	n.heldHS = nil
	if err := n.log.Append(hs, rd.Entries, rd.Snapshot); err != nil {
		return fmt.Errorf("raft log write failed: %w", err)
	}
	return nil
}

func (n *readyBenchNode) apply(ents []*raftpb.Entry) {
	for _, e := range ents {
		switch data := e.GetData(); e.GetType() {
		case raftpb.EntryConfChange: // the bootstrap's members
			var cc raftpb.ConfChange
			if err := proto.Unmarshal(data, &cc); err != nil {
				panic(err)
			}
			n.rn.ApplyConfChange(&cc)
		case raftpb.EntryNormal:
			if len(data) < 8 { // a new leader's empty entry
				continue
			}
			n.count.Add(1)
			id := binary.BigEndian.Uint64(data)
			if req := n.waiting[id]; req != nil {
				delete(n.waiting, id)
				req.finish(outcome{index: e.GetIndex()})
			}
		}
	}
}

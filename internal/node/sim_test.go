package node

import (
	"container/heap"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/internal/fsm"
)

// The deterministic simulation: real cores (raft, apply, proposals, reads)
// of 3 or 5 nodes in one goroutine, on a simulated network and clock, with
// in-memory logs whose writes complete when the simulation says (a slow or
// stalled fsync) and which a crash tears. Everything random comes from one
// seed, so a failing seed replays exactly.

// simConfig is one run.
type simConfig struct {
	seed     uint64
	nodes    int
	duration time.Duration // simulated time with faults, then a quiet period
	clients  int
	// lazyHardState: the logs' SetHardState syncs nothing, not even a new
	// term or vote (core.persist must make those durable itself).
	lazyHardState bool
}

// sim is the world of one run.
type sim struct {
	cfg   simConfig
	rng   *rand.Rand
	now   time.Duration
	q     eventQueue
	seq   uint64
	nodes []*simNode
	cut   map[[2]int]bool // directed links that drop everything
	trace []string        // recent events, printed with a failure
	quiet bool            // no more faults: the run is converging

	clients []*simClient
	check   *simChecker
}

// simNode is one node: its durable log survives crashes; its core does not.
type simNode struct {
	i      int
	name   string
	id     uint64
	log    *simLog
	c      *core
	rep    *replica
	epoch  int // bumped on crash: events of an earlier life are dropped
	writes []appendJob
	busy   int           // writes[:busy] are in progress (their completion is scheduled)
	stall  time.Duration // writes do not complete before this time
	member bool          // in the group (spares join later)
}

type event struct {
	at  time.Duration
	seq uint64
	fn  func()
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

func (s *sim) after(d time.Duration, fn func()) {
	s.seq++
	heap.Push(&s.q, event{at: s.now + d, seq: s.seq, fn: fn})
}

// at runs fn after d if node n is still in the same life.
func (s *sim) at(n *simNode, d time.Duration, fn func()) {
	epoch := n.epoch
	s.after(d, func() {
		if n.c != nil && n.epoch == epoch {
			fn()
		}
	})
}

func (s *sim) logf(format string, args ...any) {
	line := fmt.Sprintf("%9.3fs ", s.now.Seconds()) + fmt.Sprintf(format, args...)
	s.trace = append(s.trace, line)
	if len(s.trace) > 400 {
		s.trace = s.trace[100:]
	}
}

func (s *sim) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)+1))
}

const simTick = 10 * time.Millisecond

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func newSim(cfg simConfig) *sim {
	s := &sim{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x5eed)), cut: map[[2]int]bool{}}
	s.check = newSimChecker(s)
	var boot []Member
	for i := 0; i < cfg.nodes+1; i++ { // one spare joins later
		n := &simNode{i: i, name: fmt.Sprintf("n%d", i+1), log: newSimLog(), member: i < cfg.nodes}
		n.log.lazy = cfg.lazyHardState
		n.id = RaftID(n.name)
		s.nodes = append(s.nodes, n)
		if n.member {
			boot = append(boot, Member{Name: n.name, RaftAddr: n.name, ID: n.id})
		}
	}
	for _, n := range s.nodes[:cfg.nodes] {
		s.start(n, boot)
	}
	for i := 0; i < cfg.clients; i++ {
		s.clients = append(s.clients, newSimClient(s, i))
	}
	return s
}

// start brings node n up from its log (boot: the first start's voters).
func (s *sim) start(n *simNode, boot []Member) {
	n.rep = &replica{state: fsm.New(), log: discard,
		applied: func(index uint64, cmds []fsm.Command, results []fsm.Result, _ []trace.TraceID) {
			s.check.applied(n, index, cmds, results)
		},
		restored: func(uint64) { s.check.restored(n) }}
	s.check.started(n)
	c, err := newCore(coreConfig{id: n.id, log: n.log, sm: n.rep, electionTick: 10, heartbeatTick: 1,
		snapshotThreshold: 40, trailing: 5, logger: discard, raftLogLevel: slog.LevelError + 100,
		leadership:     func(leading bool) { s.logf("%s leading=%v", n.name, leading) },
		membersChanged: func(members, removedSet) {}}, boot, s.rng.Uint64())
	if err != nil {
		s.check.fail("%s does not start: %v", n.name, err)
		return
	}
	n.c, n.busy, n.writes = c, 0, nil
	s.logf("%s up (applied %d)", n.name, c.applied)
	var tick func()
	drift := s.between(simTick*9/10, simTick*11/10) // clocks run at slightly different rates
	tick = func() {
		n.c.tick()
		s.process(n)
		s.at(n, drift, tick)
	}
	s.at(n, s.between(0, simTick), tick)
	s.process(n)
}

// crash stops node n: its queued writes are lost, the one in progress is torn.
func (s *sim) crash(n *simNode) {
	if n.c == nil {
		return
	}
	if n.busy > 0 && n.writes[0].msg != nil {
		var ents []*raftpb.Entry // what the write would have left, up to a leader's snapshot (written on its own)
		for _, j := range n.writes[:n.busy] {
			if !raft.IsEmptySnap(j.msg.GetSnapshot()) {
				break
			}
			ents = mergeEntries(ents, j.msg.GetEntries())
		}
		k := s.rng.IntN(len(ents) + 1)
		n.log.tear(ents, k)
		s.logf("%s crash tears a write: %d of %d entries reached the disk", n.name, k, len(ents))
	}
	n.log.crash()
	n.c.stop()
	n.c, n.writes, n.busy = nil, nil, 0
	n.epoch++
	s.logf("%s crashed", n.name)
}

// process hands out the core's pending work: messages to the network, writes
// to the node's disk queue.
func (s *sim) process(n *simNode) {
	if n.c == nil {
		return
	}
	send, appends := n.c.ready()
	s.check.led(n)
	s.route(n, send)
	for _, m := range appends {
		n.writes = append(n.writes, appendJob{msg: m})
	}
	for _, j := range n.c.takeSnapshots() {
		n.writes = append(n.writes, appendJob{snap: &j})
	}
	s.nextWrite(n)
}

// nextWrite schedules the completion of the node's next write: every
// queued log write up to the next snapshot as one (as the append worker
// does), or that snapshot.
func (s *sim) nextWrite(n *simNode) {
	if n.busy > 0 || len(n.writes) == 0 {
		return
	}
	n.busy = 1
	if n.writes[0].msg != nil {
		for n.busy < len(n.writes) && n.writes[n.busy].msg != nil {
			n.busy++
		}
	}
	d := s.between(200*time.Microsecond, 2*time.Millisecond)
	if wait := n.stall - s.now; wait > d {
		d = wait
	}
	s.at(n, d, func() {
		batch := n.writes[:n.busy]
		n.writes = n.writes[n.busy:]
		n.busy = 0
		if j := batch[0]; j.snap != nil {
			if err := n.log.SaveSnapshot(j.snap.index, j.snap.cs, j.snap.data, n.c.cfg.trailing); err != nil {
				s.check.fail("%s snapshot at %d not saved: %v", n.name, j.snap.index, err)
			}
		} else {
			msgs := make([]*raftpb.Message, len(batch))
			for i, j := range batch {
				msgs[i] = j.msg
			}
			if err := n.c.persist(msgs); err != nil {
				s.check.fail("%s log write: %v", n.name, err)
				return
			}
			for _, m := range msgs {
				send, err := n.c.persisted(m)
				if err != nil {
					s.check.fail("%s after a log write: %v", n.name, err)
					return
				}
				s.route(n, send)
			}
		}
		s.process(n)
	})
}

// route puts messages on the network: each may be lost, delayed (so
// reordered) or duplicated; a cut link loses everything.
func (s *sim) route(from *simNode, msgs []*raftpb.Message) {
	for _, m := range msgs {
		s.check.sent(from, m)
		to := s.byID(m.GetTo())
		snap := m.GetType() == raftpb.MsgSnap
		lost := to == nil || s.cut[[2]int{from.i, to.i}] || !s.quiet && s.rng.Float64() < 0.02
		if snap { // the transport tells the sender how a snapshot went, as internal/transport does
			st, id := raft.SnapshotFinish, m.GetTo()
			if lost {
				st = raft.SnapshotFailure
			}
			s.at(from, s.between(time.Millisecond, 20*time.Millisecond), func() {
				from.c.rn.ReportSnapshot(id, st)
				s.process(from)
			})
		}
		if lost {
			if to != nil { // the transport reports a message it could not deliver
				id := to.id
				s.at(from, s.between(time.Millisecond, 20*time.Millisecond), func() {
					from.c.rn.ReportUnreachable(id)
					s.process(from)
				})
			}
			continue
		}
		copies := 1
		if !s.quiet && s.rng.Float64() < 0.02 {
			copies = 2
		}
		for range copies {
			d := s.between(100*time.Microsecond, 3*time.Millisecond)
			if s.rng.Float64() < 0.05 {
				d = s.between(5*time.Millisecond, 60*time.Millisecond)
			}
			mc := proto.Clone(m).(*raftpb.Message)
			s.at(to, d, func() {
				to.c.step(mc)
				s.process(to)
			})
		}
	}
}

func (s *sim) byID(id uint64) *simNode {
	for _, n := range s.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

// leader returns the up node that leads (and has taken over), if any.
func (s *sim) leader() *simNode {
	for _, n := range s.nodes {
		if n.c != nil && n.c.leading {
			return n
		}
	}
	return nil
}

func (s *sim) up() []*simNode {
	var up []*simNode
	for _, n := range s.nodes {
		if n.c != nil {
			up = append(up, n)
		}
	}
	return up
}

// run plays the faults for cfg.duration, then heals everything and lets the
// group converge, then checks.
func (s *sim) run() {
	s.after(s.between(100*time.Millisecond, 300*time.Millisecond), s.fault)
	for _, c := range s.clients {
		s.after(s.between(0, 200*time.Millisecond), c.next)
	}
	s.after(s.between(time.Second, 3*time.Second), s.expireOne)
	end := s.cfg.duration
	s.after(end, func() {
		s.quiet = true
		clear(s.cut)
		for _, n := range s.nodes {
			n.stall = 0
			if n.c == nil && n.member {
				s.start(n, nil)
			}
		}
		s.logf("quiet: healed, every member up")
		s.awaitLeader(s.now + quietLeaderBound)
	})
	for s.q.Len() > 0 && !s.check.failed() {
		e := heap.Pop(&s.q).(event)
		if e.at > end+5*time.Second {
			break
		}
		s.now = e.at
		s.step(e.fn)
	}
	s.check.final()
}

// quietLeaderBound is how soon after the faults stop (every member up, no
// link cut, no disk stalled) some node must lead with its term's first
// entry applied (core.leading, what Node.Ready reports): raft's election
// timeout is 10-20 ticks of 10 ms, so this leaves room for a dozen rounds.
const quietLeaderBound = 3 * time.Second

// awaitLeader checks, every tick, that a node leads by deadline: the
// liveness the safety checks do not cover (a group that never elects a
// ready leader again breaks none of them).
func (s *sim) awaitLeader(deadline time.Duration) {
	if s.leader() != nil {
		s.logf("a ready leader %v after the quiet period began", s.now-s.cfg.duration)
		return
	}
	if s.now >= deadline {
		s.check.fail("liveness: no node leads %v after the faults stopped", quietLeaderBound)
		return
	}
	s.after(simTick, func() { s.awaitLeader(deadline) })
}

// step runs one event; a panic (raft's own invariant checks, say) is a
// violation like any other. FENCE_SIM_PANIC=1 lets it through, with its
// stack, for debugging a seed.
func (s *sim) step(fn func()) {
	if os.Getenv("FENCE_SIM_PANIC") != "" {
		fn()
		return
	}
	defer func() {
		if r := recover(); r != nil {
			s.check.fail("panic: %v", r)
		}
	}()
	fn()
}

// fault injects one fault and schedules the next.
func (s *sim) fault() {
	if s.quiet {
		return
	}
	defer s.after(s.between(50*time.Millisecond, 600*time.Millisecond), s.fault)
	var members []*simNode
	for _, n := range s.nodes {
		if n.member {
			members = append(members, n)
		}
	}
	pick := func() *simNode { return members[s.rng.IntN(len(members))] }
	switch r := s.rng.IntN(100); {
	case r < 15: // crash a node, restart it later
		n := pick()
		if n.c == nil {
			return
		}
		s.crash(n)
		s.after(s.between(50*time.Millisecond, 2*time.Second), func() {
			if n.c == nil && n.member {
				s.start(n, nil)
			}
		})
	case r < 30: // crash the leader
		if n := s.leader(); n != nil {
			s.crash(n)
			s.after(s.between(100*time.Millisecond, time.Second), func() {
				if n.c == nil && n.member {
					s.start(n, nil)
				}
			})
		}
	case r < 45: // depose the leader while its writes are queued behind a slow fsync
		if n := s.leader(); n != nil {
			n.stall = s.now + s.between(200*time.Millisecond, 1500*time.Millisecond)
			s.isolate(n, s.between(300*time.Millisecond, 2*time.Second))
			s.logf("%s (leader) fsync stalls and is cut off", n.name)
		}
	case r < 55: // partition the leader away, heal while it is still applying
		if n := s.leader(); n != nil {
			s.isolate(n, s.between(100*time.Millisecond, time.Second))
		}
	case r < 65: // a random partition
		n := pick()
		s.isolate(n, s.between(100*time.Millisecond, 2*time.Second))
	case r < 72: // a one-way partition
		a, b := pick(), pick()
		if a != b {
			s.cut[[2]int{a.i, b.i}] = true
			s.logf("link %s→%s cut", a.name, b.name)
			s.after(s.between(200*time.Millisecond, 2*time.Second), func() {
				delete(s.cut, [2]int{a.i, b.i})
				s.logf("link %s→%s healed", a.name, b.name)
			})
		}
	case r < 80: // a slow disk somewhere
		n := pick()
		n.stall = s.now + s.between(50*time.Millisecond, 800*time.Millisecond)
		s.logf("%s fsync stalls", n.name)
	case r < 90: // leadership transfer
		if n := s.leader(); n != nil {
			to := pick()
			n.c.rn.TransferLeader(to.id)
			s.logf("%s transfers leadership to %s", n.name, to.name)
			s.process(n)
		}
	default: // membership: the spare joins as a learner and becomes a voter, or leaves again
		s.membership()
	}
}

// isolate cuts n off from every other node for d.
func (s *sim) isolate(n *simNode, d time.Duration) {
	var cut [][2]int
	for _, o := range s.nodes {
		if o != n {
			cut = append(cut, [2]int{n.i, o.i}, [2]int{o.i, n.i})
		}
	}
	for _, k := range cut {
		s.cut[k] = true
	}
	s.logf("%s isolated for %v", n.name, d)
	s.after(d, func() {
		for _, k := range cut {
			delete(s.cut, k)
		}
		s.logf("%s reconnected", n.name)
	})
}

// membership moves the spare node in or out of the group through the leader.
func (s *sim) membership() {
	l := s.leader()
	if l == nil {
		return
	}
	spare := s.nodes[len(s.nodes)-1]
	m := Member{Name: spare.name, RaftAddr: spare.name, ID: spare.id}
	var steps []raftpb.ConfChangeType
	if !spare.member {
		steps = []raftpb.ConfChangeType{raftpb.ConfChangeAddLearnerNode, raftpb.ConfChangeAddNode}
		spare.member = true
		if spare.c == nil {
			s.start(spare, nil)
		}
	} else {
		steps = []raftpb.ConfChangeType{raftpb.ConfChangeRemoveNode}
	}
	for k, t := range steps {
		s.after(time.Duration(k)*500*time.Millisecond, func() {
			l := s.leader()
			if l == nil {
				return
			}
			req := newRequest()
			req.cc = &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: t.Enum(), NodeId: new(m.ID)}}, Context: encodeContext(m, 0)}
			l.c.propose(req)
			s.logf("%s proposes %v of %s", l.name, t, m.Name)
			s.process(l)
			if t == raftpb.ConfChangeRemoveNode {
				s.after(time.Second, func() {
					spare.member = false
					s.crash(spare)
					spare.log = newSimLog() // a removed node comes back only as a new one
					spare.name = spare.name + "'"
					spare.id = RaftID(spare.name)
				})
			}
		})
	}
}

// expireOne has the leader expire a random client's lease, as the lessor
// does when a holder stops renewing, and schedules the next.
func (s *sim) expireOne() {
	if s.quiet {
		return
	}
	defer s.after(s.between(500*time.Millisecond, 3*time.Second), s.expireOne)
	l := s.leader()
	c := s.clients[s.rng.IntN(len(s.clients))]
	if l == nil || c.lease.IsZero() {
		return
	}
	var renewals uint64
	found := false
	l.rep.read(func(st *fsm.State) {
		st.LeaseTimes(func(id fsm.LeaseID, _, _ time.Duration, r uint64) {
			if id == c.lease {
				renewals, found = r, true
			}
		})
	})
	if !found {
		return
	}
	req := newRequest()
	req.data = fsm.EncodeBatch(nil, []fsm.Command{{Kind: fsm.KindExpire, Lease: c.lease, Renewals: renewals}})
	l.c.propose(req)
	s.logf("%s expires the lease of client %d", l.name, c.i)
	s.process(l)
}

func (s *sim) report() string {
	return strings.Join(slices.Clone(s.trace), "\n")
}

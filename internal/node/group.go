package node

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/fencehq/fence/internal/stagetrace"
)

// group runs a core: the loop goroutine drives it (ticks, messages,
// proposals, reads, applying) and the append goroutine makes its log writes
// durable, in order, while the loop goes on. Everything else talks to the
// loop through channels and the proposer's queue, but for a message from
// the network that finds the loop idle: its deliver steps it itself
// (stepNow), sparing the hand-off.
type group struct {
	c     *core
	p     *proposer
	trans Transport
	tick  time.Duration

	// running is held by whoever runs the core: the loop for each of its
	// turns, or a deliver that steps its message itself (stepNow). Only its
	// holder touches c, writesOut and ended.
	running sync.Mutex
	ended   bool // the loop has ended: nothing runs the core any more
	// started is set by start: until then no reader runs the core (its
	// transport is not set yet; messages wait in the inbox for the loop).
	started atomic.Bool
	// queued counts the messages handed to the inbox and not yet stepped:
	// while there are any, a message must not be stepped before them.
	queued atomic.Int64

	inbox chan *raftpb.Message
	props chan *request
	reads chan *request
	ctl   chan func(*core)

	appendQ *queue[appendJob]       // loop → append worker
	doneQ   *queue[*raftpb.Message] // append worker → loop: writes now durable
	// writesOut: the loop's count of log writes handed to the worker and not
	// yet taken back; snapsOut: snapshot saves handed to it and not done.
	// With both zero the worker is idle and a follower's loop writes itself.
	writesOut int
	snapsOut  atomic.Int64

	status atomic.Pointer[groupStatus]
	mu     sync.Mutex
	ms     []Member // guarded by mu: the member list, for readers off the loop
	// heard maps a sender's raft id to when its last message arrived
	// (*atomic.Int64, nanoseconds since epoch), for Members.
	heard sync.Map
	epoch time.Time
	// removed is guarded by mu: the removed members, for the raft port.
	removed removedSet

	stop     chan struct{}
	failed   chan struct{} // closed when a log write failed: the node stops
	loopDone chan struct{} // closed when the loop has ended and answered all it took
	err      error         // why, set before failed is closed
	wg       sync.WaitGroup
}

// groupStatus is what the loop publishes after every round.
type groupStatus struct {
	lead    uint64
	state   raft.StateType
	term    uint64
	leading bool
	// replayed: the node has applied what its log had committed at start
	// (core.replayed), so its member list is its log's.
	replayed bool
	// commit, applied and leaderChanges are for RaftStatus (metrics).
	commit, applied, leaderChanges uint64
}

// appendJob is one write for the append worker: a raft log write or a
// snapshot of the applied state.
type appendJob struct {
	msg  *raftpb.Message
	snap *snapshotJob
}

func newGroup(c *core, p *proposer, tick time.Duration) *group {
	g := &group{c: c, p: p, tick: tick,
		inbox: make(chan *raftpb.Message, 4096), props: make(chan *request, 4096),
		reads: make(chan *request, 4096), ctl: make(chan func(*core), 64),
		appendQ: newQueue[appendJob](), doneQ: newQueue[*raftpb.Message](),
		stop: make(chan struct{}), failed: make(chan struct{}), loopDone: make(chan struct{})}
	g.status.Store(&groupStatus{})
	g.epoch = time.Now()
	p.kick = g.kick
	return g
}

// heardFrom records that a message from id arrived now.
func (g *group) heardFrom(id uint64) {
	v, ok := g.heard.Load(id)
	if !ok {
		v, _ = g.heard.LoadOrStore(id, new(atomic.Int64))
	}
	v.(*atomic.Int64).Store(int64(time.Since(g.epoch)))
}

// sinceHeard is how long ago the last message from id arrived (ok=false:
// never, since this node started).
func (g *group) sinceHeard(id uint64) (time.Duration, bool) {
	v, ok := g.heard.Load(id)
	if !ok {
		return 0, false
	}
	return time.Since(g.epoch) - time.Duration(v.(*atomic.Int64).Load()), true
}

// start runs the loop and the append worker, sending through trans.
func (g *group) start(trans Transport) {
	g.trans = trans
	g.started.Store(true)
	g.wg.Add(2)
	go func() { defer g.wg.Done(); g.loop() }()
	go func() { defer g.wg.Done(); g.appendWorker() }()
}

func (g *group) loop() {
	t := time.NewTicker(g.tick)
	defer t.Stop()
	defer close(g.loopDone)
	defer func() { // after the core answered every batch it took: nothing queued reached raft
		err := g.failure()
		if err == nil {
			err = ErrStopped
		}
		g.p.close(err)
	}()
	defer func() {
		g.running.Lock()
		defer g.running.Unlock()
		g.ended = true
		g.halt()
	}()
	for {
		ok := true
		select { // each event but the two that end the loop takes running
		case <-g.stop:
			return
		case <-g.failed:
			return
		case <-t.C:
			g.running.Lock()
			g.c.tick()
		case m := <-g.inbox:
			g.running.Lock()
			g.stepQueued(m)
			for i := 0; i < 256 && len(g.inbox) > 0; i++ {
				g.stepQueued(<-g.inbox)
			}
		case <-g.p.ready: // round takes the batches
			g.running.Lock()
		case req := <-g.props:
			g.running.Lock()
			g.c.propose(req)
			for i := 0; i < 1024 && len(g.props) > 0; i++ {
				g.c.propose(<-g.props)
			}
		case req := <-g.reads:
			g.running.Lock()
			g.c.read(req)
			for i := 0; i < 1024 && len(g.reads) > 0; i++ {
				g.c.read(<-g.reads)
			}
		case f := <-g.ctl:
			g.running.Lock()
			f(g.c)
		case <-g.doneQ.ready:
			g.running.Lock()
			for _, m := range g.doneQ.take() {
				g.writesOut--
				if ok = g.release(m); !ok {
					break
				}
			}
		}
		ok = ok && g.round()
		g.running.Unlock()
		if !ok {
			return
		}
	}
}

// stepQueued steps a message taken from the inbox. running is held.
func (g *group) stepQueued(m *raftpb.Message) {
	g.c.step(m)
	g.queued.Add(-1)
}

// halt stops the core as the loop ends (Close, or a failed log write) and
// publishes that this node neither leads nor knows a leader any more: the
// status must not go on saying what the last round saw (Ready, /leaderz,
// the lessor and everything else off the loop read it).
func (g *group) halt() {
	g.c.stop()
	st := *g.status.Load()
	st.lead, st.state, st.leading = raft.None, raft.StateFollower, false
	g.status.Store(&st)
}

// round proposes the queued batches it may, hands out raft's pending work
// and publishes the status. It returns false if a log write failed.
func (g *group) round() bool {
	for req := g.p.next(); req != nil; req = g.p.next() {
		g.c.propose(req)
	}
	for {
		send, appends := g.c.ready()
		stagetrace.Writes("ready", appends)
		stagetrace.Msgs("send", send)
		g.trans.Send(send)
		if len(appends) == 0 || !g.writesInline(appends) {
			for _, m := range appends {
				g.writesOut++
				g.appendQ.push(appendJob{msg: m})
			}
			break
		}
		if !g.write(appends) {
			return false
		}
		for _, m := range appends {
			if !g.release(m) {
				return false
			}
		}
	}
	for _, s := range g.c.takeSnapshots() {
		g.snapsOut.Add(1)
		g.appendQ.push(appendJob{snap: &s})
	}
	st := &groupStatus{lead: g.c.lead, state: g.c.state, term: g.c.term, leading: g.c.leading, replayed: g.c.replayed,
		commit: g.c.commit, applied: g.c.applied, leaderChanges: g.c.leaderChanges}
	if old := g.status.Load(); *old != *st {
		g.status.Store(st)
	}
	if g.p.waiting() { // applying freed a batch's slot: take the next batch on the next turn
		g.p.signal()
	}
	return true
}

// write makes log writes durable, in order; a failed write stops the node.
// The append worker calls it, and a follower's loop (writesInline).
func (g *group) write(ms []*raftpb.Message) bool {
	stagetrace.Writes("write-start", ms)
	if err := g.c.persist(ms); err != nil {
		g.fail(fmt.Errorf("raft log write failed: %w", err))
		return false
	}
	stagetrace.Writes("write-done", ms)
	return true
}

// release takes back a durable write on the loop: core.persisted steps its
// local responses (after restoring a snapshot it carries) and the rest go
// out. It returns false if the node stopped.
func (g *group) release(m *raftpb.Message) bool {
	send, err := g.c.persisted(m)
	if err != nil {
		g.fail(err)
		return false
	}
	g.trans.Send(send)
	return true
}

// writesInline reports whether the loop performs this round's log writes
// ms itself, which it may only while the append worker is idle (so the
// writes stay in order): on a follower, which has nothing to do while its
// write is under way that a hand-off to the worker and back would not delay
// more; on a leader, writes without entries or a snapshot (the commit index
// moving, which persist does not sync), for which the hand-off would cost
// two goroutine wake-ups and save nothing. A leader's entries go to the
// worker, to replicate while its disk writes.
func (g *group) writesInline(ms []*raftpb.Message) bool {
	if g.writesOut != 0 || g.snapsOut.Load() != 0 {
		return false
	}
	return g.c.state == raft.StateFollower || !slices.ContainsFunc(ms, holdsEntries)
}

// holdsEntries reports whether a log write holds entries or a snapshot:
// core.persist makes it durable (an fsync).
func holdsEntries(m *raftpb.Message) bool {
	return len(m.GetEntries()) > 0 || !raft.IsEmptySnap(m.GetSnapshot())
}

// appendWorker performs the log writes in order. A write that fails stops
// the node: raft cannot go on without a durable log.
func (g *group) appendWorker() {
	for {
		select {
		case <-g.stop:
			return
		case <-g.failed:
			return
		case <-g.appendQ.ready:
		}
		var writes []*raftpb.Message // consecutive log writes: performed as one
		flush := func() bool {
			if len(writes) == 0 {
				return true
			}
			if !g.write(writes) {
				return false
			}
			for _, m := range writes {
				// Responses to other members go out now that the write is
				// durable; the loop steps the rest (and restores a snapshot
				// before its responses are released).
				g.trans.Send(g.c.remoteResponses(m))
				g.doneQ.push(m)
			}
			writes = nil
			return true
		}
		for _, j := range g.appendQ.take() {
			if j.msg != nil {
				writes = append(writes, j.msg)
				continue
			}
			if !flush() {
				return
			}
			s := j.snap
			err := g.c.cfg.log.SaveSnapshot(s.index, s.cs, s.data, g.c.cfg.trailing)
			if err != nil {
				g.c.cfg.logger.Error("snapshot not saved; the log grows until one is", "index", s.index, "err", err)
			}
			if s.saved != nil {
				s.saved <- err
			}
			g.snapsOut.Add(-1)
		}
		if !flush() {
			return
		}
	}
}

func (g *group) fail(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil {
		g.err = err
		g.c.cfg.logger.Error("raft node stopped", "err", err)
		close(g.failed)
	}
}

// tryControl runs f on the loop later, unless the loop is too busy to take
// it now (reports from the transport: raft recovers from losing them).
func (g *group) tryControl(f func(*core)) {
	select {
	case g.ctl <- f:
	default:
	}
}

// setMembers records the member list and the removed members and points
// the transport at the members. Called on the loop (and once before it
// starts).
func (g *group) setMembers(ms members, removed removedSet) {
	list := ms.sorted()
	g.mu.Lock()
	old := g.ms
	g.ms, g.removed = list, maps.Clone(removed)
	g.mu.Unlock()
	if g.trans == nil {
		return
	}
	for _, m := range list {
		if m.ID != g.c.cfg.id && !slices.Contains(old, m) {
			g.trans.SetPeer(m.ID, m.RaftAddr)
		}
	}
	for _, m := range old {
		if _, ok := ms[m.ID]; !ok && m.ID != g.c.cfg.id {
			g.trans.RemovePeer(m.ID)
		}
	}
}

// isMember reports whether id is in the member list (a voter or a learner).
func (g *group) isMember(id uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.ContainsFunc(g.ms, func(m Member) bool { return m.ID == id })
}

// isRemoved reports whether id was removed from the group (and not added
// again since).
func (g *group) isRemoved(id uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, gone := g.removed[id]
	return gone
}

// memberList returns the members, sorted by name.
func (g *group) memberList() []Member {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.ms)
}

// failure is why the node stopped on its own (a failed log write), or nil.
func (g *group) failure() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// deliver takes a message from the network: it steps it itself if the
// loop is idle (stepNow), or else hands it to the loop.
func (g *group) deliver(m *raftpb.Message) {
	stagetrace.Msg("deliver", m)
	g.heardFrom(m.GetFrom())
	if g.stepNow(m) {
		return
	}
	g.queued.Add(1)
	select {
	case g.inbox <- m:
	case <-g.stop:
		g.queued.Add(-1)
	case <-g.failed:
		g.queued.Add(-1)
	}
}

// kick takes the proposer's queued commands to raft: on the caller's
// goroutine, in the round the loop would have run, if the loop is idle
// (sparing the proposer's hand-off to the loop), or else by waking the loop.
func (g *group) kick() {
	if g.running.TryLock() {
		ran := !g.ended
		if ran {
			g.round() // false: the node failed, and the loop ends on g.failed
		}
		g.running.Unlock()
		if ran {
			return
		}
	}
	g.p.signal()
}

// stepNow steps m and runs the round it calls for on the caller's
// goroutine (a transport's reader: on a follower it makes the write durable
// and sends the answer, on the leader it commits and answers the
// proposers), sparing the hand-off to the loop and back, if the loop is
// idle and no message waits in the inbox (m must not overtake one from the
// same peer). It reports whether it did. A log write that fails stops the
// node as on the loop.
func (g *group) stepNow(m *raftpb.Message) bool {
	if !g.started.Load() || !g.running.TryLock() {
		return false
	}
	defer g.running.Unlock()
	if g.ended || g.queued.Load() != 0 {
		return false
	}
	g.c.step(m)
	g.round() // false: the node failed, and the loop ends on g.failed
	return true
}

// control runs f on the loop and waits for it.
func (g *group) control(ctx context.Context, f func(*core)) error {
	done := make(chan struct{})
	select {
	case g.ctl <- func(c *core) { f(c); close(done) }:
	case <-ctx.Done():
		return ctx.Err()
	case <-g.stop:
		return ErrStopped
	case <-g.failed:
		return g.failure()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-g.loopDone:
		select {
		case <-done:
			return nil
		default:
			return ErrStopped
		}
	}
}

// submit hands req to the loop on ch and waits for its outcome. A ctx that
// ends after the loop took a proposal yields ErrIndeterminate.
func (g *group) submit(ctx context.Context, ch chan *request, req *request) outcome {
	select {
	case ch <- req:
	case <-ctx.Done():
		return outcome{err: ctx.Err()}
	case <-g.stop:
		return outcome{err: ErrStopped}
	case <-g.failed:
		return outcome{err: g.failure()}
	}
	select {
	case o := <-req.done:
		return o
	case <-g.loopDone: // every request the loop took is answered; one still queued never will be
		select {
		case o := <-req.done:
			return o
		default:
			if err := g.failure(); err != nil {
				return outcome{err: err}
			}
			return outcome{err: ErrStopped}
		}
	case <-ctx.Done():
		if ch == g.reads {
			return outcome{err: ctx.Err()}
		}
		return outcome{err: fmt.Errorf("%w (%v)", ErrIndeterminate, ctx.Err())}
	}
}

// propose commits data as one entry and returns the state machine's result.
func (g *group) propose(ctx context.Context, data []byte) outcome {
	req := newRequest()
	req.data = data
	return g.submit(ctx, g.props, req)
}

// read returns once this node, confirmed leader by a quorum, has applied
// everything committed before the call.
func (g *group) read(ctx context.Context) error {
	return g.submit(ctx, g.reads, newRequest()).err
}

// changeMembers commits a membership change.
func (g *group) changeMembers(ctx context.Context, cc *raftpb.ConfChangeV2) error {
	req := newRequest()
	req.cc = cc
	return g.submit(ctx, g.props, req).err
}

func (g *group) close() {
	select {
	case <-g.stop:
	default:
		close(g.stop)
	}
	g.wg.Wait()
}

// queue is an unbounded FIFO between two goroutines: push never blocks, and
// ready is signalled when there is something to take.
type queue[T any] struct {
	mu    sync.Mutex
	items []T
	ready chan struct{}
}

func newQueue[T any]() *queue[T] { return &queue[T]{ready: make(chan struct{}, 1)} }

func (q *queue[T]) push(v T) {
	q.mu.Lock()
	q.items = append(q.items, v)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *queue[T]) take() []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	return items
}

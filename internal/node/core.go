package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/planted"
	"github.com/fencehq/fence/internal/stagetrace"
	"github.com/fencehq/fence/internal/transport"
)

// Log is a node's durable raft state: hard state, entries and snapshots, and
// a raft.Storage view of them. internal/raftstore keeps it on disk (etcd's
// WAL and snapshotter); the simulation keeps it in memory and can lose
// what was not synced.
type Log interface {
	raft.Storage
	// Append makes hs (nil or empty: unchanged), ents (replacing any entries
	// from the first one's index on) and snap (nil or empty: none) durable
	// before it returns, then shows them in the raft.Storage view.
	Append(hs *raftpb.HardState, ents []*raftpb.Entry, snap *raftpb.Snapshot) error
	// SetHardState writes hs without waiting for the disk when only the
	// commit index moved (nothing waits on that write); the next Append
	// makes it durable.
	SetHardState(hs *raftpb.HardState) error
	// SaveSnapshot durably records a snapshot of the applied state at index
	// and compacts the log, keeping trailing entries before index.
	SaveSnapshot(index uint64, cs *raftpb.ConfState, data []byte, trailing uint64) error
}

// Transport carries raft messages to the other members (internal/transport
// over gRPC; the simulation's network in tests). Send never blocks: a
// message it cannot deliver is lost, which raft tolerates.
type Transport interface {
	Send(msgs []*raftpb.Message)
	SetPeer(id uint64, addr string)
	RemovePeer(id uint64)
}

// stateMachine is what committed entries are applied to.
type stateMachine interface {
	// apply applies one entry's payload and returns its outcome. traces,
	// when this node proposed the entry, holds its commands' trace ids
	// (zero: not traced); nil otherwise.
	apply(index uint64, data []byte, traces []trace.TraceID) any
	// snapshot writes the encoding of the state as applied so far to w.
	snapshot(w io.Writer) error
	// restore replaces the state with a snapshot's, taken at index.
	restore(index uint64, data []byte) error
}

// Errors a proposal or read may end with.
var (
	// ErrNotLeader: this node cannot take the proposal or read now; it was
	// not written to the log.
	ErrNotLeader = errors.New("this node is not the leader")
	// ErrIndeterminate: the proposal reached the log but this node lost
	// leadership (or stopped) before it learned whether it committed.
	ErrIndeterminate = errors.New("outcome unknown: leadership changed while the command was in flight; retry with the same request id")
	// ErrStopped: the node is shut down; the call did not reach raft.
	ErrStopped = errors.New("node stopped")
	// ErrMembershipBusy: raft refused a membership change because another
	// one is not applied yet (nothing changed); retry shortly.
	ErrMembershipBusy = errors.New("another membership change is in progress; retry shortly")
	// ErrLastVoter: the change would leave the group without a voter.
	ErrLastVoter = errors.New("the group would have no voter left")
)

// outcome is what a proposal or read learns: the entry's index and its
// result, or an error.
type outcome struct {
	index  uint64
	result any
	err    error
}

// request is a proposal or read handed to the core. Its outcome goes to
// then, if set (called on the loop; it must not block), else to done
// (buffered, 1).
type request struct {
	data []byte               // a proposal's payload; nil for reads and conf changes
	cc   *raftpb.ConfChangeV2 // a membership change
	done chan outcome
	then func(outcome)
	// traced, set on a batch with a traced command (proposer.next), is
	// given the trace id of each command for the audit file and the times
	// the entry's apply began and ended; nil for the rest.
	traced *batchTrace
}

func newRequest() *request { return &request{done: make(chan outcome, 1)} }

func (r *request) finish(o outcome) {
	if r.then != nil {
		r.then(o)
		return
	}
	r.done <- o
}

// coreConfig is what a core needs.
type coreConfig struct {
	id                uint64
	log               Log
	sm                stateMachine
	electionTick      int
	heartbeatTick     int
	snapshotThreshold uint64
	trailing          uint64
	logger            *slog.Logger
	raftLogLevel      slog.Level
	// leadership is told when this node starts leading with every earlier
	// entry applied (true), and when it stops (false). Called on the apply
	// path; it must not block.
	leadership func(leading bool)
	// membersChanged is told the member list after it changed (apply path).
	membersChanged func(members, removedSet)
}

// core is one raft group's node: the RawNode, the state machine it applies
// to, the proposals and reads waiting for their outcome, and the member
// list. It runs no goroutines: the loop (or the simulation) calls it from
// one goroutine; persist alone may run elsewhere.
type core struct {
	cfg     coreConfig
	rn      *raft.RawNode
	members members
	removed removedSet // members removed (and not added again), for the raft port
	added   bool       // a member was added in the entries being applied (applyEntries snapshots)
	cs      *raftpb.ConfState
	applied uint64
	snapped uint64 // index of the last snapshot taken or restored
	// snapSize is the length of the last snapshot this node took: the
	// next one's buffer is sized from it, so it is not grown (copied) as
	// it fills.
	snapSize int
	// written is the term and vote of the last hard state persist wrote
	// (only persist touches it: one write at a time, in order).
	written termVote
	// replayTo is the commit index the log had at start; replayed says the
	// node has applied up to it, so its member list is what its log says
	// (until then a restarted member's list may lack itself).
	replayTo uint64
	replayed bool
	// commit is raft's commit index as last seen; leaderChanges counts the
	// times the leader this node knows changed (metrics).
	commit        uint64
	leaderChanges uint64

	lead    uint64
	state   raft.StateType
	term    uint64
	leading bool // leader, and its own term's first entry is applied
	hasLed  bool // has been leading (read only by a planted bug)
	// campaign: this node became the only voter; it campaigns once raft
	// has heard the change is applied
	campaign bool

	nextID    uint64              // last proposal or read id used
	proposals map[uint64]*request // by proposal id, until applied or given up
	changes   []uint64            // ids of membership changes proposed, in log order, not yet applied
	newReads  []*request          // reads not yet sent to raft
	reads     map[uint64][]*request
	waiting   []readWait // reads whose index is known, waiting for apply
	snapshots []snapshotJob
}

type readWait struct {
	index uint64
	reqs  []*request
}

// snapshotJob is a snapshot of the applied state for the append worker to save.
type snapshotJob struct {
	index uint64
	cs    *raftpb.ConfState
	data  []byte
	saved chan error // if set, told the outcome of saving (buffered)
}

func newCore(cfg coreConfig, boot []Member, idSeed uint64) (*core, error) {
	c := &core{cfg: cfg, members: members{}, removed: removedSet{}, proposals: map[uint64]*request{}, reads: map[uint64][]*request{}, nextID: idSeed}
	snap, err := cfg.log.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("read snapshot: %w", err)
	}
	hs, cs, err := cfg.log.InitialState()
	if err != nil {
		return nil, fmt.Errorf("read raft state: %w", err)
	}
	c.cs = cs
	c.written = termVoteOf(hs)
	if !raft.IsEmptySnap(snap) {
		if err := c.restore(snap); err != nil {
			return nil, err
		}
	}
	rc := raftConfig(cfg.id, cfg.log, cfg.electionTick, cfg.heartbeatTick, raftLogger{cfg.logger, cfg.raftLogLevel})
	rc.Applied, rc.AsyncStorageWrites = c.applied, true
	if c.rn, err = raft.NewRawNode(rc); err != nil {
		return nil, fmt.Errorf("start raft: %w", err)
	}
	last, err := cfg.log.LastIndex()
	if err != nil {
		return nil, err
	}
	if last == 0 && raft.IsEmptyHardState(hs) && len(boot) > 0 {
		peers := make([]raft.Peer, len(boot))
		for i, m := range boot {
			peers[i] = raft.Peer{ID: m.ID, Context: encodeContext(m, 0)}
		}
		if err := c.rn.Bootstrap(peers); err != nil {
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
	}
	c.replayTo = c.rn.Status().HardState.GetCommit()
	c.replayed = c.applied >= c.replayTo
	return c, nil
}

// raftConfig is fence's raft settings: CheckQuorum and PreVote, reads
// confirmed by a quorum (ReadIndex), no proposal forwarding (only the
// leader takes commands), a removed leader steps down, and bounded messages,
// batches and uncommitted log.
func raftConfig(id uint64, log raft.Storage, electionTick, heartbeatTick int, logger raft.Logger) *raft.Config {
	return &raft.Config{
		ID:                        id,
		ElectionTick:              electionTick,
		HeartbeatTick:             heartbeatTick,
		Storage:                   log,
		MaxSizePerMsg:             1 << 20,
		MaxCommittedSizePerReady:  64 << 20,
		MaxUncommittedEntriesSize: 256 << 20,
		MaxInflightMsgs:           256,
		CheckQuorum:               true,
		PreVote:                   true,
		ReadOnlyOption:            raft.ReadOnlySafe,
		DisableProposalForwarding: true,
		StepDownOnRemoval:         true,
		Logger:                    logger,
	}
}

// tick advances raft's logical clock by one tick.
func (c *core) tick() { c.rn.Tick() }

// step hands raft a message from the network, if it is one a member sends.
func (c *core) step(m *raftpb.Message) {
	if !transport.PeerMessage(m.GetType()) || m.GetTo() != c.cfg.id || m.GetFrom() == c.cfg.id || m.GetFrom() == raft.None {
		c.cfg.logger.Warn("refused a raft message no member sends", "type", m.GetType().String(), "from", m.GetFrom(), "to", m.GetTo())
		return
	}
	stagetrace.Msg("step", m)
	c.stepLocal(m)
}

// stepLocal hands raft a message of its own: a storage write's response.
func (c *core) stepLocal(m *raftpb.Message) {
	if err := c.rn.Step(m); err != nil && !errors.Is(err, raft.ErrStepPeerNotFound) && !errors.Is(err, raft.ErrStepLocalMsg) {
		c.cfg.logger.Debug("raft message refused", "type", m.GetType().String(), "from", m.GetFrom(), "err", err)
	}
}

// propose appends req to the leader's log, or refuses it at once.
func (c *core) propose(req *request) {
	if planted.DeposedRenewal && c.hasLed && c.state != raft.StateLeader && c.renewFromMemory(req) {
		return
	}
	if c.state != raft.StateLeader {
		req.finish(outcome{err: ErrNotLeader})
		return
	}
	c.nextID++
	id := c.nextID
	var err error
	if req.cc != nil {
		cc := proto.Clone(req.cc).(*raftpb.ConfChangeV2)
		mc, derr := decodeContext(cc.Context)
		if derr != nil {
			req.finish(outcome{err: derr})
			return
		}
		if c.removesLastVoter(cc) {
			req.finish(outcome{err: ErrLastVoter})
			return
		}
		cc.Context = encodeContext(mc.Member, id)
		if err = c.rn.ProposeConfChange(cc); err == nil {
			c.changes = append(c.changes, id)
		}
	} else {
		data := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(req.data)), id)
		err = c.rn.Propose(append(data, req.data...))
	}
	if err != nil {
		req.finish(outcome{err: fmt.Errorf("%w (%v)", ErrNotLeader, err)})
		return
	}
	c.proposals[id] = req
}

// removesLastVoter reports whether cc would leave no voter (raft would
// commit it and then panic applying it, on every restart).
func (c *core) removesLastVoter(cc *raftpb.ConfChangeV2) bool {
	voters := maps.Clone(c.rn.Status().Config.Voters[0])
	for _, ch := range cc.GetChanges() {
		switch ch.GetType() {
		case raftpb.ConfChangeRemoveNode, raftpb.ConfChangeAddLearnerNode:
			delete(voters, ch.GetNodeId())
		case raftpb.ConfChangeAddNode:
			voters[ch.GetNodeId()] = struct{}{}
		}
	}
	return len(voters) == 0
}

// read queues a linearizable read: it finishes once this node, still the
// leader, has applied everything committed when the read arrived.
func (c *core) read(req *request) {
	if !c.leading {
		req.finish(outcome{err: ErrNotLeader})
		return
	}
	c.newReads = append(c.newReads, req)
}

// flushReads asks raft for one read index covering every queued read.
func (c *core) flushReads() {
	if len(c.newReads) == 0 {
		return
	}
	c.nextID++
	c.reads[c.nextID] = c.newReads
	c.newReads = nil
	c.rn.ReadIndex(binary.BigEndian.AppendUint64(nil, c.nextID))
}

// ready takes raft's pending work: it returns the messages for the network
// and the log writes for the append worker (in order), applies committed
// entries, and steps local responses, until raft has nothing more.
func (c *core) ready() (send []*raftpb.Message, appends []*raftpb.Message) {
	c.flushReads()
	for c.rn.HasReady() {
		rd := c.rn.Ready()
		if rd.SoftState != nil {
			c.softState(rd.SoftState)
		}
		if rd.HardState != nil {
			c.term, c.commit = rd.HardState.GetTerm(), rd.HardState.GetCommit()
		}
		for _, rs := range rd.ReadStates {
			c.readState(rs)
		}
		for _, m := range rd.Messages {
			switch m.GetTo() {
			case raft.LocalAppendThread:
				if planted.ApplyUncommitted {
					c.applyEntries(slices.DeleteFunc(slices.Clone(m.GetEntries()), func(e *raftpb.Entry) bool { return e.GetType() != raftpb.EntryNormal }))
				}
				appends = append(appends, m)
			case raft.LocalApplyThread:
				c.applyEntries(m.GetEntries())
				for _, r := range m.GetResponses() {
					c.stepLocal(r)
				}
				if c.campaign { // now that raft knows the change is applied
					c.campaign = false
					if c.state != raft.StateLeader {
						_ = c.rn.Campaign()
					}
				}
			default:
				send = append(send, m)
			}
		}
	}
	return send, appends
}

// persist performs queued log writes of the append worker (MsgStorageAppend
// messages, in order) as one: their entries merged (a later message's
// entries replace an earlier one's from their first index on) with the last
// hard state, made durable (Append) when they hold entries, or when they
// carry responses and change the term or the vote. A hard state whose only
// change is the commit index goes to SetHardState, unsynced, responses or
// not — as etcd's WAL does (raft.MustSync): what a write's responses state
// (a follower's MsgAppResp to a MsgApp that only moved the commit index)
// depends on entries the writes before it made durable, in order, and on
// the term and vote, never on the commit index, which raft learns again
// from the leader. A message with a snapshot is written on its own. It
// touches only the Log (and c.written), so it may run on another goroutine
// than the rest of the core.
func (c *core) persist(ms []*raftpb.Message) error {
	var hs *raftpb.HardState
	var ents []*raftpb.Entry
	responses := false
	flush := func() error {
		var err error
		switch {
		case len(ents) > 0 || responses && hs != nil && termVoteOf(hs) != c.written:
			err = c.cfg.log.Append(hs, ents, nil)
		case hs != nil:
			err = c.cfg.log.SetHardState(hs)
		}
		if err == nil && hs != nil {
			c.written = termVoteOf(hs)
		}
		hs, ents, responses = nil, nil, false
		return err
	}
	for _, m := range ms {
		if snap := m.GetSnapshot(); !raft.IsEmptySnap(snap) {
			if err := flush(); err != nil {
				return err
			}
			h := hardState(m)
			if err := c.cfg.log.Append(h, m.GetEntries(), snap); err != nil {
				return err
			}
			if h != nil {
				c.written = termVoteOf(h)
			}
			continue
		}
		if h := hardState(m); h != nil {
			hs = h
		}
		ents = mergeEntries(ents, m.GetEntries())
		responses = responses || len(m.GetResponses()) > 0
	}
	return flush()
}

// termVote is the part of a hard state that must be durable before a
// node answers anything that depends on it.
type termVote struct{ term, vote uint64 }

func termVoteOf(hs *raftpb.HardState) termVote { return termVote{hs.GetTerm(), hs.GetVote()} }

// hardState is the hard state a MsgStorageAppend carries, or nil.
func hardState(m *raftpb.Message) *raftpb.HardState {
	if m.Term == nil && m.Vote == nil && m.Commit == nil {
		return nil
	}
	return &raftpb.HardState{Term: new(m.GetTerm()), Vote: new(m.GetVote()), Commit: new(m.GetCommit())}
}

// mergeEntries appends later entries to earlier ones, dropping the earlier
// ones from the later ones' first index on (raft's truncation).
func mergeEntries(earlier, later []*raftpb.Entry) []*raftpb.Entry {
	if len(later) == 0 {
		return earlier
	}
	first := later[0].GetIndex()
	keep := len(earlier)
	for keep > 0 && earlier[keep-1].GetIndex() >= first {
		keep--
	}
	return append(earlier[:keep:keep], later...)
}

// persisted takes back a log write the append worker made durable: a
// snapshot from the leader replaces the state, then the write's responses
// are stepped (local) or returned for the network.
func (c *core) persisted(m *raftpb.Message) (send []*raftpb.Message, err error) {
	if snap := m.GetSnapshot(); !raft.IsEmptySnap(snap) {
		if err := c.restore(snap); err != nil {
			return nil, err
		}
	}
	for _, r := range m.GetResponses() {
		if r.GetTo() == c.cfg.id {
			c.stepLocal(r)
		} else {
			send = append(send, r)
		}
	}
	return send, nil
}

// remoteResponses takes out of a log write made durable its responses to
// other members, unless it carries a snapshot (those wait for the loop to
// restore it). It touches only m, so the append worker calls it.
func (c *core) remoteResponses(m *raftpb.Message) []*raftpb.Message {
	if !raft.IsEmptySnap(m.GetSnapshot()) {
		return nil
	}
	var remote []*raftpb.Message
	local := m.Responses[:0:0]
	for _, r := range m.GetResponses() {
		if r.GetTo() == c.cfg.id {
			local = append(local, r)
		} else {
			remote = append(remote, r)
		}
	}
	m.Responses = local
	return remote
}

// takeSnapshots returns the snapshots due for the append worker to save.
func (c *core) takeSnapshots() []snapshotJob {
	jobs := c.snapshots
	c.snapshots = nil
	return jobs
}

func (c *core) softState(ss *raft.SoftState) {
	wasLeader := c.state == raft.StateLeader
	if ss.Lead != c.lead {
		c.leaderChanges++
	}
	c.lead, c.state = ss.Lead, ss.RaftState
	if wasLeader && c.state != raft.StateLeader {
		c.stepDown()
	}
}

// stepDown gives up on what waited for this node's leadership: proposals may
// still commit under the next leader (the fsm answers a retry with the first
// outcome), reads are refused.
func (c *core) stepDown() {
	for id, req := range c.proposals {
		req.finish(outcome{err: ErrIndeterminate})
		delete(c.proposals, id)
	}
	c.changes = nil
	c.failReads(ErrNotLeader)
	if c.leading {
		c.leading = false
		c.cfg.leadership(false)
	}
}

func (c *core) failReads(err error) {
	for _, req := range c.newReads {
		req.finish(outcome{err: err})
	}
	c.newReads = nil
	for id, reqs := range c.reads {
		for _, req := range reqs {
			req.finish(outcome{err: err})
		}
		delete(c.reads, id)
	}
	for _, w := range c.waiting {
		for _, req := range w.reqs {
			req.finish(outcome{err: err})
		}
	}
	c.waiting = nil
}

func (c *core) readState(rs raft.ReadState) {
	if len(rs.RequestCtx) != 8 {
		return
	}
	id := binary.BigEndian.Uint64(rs.RequestCtx)
	reqs, ok := c.reads[id]
	if !ok {
		return
	}
	delete(c.reads, id)
	c.waiting = append(c.waiting, readWait{index: rs.Index, reqs: reqs})
	c.finishReads()
}

// finishReads answers the reads whose index is applied.
func (c *core) finishReads() {
	n := 0
	for _, w := range c.waiting {
		if w.index > c.applied {
			c.waiting[n] = w
			n++
			continue
		}
		for _, req := range w.reqs {
			req.finish(outcome{index: w.index})
		}
	}
	clear(c.waiting[n:])
	c.waiting = c.waiting[:n]
}

// applyEntries applies committed entries in log order.
func (c *core) applyEntries(ents []*raftpb.Entry) {
	for _, e := range ents {
		if e.GetIndex() <= c.applied {
			continue
		}
		switch e.GetType() {
		case raftpb.EntryNormal:
			c.applyNormal(e)
		default:
			if cc, ok, err := confChangeOf(e); ok {
				c.applyConfChange(e, cc, err)
			}
		}
		c.applied = e.GetIndex()
	}
	c.finishReads()
	c.replayed = c.replayed || c.applied >= c.replayTo
	if c.applied-c.snapped >= c.cfg.snapshotThreshold || c.added && c.replayed { // (not for adds replayed at a restart)
		c.snapshotNow()
	}
	c.added = false
}

// snapshotNow queues a snapshot of the applied state.
func (c *core) snapshotNow() {
	if c.applied == c.snapped {
		return
	}
	data, err := snapshotData(c.members, c.removed, c.cfg.sm, c.snapSize+c.snapSize/8)
	if err != nil { // a bytes.Buffer's writes do not fail: not reached
		c.cfg.logger.Error("snapshot not taken", "err", err)
		return
	}
	c.snapSize = len(data)
	c.snapshots = append(c.snapshots, snapshotJob{index: c.applied, cs: proto.Clone(c.cs).(*raftpb.ConfState), data: data})
	c.snapped = c.applied
}

func (c *core) applyNormal(e *raftpb.Entry) {
	data := e.GetData()
	if len(data) == 0 {
		switch {
		case c.state != raft.StateLeader || e.GetTerm() != c.term:
		case !c.leading: // this leader's first entry: everything before it is applied now
			c.leading, c.hasLed = true, true
			c.cfg.leadership(true)
		case len(c.changes) > 0: // a membership change raft refused (it appends an empty entry instead)
			id := c.changes[0]
			c.changes = c.changes[1:]
			if req := c.proposals[id]; req != nil {
				delete(c.proposals, id)
				req.finish(outcome{index: e.GetIndex(), err: ErrMembershipBusy})
			}
		}
		return
	}
	if len(data) < 8 {
		c.cfg.logger.Error("skipping a log entry too short to be fence's", "index", e.GetIndex())
		return
	}
	id := binary.BigEndian.Uint64(data)
	stagetrace.Mark("apply", e.GetIndex())
	req := c.proposals[id]
	var res any
	if req != nil && req.traced != nil {
		res = req.traced.apply(c.cfg.sm, e.GetIndex(), data[8:])
	} else {
		res = c.cfg.sm.apply(e.GetIndex(), data[8:], nil)
	}
	if req != nil {
		delete(c.proposals, id)
		o := outcome{index: e.GetIndex(), result: res}
		if err, ok := res.(error); ok {
			o = outcome{index: e.GetIndex(), err: err}
		}
		req.finish(o)
	}
}

func (c *core) applyConfChange(e *raftpb.Entry, cc raftpb.ConfChangeI, decodeErr error) {
	if decodeErr != nil {
		c.cfg.logger.Error("skipping an undecodable membership change", "index", e.GetIndex(), "err", decodeErr)
		return
	}
	v2 := cc.AsV2()
	mc, err := decodeContext(v2.GetContext())
	if err != nil {
		c.cfg.logger.Error("membership change without a readable member", "index", e.GetIndex(), "err", err)
	}
	c.cs = c.rn.ApplyConfChange(cc)
	if v := c.cs.GetVoters(); len(v) == 1 && v[0] == c.cfg.id && c.state != raft.StateLeader {
		c.campaign = true // the only voter waits for no one (a new single node, a group shrunk to one)
	}
	c.members.apply(v2, mc, err, c.removed)
	for _, ch := range v2.GetChanges() {
		// A new member whose log must start from a snapshot (the log is
		// compacted past its start) gets the newest one, and raft refuses
		// a snapshot whose configuration lacks the node: take one that
		// lists it (applyEntries, once this entry is applied).
		t := ch.GetType()
		c.added = c.added || t == raftpb.ConfChangeAddLearnerNode || t == raftpb.ConfChangeAddNode
	}
	c.cfg.membersChanged(c.members, c.removed)
	if i := slices.Index(c.changes, mc.Proposal); mc.Proposal != 0 && i >= 0 {
		c.changes = slices.Delete(c.changes, i, i+1)
	}
	if req := c.proposals[mc.Proposal]; mc.Proposal != 0 && req != nil {
		delete(c.proposals, mc.Proposal)
		req.finish(outcome{index: e.GetIndex()})
	}
}

// renewFromMemory answers a batch of renewals from this node's state,
// without raft, as if they had committed: only the planted bug
// DeposedRenewal calls it (a node that led once goes on renewing after it
// lost leadership).
func (c *core) renewFromMemory(req *request) bool {
	r, ok := c.cfg.sm.(*replica)
	if !ok || req.cc != nil {
		return false
	}
	cmds, err := fsm.DecodeBatch(req.data)
	if err != nil || slices.ContainsFunc(cmds, func(cmd fsm.Command) bool { return cmd.Kind != fsm.KindRenew }) {
		return false
	}
	results := make([]fsm.Result, len(cmds))
	r.read(func(st *fsm.State) {
		for i, cmd := range cmds {
			results[i].Code = fsm.LeaseNotFound
			if l, ok := st.Lease(cmd.Lease); ok {
				results[i] = fsm.Result{Code: fsm.OK, TTL: l.TTL}
				for _, name := range l.Holds { // as a real answer would, so the holder keeps trusting it
					k, _ := st.Lock(name)
					results[i].Held = append(results[i].Held, k.Token)
				}
			}
		}
	})
	req.finish(outcome{result: results})
	return true
}

// restore replaces the state machine and member list with a snapshot's.
func (c *core) restore(snap *raftpb.Snapshot) error {
	ms, removed, state, err := decodeSnapshot(snap.GetData())
	if err != nil {
		return fmt.Errorf("snapshot at index %d: %w", snap.GetMetadata().GetIndex(), err)
	}
	if err := c.cfg.sm.restore(snap.GetMetadata().GetIndex(), state); err != nil {
		return fmt.Errorf("snapshot at index %d: %w", snap.GetMetadata().GetIndex(), err)
	}
	c.members, c.removed = ms, removed
	c.cs = snap.GetMetadata().GetConfState()
	c.applied = snap.GetMetadata().GetIndex()
	c.snapped = c.applied
	c.snapSize = len(snap.GetData())
	c.replayed = c.replayed || c.applied >= c.replayTo
	c.cfg.membersChanged(c.members, c.removed)
	return nil
}

// stop finishes everything still waiting, and ends this node's leadership:
// a stopped core leads no more (a loop that ended on a failed log write
// must not leave the node's leader duties running).
func (c *core) stop() {
	for id, req := range c.proposals {
		req.finish(outcome{err: ErrIndeterminate})
		delete(c.proposals, id)
	}
	c.failReads(ErrStopped)
	if c.leading {
		c.leading = false
		c.cfg.leadership(false)
	}
}

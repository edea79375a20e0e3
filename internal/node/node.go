package node

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencehq/fence/internal/audit"
	"github.com/fencehq/fence/internal/clock"
	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/hotlocks"
	"github.com/fencehq/fence/internal/metrics"
	"github.com/fencehq/fence/internal/raftstore"
	"github.com/fencehq/fence/internal/transport"
	"github.com/fencehq/fence/internal/watch"
)

// Config is what a node needs. The server fills it from its own Config.
type Config struct {
	// Name is this node's id in the group (--node-id); it never changes for a data dir.
	Name string
	// DataDir holds FORMAT, LOCK and the raft log (raft/).
	DataDir string
	// RaftAddr is where other members reach this node: recorded in the
	// membership when the group is bootstrapped, and checked on every later
	// start (a member's address never changes: the others would go on
	// dialing the old one). The transport listens there unless RaftListener
	// is set.
	RaftAddr string
	// RaftListener, if set, is where the transport serves (the server binds
	// every port before it touches the data dir; tests pick free ports).
	// New takes it over: it is closed with the node, or when New fails.
	RaftListener net.Listener
	// ClientAddr is this node's gRPC address. It goes to its peers in its
	// raft stream handshakes, and the leader records it in the replicated
	// state, so that followers can redirect clients and Members names it.
	ClientAddr string
	// Bootstrap lists the voters of a new group (this node included), the
	// same on every node; empty (and no Join) means a single node.
	Bootstrap []Member
	// Join, if set, is the group this new node was added to (see AddMember);
	// its first start takes the cluster id and the members from it.
	Join *JoinInfo
	// WrapTransport, if set, wraps the transport (tests cut links this way).
	WrapTransport func(Transport) Transport
	// RaftServerTLS and RaftClientTLS, if set, make the raft port mutual
	// TLS: accepted connections must present a certificate of the cluster's
	// CA, and dialed peers must serve one (see transport.Config). Nil:
	// plaintext.
	RaftServerTLS *tls.Config
	RaftClientTLS func(addr string) *tls.Config

	// TickInterval is how often the leader logs elapsed time and expires leases.
	TickInterval time.Duration
	// MaxBatch bounds the commands packed into one raft entry.
	MaxBatch int
	// SnapshotThreshold is the number of applied entries that triggers a snapshot.
	SnapshotThreshold uint64
	// TrailingLogs is how many entries a snapshot leaves in the log for slow followers.
	TrailingLogs uint64
	// HeartbeatTimeout and ElectionTimeout are raft's failure-detection
	// times: raft ticks every ElectionTimeout/10, an election starts after
	// 10 to 20 ticks without a leader, and the leader heartbeats every
	// HeartbeatTimeout.
	HeartbeatTimeout, ElectionTimeout time.Duration
	// HotLocks is how many lock names the hot-lock sketch tracks (0:
	// hotlocks.DefaultK).
	HotLocks int
	// WatchHistory is how many lock events the node keeps for watchers to
	// resume from (0: watch.DefaultMaxEvents).
	WatchHistory int

	// AuditFile, if set, receives one audit.Record per audited entry.
	AuditFile string
	// Clock drives leases, ticks and lock-delays. Raft keeps its own timers.
	Clock clock.Clock
	// Metrics receives the node's counters.
	Metrics *metrics.Server
	// Logger receives structured logs.
	Logger *slog.Logger
	// RaftLogLevel is the level of the raft library's own log (see ParseRaftLogLevel).
	RaftLogLevel slog.Level
}

// JoinInfo is what a member tells a node it added: the cluster id and the
// members (the new one included).
type JoinInfo struct {
	ClusterID uint64
	Members   []Member
}

// Node is one fence node's share of the raft group: the raft loop, its
// durable log and transport, the replicated fsm.State, the proposer that
// batches commands, the lessor (the leader's lease duties) and the waiters
// of blocked acquires. See doc.go for its goroutines and locks.
type Node struct {
	cfg       Config
	log       *slog.Logger
	id        uint64
	clusterID uint64

	lis      net.Listener // the raft port until the transport takes it over
	dirLock  *os.File
	store    *raftstore.Store
	trans    *transport.Transport
	group    *group
	replica  *replica
	proposer *proposer
	lessor   *lessor
	waiters  waiters
	history  *watch.History   // the lock events applied, for Watch
	holds    holdTimes        // guarded by replica.mu: when each live grant began, for the hold-time metrics
	waits    waitStarts       // guarded by replica.mu: when each queued acquire began, for the wait-time metrics
	hot      *hotlocks.Sketch // guarded by replica.mu: the hottest lock names, for HotLocks
	addrs    *addrBook        // members' client addresses, for the leader to record
	audit    *audit.Log       // nil unless Config.AuditFile is set
	led      atomic.Bool      // this node has led (read only by a planted bug)
	// leaderEnd is closed when this node's leadership ends (closed while it
	// does not lead); see LeadershipEnds.
	leaderMu  sync.Mutex
	leaderEnd chan struct{}

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed sync.Once
	err    error
}

// metadata is what the raft log records about its group.
type metadata struct {
	ClusterID uint64 `json:"cluster_id"`
	Name      string `json:"name"`
}

// HasLog reports whether dataDir already holds this node's raft log (a
// node that joins asks to be added only on its first start).
func HasLog(dataDir string) bool { return raftstore.Exists(filepath.Join(dataDir, raftDir)) }

// New opens (or creates) the data dir, starts the raft group and the
// transport, and returns; the node leads or follows when raft says so (see
// Ready and WaitReady).
func New(cfg Config) (*Node, error) {
	n := &Node{cfg: cfg, log: cfg.Logger, id: RaftID(cfg.Name), addrs: newAddrBook()}
	if err := n.open(); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

func (n *Node) open() error {
	cfg := n.cfg
	// The port first: a start that cannot listen changes nothing on disk.
	lis := cfg.RaftListener
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", cfg.RaftAddr); err != nil {
			return fmt.Errorf("raft listener on %s: %w", cfg.RaftAddr, err)
		}
	}
	n.lis = lis
	if cfg.RaftAddr == "" {
		n.cfg.RaftAddr = lis.Addr().String()
		cfg = n.cfg
	}
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	var err error
	if n.dirLock, err = lockDataDir(cfg.DataDir); err != nil {
		return err
	}
	created, err := checkFormat(cfg.DataDir)
	if err != nil {
		return err
	}
	boot, err := n.openLog(created)
	if err != nil {
		return err
	}
	if err := n.checkRecordedAddr(); err != nil {
		return err
	}
	if cfg.AuditFile != "" { // after the checks that refuse a start: a refused one creates no file
		if n.audit, err = audit.Open(cfg.AuditFile); err != nil {
			return err
		}
	}

	n.history = watch.New(cfg.WatchHistory, 0)
	n.holds = holdTimes{}
	n.waits = waitStarts{}
	n.hot = hotlocks.New(cfg.HotLocks, 0)
	n.replica = &replica{state: fsm.New(), applied: n.applied, restored: n.restored, log: n.log}
	tick := max(time.Millisecond, cfg.ElectionTimeout/10)
	var g *group
	c, err := newCore(coreConfig{
		id: n.id, log: n.store, sm: n.replica,
		electionTick: 10, heartbeatTick: max(1, int(cfg.HeartbeatTimeout/tick)),
		snapshotThreshold: cfg.SnapshotThreshold, trailing: cfg.TrailingLogs, logger: n.log, raftLogLevel: cfg.RaftLogLevel,
		leadership: func(leading bool) { n.leadership(leading) },
		membersChanged: func(ms members, removed removedSet) {
			if g != nil {
				g.setMembers(ms, removed)
			}
		},
	}, boot, randomUint64())
	if err != nil {
		return err
	}
	n.proposer = newProposer(cfg.MaxBatch, cfg.Metrics)
	g = newGroup(c, n.proposer, tick)
	n.group = g
	g.setMembers(c.members, c.removed)

	n.trans, err = transport.New(transport.Config{ClusterID: n.clusterID, LocalID: n.id, Listener: lis, Log: n.log,
		ServerTLS: cfg.RaftServerTLS, ClientTLS: cfg.RaftClientTLS, AuthorizePeer: g.authorizePeer,
		Deliver: g.deliver, ClientAddr: cfg.ClientAddr, PeerClientAddr: n.addrs.heard,
		Unreachable: func(id uint64) {
			g.tryControl(func(c *core) { c.rn.ReportUnreachable(id) })
		},
		SnapshotDone: func(id uint64, ok bool) {
			st := raft.SnapshotFinish
			if !ok {
				st = raft.SnapshotFailure
			}
			g.tryControl(func(c *core) { c.rn.ReportSnapshot(id, st) })
		}})
	if err != nil {
		return err
	}
	n.lis = nil // the transport owns it now
	var trans Transport = n.trans
	if cfg.WrapTransport != nil {
		trans = cfg.WrapTransport(trans)
	}
	g.trans = trans
	for _, m := range g.memberList() {
		if m.ID != n.id {
			trans.SetPeer(m.ID, m.RaftAddr)
		}
	}
	if cfg.Join != nil {
		for _, m := range cfg.Join.Members {
			if id := RaftID(m.Name); id != n.id {
				trans.SetPeer(id, m.RaftAddr)
			}
		}
	}

	n.lessor = newLessor(cfg.Clock, cfg.TickInterval, n.proposer.proposeAll, n.replica.read, n.log)
	ctx, cancel := context.WithCancel(context.Background())
	n.ctx, n.cancel = ctx, cancel
	n.wg.Add(3)
	go func() { defer n.wg.Done(); n.lessor.run(ctx) }()
	go func() { defer n.wg.Done(); n.promoteLearners(ctx) }()
	go func() { defer n.wg.Done(); n.recordAddrs(ctx) }()
	g.start(trans)
	_ = g.control(ctx, func(c *core) { // a single voter waits for no one: elect it now
		// (unless it has configuration to apply first: it campaigns after, core.applyConfChange)
		if st := c.rn.Status(); len(st.Config.Voters[0]) == 1 && hasID(st.Config.Voters[0], n.id) && st.Applied >= st.GetCommit() {
			_ = c.rn.Campaign()
		}
	})
	n.log.Info("raft node started", "node", cfg.Name, "raft", n.trans.Addr(), "cluster", fmt.Sprintf("%016x", n.clusterID), "data_dir", cfg.DataDir)
	return nil
}

// openLog opens the raft log, or creates it on a first start (fresh: the
// data dir is new), and returns the members to bootstrap (none unless the
// log is new). A data dir that has lived but lost its raft log is refused:
// a member that starts again with an empty log would vote and acknowledge
// as if it had never promised anything, and with the bootstrap list it
// would even count as a voter at once (an acknowledged write can be lost).
func (n *Node) openLog(fresh bool) ([]Member, error) {
	cfg := n.cfg
	dir := filepath.Join(cfg.DataDir, raftDir)
	if !fresh && !raftstore.Exists(dir) {
		return nil, fmt.Errorf("data dir %s has a %s file but no raft log (%s): it was this node's, and its log is lost; "+
			"a member must never come back without its log. Remove it from the cluster (fence members remove %s), "+
			"then start it on an empty --data-dir with --join; a single node, or a node that never finished its first start: start on an empty --data-dir (see README, Operations)",
			cfg.DataDir, formatFile, dir, cfg.Name)
	}
	if raftstore.Exists(dir) {
		var err error
		if n.store, err = raftstore.Open(dir, n.log); err != nil {
			return nil, err
		}
		var md metadata
		if err := json.Unmarshal(n.store.Metadata(), &md); err != nil {
			return nil, fmt.Errorf("raft log %s: metadata: %w", dir, err)
		}
		if md.Name != cfg.Name {
			return nil, fmt.Errorf("data dir %s belongs to node %q, not %q: a node's id never changes; start it with --node-id %s, or use another data dir", cfg.DataDir, md.Name, cfg.Name, md.Name)
		}
		n.clusterID = md.ClusterID
		return nil, nil
	}
	var boot []Member
	switch {
	case cfg.Join != nil:
		n.clusterID = cfg.Join.ClusterID
	case len(cfg.Bootstrap) > 0:
		boot = cfg.Bootstrap
		n.clusterID = ClusterIDOf(boot)
	default:
		boot = []Member{{Name: cfg.Name, RaftAddr: cfg.RaftAddr}}
		n.clusterID = randomUint64() | 1
	}
	for i := range boot {
		boot[i].ID = RaftID(boot[i].Name)
	}
	md, _ := json.Marshal(metadata{ClusterID: n.clusterID, Name: cfg.Name})
	var err error
	if n.store, err = raftstore.Create(dir, md, n.log); err != nil {
		return nil, err
	}
	n.log.Info("first start: new raft log", "node", cfg.Name, "voters", len(boot), "joining", cfg.Join != nil)
	return boot, nil
}

// checkRecordedAddr refuses a restart of a member of a cluster under
// another raft address than the one the log records for it: the other
// members would go on dialing the old one (and a node with a new address
// reaches them, so the mistake would show only as a member the others call
// unreachable). A lone member may move: it records its new address itself
// once it leads (moved).
func (n *Node) checkRecordedAddr() error {
	ms, err := recordedMembers(n.store)
	if err != nil {
		return fmt.Errorf("raft log %s: member list: %w", n.store.Dir(), err)
	}
	m, ok := ms[n.id]
	if !ok || m.RaftAddr == n.cfg.RaftAddr {
		return nil
	}
	if len(ms) == 1 {
		n.log.Info("this single node's raft address changed; it records the new one", "recorded", m.RaftAddr, "now", n.cfg.RaftAddr)
		return nil
	}
	return fmt.Errorf("the cluster knows this node (%s) at raft address %s, where the other members dial it, but this start gives %s "+
		"(--advertise-raft-addr, else --raft-addr): a member's raft address does not change. Start it with %s; "+
		"to move a member, add a new one under another --node-id on an empty --data-dir, then remove this one (fence members remove %s; see README, Operations)",
		n.cfg.Name, m.RaftAddr, n.cfg.RaftAddr, m.RaftAddr, n.cfg.Name)
}

// ClusterIDOf is the cluster id of a group bootstrapped with members: a hash
// of their names and addresses, so every node of the list computes the same
// id on its own and two groups with different lists never talk.
func ClusterIDOf(ms []Member) uint64 {
	list := slices.Clone(ms)
	slices.SortFunc(list, byName)
	var b []byte
	for _, m := range list {
		b = append(b, m.Name...)
		b = append(b, 0)
		b = append(b, m.RaftAddr...)
		b = append(b, 0)
	}
	return RaftID(string(b))
}

func randomUint64() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:])
}

// leadership runs on the apply path when this node starts leading with the
// whole log applied, or stops.
func (n *Node) leadership(leading bool) {
	n.leaderMu.Lock()
	if leading {
		n.leaderEnd = make(chan struct{})
	} else if n.leaderEnd != nil {
		close(n.leaderEnd)
		n.leaderEnd = nil
	}
	n.leaderMu.Unlock()
	if !leading {
		n.lessor.deactivate()
		return
	}
	n.replica.read(n.lessor.activate)
	n.led.Store(true)
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.moved(); n.addrs.poke() }()
}

// moved records, in the membership, the new raft address of a member
// that restarted on another one (checkRecordedAddr lets only a lone member
// move), so that a node that joins — even one that joined meanwhile, and
// was told the old address — dials the right one. Raft takes one
// membership change at a time, so it tries until the address is recorded,
// while this node leads.
func (n *Node) moved() {
	for try := 0; ; try++ {
		if try == 100 {
			n.log.Warn("could not record this node's new raft address; a node that joins would dial the old one", "address", n.cfg.RaftAddr)
			return
		}
		var recorded Member
		var known bool
		if err := n.group.control(n.ctx, func(c *core) { recorded, known = c.members[n.id] }); err != nil ||
			!known || recorded.RaftAddr == n.cfg.RaftAddr || !n.group.status.Load().leading {
			return
		}
		ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
		err := n.changeMember(ctx, raftpb.ConfChangeUpdateNode, Member{Name: n.cfg.Name, RaftAddr: n.cfg.RaftAddr, ID: n.id})
		cancel()
		if err == nil {
			continue // look again: it is recorded once applied
		}
		n.log.Debug("recording this node's new raft address; will retry", "err", err)
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// restored runs on the apply path (replica locked) after a snapshot restore.
func (n *Node) restored(index uint64) {
	n.history.Reset(index)
	clear(n.holds) // grants made before the snapshot: their start is unknown
	clear(n.waits) // and so are waits
	n.hot.Reset()
	n.waiters.wakeAll()
	if n.audit != nil {
		if err := n.audit.Restored(); err != nil {
			n.log.Error("audit file write failed", "err", err)
		}
	}
}

// applied runs on the apply path (replica locked) for every entry.
func (n *Node) applied(index uint64, cmds []fsm.Command, results []fsm.Result, traces []trace.TraceID) {
	if n.audit != nil {
		if err := n.audit.Entry(index, cmds, results, traces); err != nil {
			n.log.Error("audit file write failed", "index", index, "err", err)
		}
	}
	n.lessor.applied(results)
	n.history.Publish(index, results)
	m := n.cfg.Metrics
	now := n.replica.state.Clock() // the replica is locked
	for i := range results {
		r := &results[i]
		switch {
		case r.Code == fsm.LockHeld && r.Delayed:
			m.Prefix(cmds[i].Name).DelayRefused()
		case r.Code == fsm.LeaseNotFound && cmds[i].Kind == fsm.KindRenew:
			m.RenewalsFailed.Inc()
		case r.Code == fsm.Stale:
			m.StaleWrites.Inc()
		case r.Code == fsm.OK && cmds[i].Kind == fsm.KindExpire:
			m.Expirations.Inc()
		case r.Code == fsm.OK && cmds[i].Kind == fsm.KindRevoke:
			m.Revocations.Inc()
		}
		for j := range r.Events {
			e := &r.Events[j]
			n.waiters.event(e)
			n.observe(e, now)
		}
	}
}

// observe feeds one applied event, at log clock now, to the metrics and
// the hot-lock sketch. The replica is locked.
func (n *Node) observe(e *fsm.Event, now time.Duration) {
	m := n.cfg.Metrics
	switch e.Kind {
	case fsm.Granted:
		m.Grants.Inc()
		n.holds.granted(e.Token, now, e.TTL)
		n.hot.Granted(e.Name, now)
		if waited, ok := n.waits.ended(e.Lease, e.Name, now); ok {
			m.Prefix(e.Name).ObserveWait(waited)
			n.hot.Waited(e.Name, waited, now)
		}
	case fsm.Released:
		m.Releases.Inc()
		held, ttl, known := n.holds.ended(e.Token, now)
		if !known && e.Cause != fsm.CauseExpired {
			return
		}
		p := m.Prefix(e.Name)
		if known {
			p.ObserveHold(e.Cause.String(), held, ttl)
		}
		if e.Cause == fsm.CauseExpired {
			p.ExpiredHeld()
			n.hot.Expired(e.Name, now)
		}
	case fsm.LeaseRenewed:
		m.Renewals.Inc()
		m.RenewalSlack.Observe(e.Slack.Seconds())
	case fsm.WaitStarted:
		n.waits[waitKey{e.Lease, e.Name}] = now
		n.hot.WaitStarted(e.Name, now)
	case fsm.WaitCancelled, fsm.WaitEnded:
		_, _ = n.waits.ended(e.Lease, e.Name, now)
	}
}

// Ready reports whether this node leads and has applied every earlier
// entry: it accepts commands and reads.
// LeadershipEnds returns a channel that is closed when this node's
// current leadership ends, or at once if it does not lead: a stream served
// only by a leader (KeepAlive) ends with it, even while idle.
func (n *Node) LeadershipEnds() <-chan struct{} {
	n.leaderMu.Lock()
	defer n.leaderMu.Unlock()
	if n.leaderEnd == nil {
		ended := make(chan struct{})
		close(ended)
		return ended
	}
	return n.leaderEnd
}

func (n *Node) Ready() bool {
	return n.group != nil && n.group.status.Load().leading && n.lessor.isActive()
}

// RaftStatus is what the raft metrics report of a node, as of its loop's
// last round.
type RaftStatus struct {
	Term, Commit, Applied uint64
	// LeaderChanges counts the times the leader this node knows changed
	// (to another member, or to none) since it started.
	LeaderChanges uint64
}

// RaftStatus returns the node's raft status (zero before it runs).
func (n *Node) RaftStatus() RaftStatus {
	if n.group == nil {
		return RaftStatus{}
	}
	st := n.group.status.Load()
	return RaftStatus{Term: st.term, Commit: st.commit, Applied: st.applied, LeaderChanges: st.leaderChanges}
}

// Failed is closed when the node stopped on its own because a raft log
// write failed (Failure says why): it then neither leads nor follows, and
// its process should end, to be restarted on a disk that works (the log is
// what its last fsync made durable).
func (n *Node) Failed() <-chan struct{} {
	if n.group == nil {
		return nil
	}
	return n.group.failed
}

// Failure returns why the node stopped on its own, or nil.
func (n *Node) Failure() error {
	if n.group == nil {
		return nil
	}
	return n.group.failure()
}

// HasLed reports whether this node has ever been the ready leader.
func (n *Node) HasLed() bool { return n.led.Load() }

// WaitReady blocks until Ready or ctx ends.
func (n *Node) WaitReady(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !n.Ready() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("node not ready: %w", ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// Leader returns the leader as this node knows it: its name, raft address
// and client address ("" for what is not known).
func (n *Node) Leader() (name, raftAddr, clientAddr string) {
	lead := n.group.status.Load().lead
	if lead == raft.None {
		return "", "", ""
	}
	for _, m := range n.group.memberList() {
		if m.ID == lead {
			name, raftAddr = m.Name, m.RaftAddr
		}
	}
	if name != "" {
		n.replica.read(func(st *fsm.State) { clientAddr, _ = st.NodeAddr(name) })
	}
	return name, raftAddr, clientAddr
}

// Propose commits cmd and returns its result. Errors: ErrNotLeader (not
// written), ErrIndeterminate (may still commit), ErrInvalidCommand.
func (n *Node) Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	return n.proposer.propose(ctx, cmd)
}

// ProposeAll commits cmds (they share raft entries, without a goroutine
// per command) and returns their results in order. The error is the first
// failure's, if any failed; the others may still have committed.
func (n *Node) ProposeAll(ctx context.Context, cmds []fsm.Command) ([]fsm.Result, error) {
	outs := n.proposer.proposeAll(ctx, cmds)
	results := make([]fsm.Result, len(outs))
	for i, o := range outs {
		if o.err != nil {
			return nil, o.err
		}
		results[i] = o.res
	}
	return results, nil
}

// Read runs fn on the state once this node, confirmed leader by a quorum
// (raft's ReadIndex), has applied every write acknowledged before the call.
func (n *Node) Read(ctx context.Context, fn func(*fsm.State)) error {
	if err := n.group.read(ctx); err != nil {
		return err
	}
	n.replica.read(fn)
	return nil
}

// View runs fn on this node's state as applied so far (not linearizable).
func (n *Node) View(fn func(*fsm.State)) { n.replica.read(fn) }

// HeldFor returns how long the grant with token has been held, by the log
// clock of s; ok is false for a grant this node does not know the start of
// (delayed, ended, or older than the snapshot it restored). Call it only
// inside View or ViewAt, with the state they pass.
func (n *Node) HeldFor(s *fsm.State, token uint64) (time.Duration, bool) {
	h, ok := n.holds[token]
	if !ok {
		return 0, false
	}
	return s.Clock() - h.at, true
}

// ViewAt is View that also tells fn the index of the last entry applied to
// the state it sees: a Watch from the next index misses nothing after it.
func (n *Node) ViewAt(fn func(s *fsm.State, index uint64)) { n.replica.readAt(fn) }

// Watch starts a watcher of the lock events this node applies, of the lock
// name (or, with prefix, of the names that start with it), from index from
// (0: from the next entry). An index older than this node keeps is
// watch.ErrCompacted.
func (n *Node) Watch(name string, prefix bool, from uint64) (*watch.Watcher, error) {
	return n.history.Watch(name, prefix, from)
}

// Wait returns a channel that is signalled when call seq of lease may have
// been granted name or cancelled, or when the lease ends. Call it before
// proposing the Acquire; Leave when done.
func (n *Node) Wait(lease fsm.LeaseID, name string, seq uint64) chan uint64 {
	return n.waiters.register(lease, name, seq)
}

// Leave forgets a Wait channel and reports whether it was the last attempt
// of call seq waiting for name (the one that must cancel the wait).
func (n *Node) Leave(lease fsm.LeaseID, name string, seq uint64, ch chan uint64) bool {
	return n.waiters.leave(lease, name, seq, ch)
}

// Deadline returns a lease's deadline on this leader's clock, if it tracks it.
func (n *Node) Deadline(id fsm.LeaseID) (time.Time, bool) { return n.lessor.deadline(id) }

// DelayEnd returns when the lock-delay of lock name (begun by the expiry of
// the grant with token) ends on this leader's clock, if it tracks it: the
// time this leader proposes handing the lock on.
func (n *Node) DelayEnd(name string, token uint64) (time.Time, bool) {
	return n.lessor.delayEnd(name, token)
}

// ClusterID returns the id every raft message of this group carries.
// AuditDenial writes a call the policy refused to the audit file, if there
// is one.
func (n *Node) AuditDenial(d audit.Denial) error {
	if n.audit == nil {
		return nil
	}
	return n.audit.Denied(d)
}

func (n *Node) ClusterID() uint64 { return n.clusterID }

// RaftAddr returns the transport's address.
func (n *Node) RaftAddr() string {
	if n.trans == nil {
		return ""
	}
	return n.trans.Addr()
}

// Snapshot takes a snapshot of the applied state now, saves it and compacts the log.
func (n *Node) Snapshot(ctx context.Context) error {
	saved := make(chan error, 1)
	if err := n.group.control(ctx, func(c *core) {
		if c.snapshotNow(); len(c.snapshots) == 0 {
			saved <- nil
			return
		}
		c.snapshots[len(c.snapshots)-1].saved = saved
	}); err != nil {
		return err
	}
	select {
	case err := <-saved:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops the node; what committed stays in the data dir.
func (n *Node) Close() error {
	n.closed.Do(func() {
		var errs []error
		if n.cancel != nil {
			n.cancel()
		}
		if n.group != nil {
			n.group.close()
		}
		n.wg.Wait()
		if n.trans != nil {
			errs = append(errs, n.trans.Close())
		}
		if n.lis != nil {
			n.lis.Close() // a start that failed before the transport took it
		}
		if n.store != nil {
			errs = append(errs, n.store.Close())
		}
		if n.dirLock != nil {
			errs = append(errs, n.dirLock.Close())
		}
		if n.audit != nil {
			errs = append(errs, n.audit.Close())
		}
		n.err = errors.Join(errs...)
	})
	return n.err
}

func hasID(set map[uint64]struct{}, id uint64) bool {
	_, ok := set[id]
	return ok
}

// ProposeEntry commits cmds together, as one log entry: they apply at once,
// with nothing between them. Each is validated first.
func (n *Node) ProposeEntry(ctx context.Context, cmds []fsm.Command) ([]fsm.Result, error) {
	for i := range cmds {
		if err := validate(&cmds[i]); err != nil {
			return nil, err
		}
	}
	o := n.group.propose(ctx, fsm.EncodeBatch(nil, cmds))
	if o.err != nil {
		return nil, o.err
	}
	return o.result.([]fsm.Result), nil
}

// Waiting returns how many Acquire handlers of call seq of lease wait for
// name on this node.
func (n *Node) Waiting(lease fsm.LeaseID, name string, seq uint64) int {
	return n.waiters.attempts(lease, name, seq)
}

// HotLock is one lock of HotLocks: its decayed counts, and how many wait
// for it now.
type HotLock struct {
	hotlocks.Lock
	Waiters int
}

// HotLocks returns up to limit of the hottest locks this node's apply path
// has seen lately whose names keep admits (nil: all), hottest first, the
// sketch's decay time constant, and the index of the last entry applied.
func (n *Node) HotLocks(limit int, keep func(name string) bool) (locks []HotLock, window time.Duration, index uint64) {
	n.replica.readAt(func(s *fsm.State, at uint64) {
		for _, l := range n.hot.Top(limit, s.Clock(), keep) {
			h := HotLock{Lock: l}
			if k, ok := s.Lock(l.Name); ok {
				h.Waiters = len(k.Waiters)
			}
			locks = append(locks, h)
		}
		window, index = n.hot.Tau(), at
	})
	return locks, window, index
}

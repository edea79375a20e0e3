package node

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/fencehq/fence/internal/fsm"
)

// addrRetry is how soon the leader tries again to record an address it
// could not (a member not yet added, a proposal that failed).
const addrRetry = time.Second

// addrBook holds the client (gRPC) addresses that peers gave in the
// handshakes of their open raft streams to this node (an address is
// forgotten when its stream ends), for this node to record, when it leads,
// in the replicated state (fsm KindSetNode), where every member reads them:
// to send clients to the leader, and to name every member's address in
// Members.
type addrBook struct {
	mu      sync.Mutex
	peers   map[uint64]heard  // raft id → client address, as its open stream said
	refused map[string]string // member → the address last logged as unrecordable
	streams uint64            // streams that have said an address
	changed chan struct{}     // buffered 1: an address changed, or this node began to lead
}

func newAddrBook() *addrBook {
	return &addrBook{peers: map[uint64]heard{}, refused: map[string]string{}, changed: make(chan struct{}, 1)}
}

// heard is one stream's word for a peer's address.
type heard struct {
	addr   string
	stream uint64 // which stream said it (addrBook.streams)
}

// heard notes what peer id said its client address is (transport
// callback), until the stream that said it ends: then the address may be
// a process's that is gone, and a leader to come must not record it.
func (b *addrBook) heard(id uint64, addr string) (ended func()) {
	b.mu.Lock()
	b.streams++
	h := heard{addr, b.streams}
	b.peers[id] = h
	b.mu.Unlock()
	b.poke()
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.peers[id] == h { // not said again by a newer stream
			delete(b.peers, id)
		}
	}
}

// refusedOnce logs, once per member and address, that the address cannot
// be recorded (clients are not sent there, and Members does not name it).
func (b *addrBook) refusedOnce(log *slog.Logger, member, addr string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.refused[member] == addr {
		return
	}
	b.refused[member] = addr
	log.Warn("a member's client address cannot be recorded; clients will not be sent there", "member", member, "address", addr, "err", err)
}

func (b *addrBook) poke() {
	select {
	case b.changed <- struct{}{}:
	default:
	}
}

// recordAddrs runs while the node does. Whenever this node leads and an
// address is new (its own, Config.ClientAddr, or one a peer said), it
// records the members' addresses that the replicated state lacks or has
// wrong, and tries again after addrRetry while one is left.
func (n *Node) recordAddrs(ctx context.Context) {
	retry := time.NewTimer(0)
	<-retry.C
	for {
		select {
		case <-ctx.Done():
			retry.Stop()
			return
		case <-n.addrs.changed:
		case <-retry.C:
		}
		if !n.group.status.Load().leading {
			continue
		}
		if !n.recordMissingAddrs(ctx) {
			retry.Reset(addrRetry)
		}
	}
}

// recordMissingAddrs proposes a KindSetNode for each member whose known
// client address differs from the state's; it reports whether all are
// recorded (an address of a node not yet a member waits for it to be
// added).
func (n *Node) recordMissingAddrs(ctx context.Context) bool {
	want := map[uint64]string{n.id: n.cfg.ClientAddr}
	n.addrs.mu.Lock()
	for id, h := range n.addrs.peers {
		want[id] = h.addr
	}
	n.addrs.mu.Unlock()
	names := map[uint64]string{}
	for _, m := range n.group.memberList() {
		names[m.ID] = m.Name
	}
	done := true
	var cmds []fsm.Command
	n.replica.read(func(st *fsm.State) {
		for id, addr := range want {
			name, member := names[id]
			if !member {
				done = false
				continue
			}
			known, _ := st.NodeAddr(name)
			cmd := fsm.Command{Kind: fsm.KindSetNode, Name: name, Addr: addr}
			if addr == "" || known == addr {
				continue // nothing to record
			}
			if err := validate(&cmd); err != nil {
				n.addrs.refusedOnce(n.log, name, addr, err)
				continue
			}
			cmds = append(cmds, cmd)
		}
	})
	if len(cmds) == 0 {
		return done
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for i, o := range n.proposer.proposeAll(pctx, cmds) {
		if o.err != nil {
			n.log.Debug("recording a member's client address; will retry", "member", cmds[i].Name, "address", cmds[i].Addr, "err", o.err)
			done = false
		}
	}
	return done
}

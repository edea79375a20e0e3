package node

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/fencehq/fence/internal/fsm"
)

// addrRetry is how soon the leader tries again to record an address it
// could not (a member not yet added, a proposal that failed).
const addrRetry = time.Second

// addrBook holds the client (gRPC) addresses that peers gave in their raft
// stream handshakes, until the leader has recorded them in the replicated
// state (fsm KindSetNode), where every member reads them: to send clients
// to the leader, and to name every member's address in Members.
type addrBook struct {
	mu      sync.Mutex
	peers   map[uint64]string // raft id → client address, as last said
	changed chan struct{}     // buffered 1: an address changed, or this node began to lead
}

func newAddrBook() *addrBook {
	return &addrBook{peers: map[uint64]string{}, changed: make(chan struct{}, 1)}
}

// heard notes what peer id said its client address is (transport
// callback).
func (b *addrBook) heard(id uint64, addr string) {
	b.mu.Lock()
	b.peers[id] = addr
	b.mu.Unlock()
	b.poke()
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
	n.addrs.mu.Lock()
	want := maps.Clone(n.addrs.peers)
	n.addrs.mu.Unlock()
	want[n.id] = n.cfg.ClientAddr
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
			if addr == "" || known == addr || validate(&cmd) != nil {
				continue // nothing to record, or nothing that can be
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

package locktest

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/fencehq/fence/internal/node"
	"github.com/fencehq/fence/internal/server"
)

// Cluster is n real servers (raft, the raft log on disk, gRPC on loopback)
// whose raft messages pass a filter, so a test can cut any link.
type Cluster struct {
	t     testing.TB
	mu    sync.Mutex
	cut   map[[2]uint64]bool // guarded by mu: from → to links that drop every message
	Nodes []*Node
}

// Node is one member of a Cluster.
type Node struct {
	ID     string
	Server *server.Server
	raftID uint64
}

// NewCluster starts n nodes bootstrapped as one group and waits for a leader.
// mutate, if given, adjusts each node's config.
func NewCluster(t testing.TB, n int, mutate ...func(*server.Config)) *Cluster {
	t.Helper()
	c := &Cluster{t: t, cut: map[[2]uint64]bool{}}
	var peers []server.Peer
	var lis []net.Listener
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		nd := &Node{ID: fmt.Sprintf("n%d", i+1)}
		nd.raftID = node.RaftID(nd.ID)
		c.Nodes = append(c.Nodes, nd)
		lis = append(lis, l)
		peers = append(peers, server.Peer{ID: nd.ID, RaftAddr: l.Addr().String()})
	}
	for i, nd := range c.Nodes {
		cfg := Config(t.TempDir())
		cfg.NodeID, cfg.RaftListener, cfg.Bootstrap = nd.ID, lis[i], peers
		from := nd.raftID
		cfg.WrapTransport = func(inner node.Transport) node.Transport { return &filter{Transport: inner, from: from, c: c} }
		for _, m := range mutate {
			m(&cfg)
		}
		srv, err := server.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		nd.Server = srv
	}
	t.Cleanup(func() {
		for _, nd := range c.Nodes {
			nd.Server.Close()
		}
	})
	c.Leader()
	return c
}

// filter drops the messages of cut links.
type filter struct {
	node.Transport
	from uint64
	c    *Cluster
}

func (f *filter) Send(msgs []*raftpb.Message) {
	f.c.mu.Lock()
	kept := msgs[:0:0]
	for _, m := range msgs {
		if !f.c.cut[[2]uint64{f.from, m.GetTo()}] {
			kept = append(kept, m)
		}
	}
	f.c.mu.Unlock()
	f.Transport.Send(kept)
}

// Addrs returns every node's gRPC address.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, nd := range c.Nodes {
		a = append(a, nd.Server.GRPCAddr())
	}
	return a
}

// Leader waits (up to 10s) for a node that leads and serves, and returns it.
func (c *Cluster) Leader(among ...*Node) *Node {
	c.t.Helper()
	if len(among) == 0 {
		among = c.Nodes
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, nd := range among {
			if nd.Server.Ready() {
				return nd
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.t.Fatal("no leader within 10s")
	return nil
}

// Partition cuts the given nodes off from all others, both ways; the cut
// nodes still reach each other.
func (c *Cluster) Partition(cut ...*Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	in := map[*Node]bool{}
	for _, nd := range cut {
		in[nd] = true
	}
	for _, a := range c.Nodes {
		for _, b := range c.Nodes {
			if a != b && in[a] != in[b] {
				c.cut[[2]uint64{a.raftID, b.raftID}] = true
			}
		}
	}
}

// CutOneWay drops every message from a to b (b still reaches a).
func (c *Cluster) CutOneWay(a, b *Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut[[2]uint64{a.raftID, b.raftID}] = true
}

// Heal reconnects every pair of nodes.
func (c *Cluster) Heal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.cut)
}

// ClusterID is the id every raft message of the cluster carries.
func (c *Cluster) ClusterID() uint64 {
	var ms []node.Member
	for _, nd := range c.Nodes {
		ms = append(ms, node.Member{Name: nd.ID, RaftAddr: nd.Server.RaftAddr()})
	}
	return node.ClusterIDOf(ms)
}

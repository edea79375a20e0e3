package locktest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencehq/fence/internal/server"
)

// Cluster is n real servers (raft, bbolt, gRPC on loopback) whose raft
// traffic runs over raft's InmemTransport, so a test can cut any node off.
type Cluster struct {
	t     testing.TB
	mu    sync.Mutex
	Nodes []*Node
}

// Node is one member of a Cluster.
type Node struct {
	ID     string
	Server *server.Server
	trans  *raft.InmemTransport
	addr   raft.ServerAddress
}

// NewCluster starts n nodes bootstrapped as one group and waits for a leader.
// mutate, if given, adjusts each node's config.
func NewCluster(t testing.TB, n int, mutate ...func(*server.Config)) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	var peers []server.Peer
	for i := 0; i < n; i++ {
		addr, trans := raft.NewInmemTransport("")
		nd := &Node{ID: fmt.Sprintf("n%d", i+1), trans: trans, addr: addr}
		c.Nodes = append(c.Nodes, nd)
		peers = append(peers, server.Peer{ID: nd.ID, RaftAddr: string(addr)})
	}
	c.Heal()
	for _, nd := range c.Nodes {
		cfg := Config(t.TempDir())
		cfg.NodeID, cfg.Transport, cfg.Bootstrap = nd.ID, nd.trans, peers
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
			nd.trans.Close()
		}
	})
	c.Leader()
	return c
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
				a.trans.Disconnect(b.addr)
			}
		}
	}
}

// Heal reconnects every pair of nodes.
func (c *Cluster) Heal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.Nodes {
		for _, b := range c.Nodes {
			if a != b {
				a.trans.Connect(b.addr, b.trans)
			}
		}
	}
}

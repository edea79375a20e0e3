package chaos

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fencehq/fence/internal/netlab"
	"github.com/fencehq/fence/internal/pki"
)

// node is one fence server process in its own network namespace.
type node struct {
	id      string
	host    netlab.Host
	dir     string
	binary  string
	args    []string
	grpc    string
	metrics string
	probe   *tls.Config // of health checks on the HTTPS port

	mu sync.Mutex
	p  *proc // guarded by mu; nil while down
}

// cluster is the servers of one run.
type cluster struct {
	lab   *netlab.Lab
	nodes []*node
}

// serverFlags are the settings every run uses: no lock-delay (a paused
// holder overlaps the next one at once, so only fencing saves the data),
// short TTLs allowed, frequent snapshots (restores happen during the run),
// an audit file per node, TLS with the node's certificate, and the
// cluster's token key (every grant signed).
func serverFlags(n *node, bootstrap string, tls pki.Files, tokenKey string) []string {
	return []string{"serve", "--node-id", n.id, "--data-dir", filepath.Join(n.dir, "data"),
		"--grpc-addr", n.grpc, "--metrics-addr", n.metrics, "--raft-addr", n.host.IP + ":7302",
		"--bootstrap", bootstrap, "--lock-delay", "0", "--min-ttl", "500ms",
		"--snapshot-threshold", "300", "--trailing-logs", "200",
		"--audit-file", filepath.Join(n.dir, "audit.jsonl"), "--log-level", "warn",
		"--tls-ca", tls.CA, "--tls-cert", tls.Cert, "--tls-key", tls.Key, "--token-key", tokenKey}
}

func newCluster(n int, binary, dir string, certs *certs) (*cluster, error) {
	probe, err := certs.probe()
	if err != nil {
		return nil, err
	}
	lab, err := netlab.New(n)
	if err != nil {
		return nil, err
	}
	c := &cluster{lab: lab}
	var peers []string
	for i, h := range lab.Hosts {
		nd := &node{id: fmt.Sprintf("n%d", i+1), host: h, dir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)), binary: binary,
			grpc: h.IP + ":7300", metrics: h.IP + ":7301", probe: probe}
		if err := os.MkdirAll(nd.dir, 0o755); err != nil {
			lab.Close()
			return nil, err
		}
		c.nodes = append(c.nodes, nd)
		peers = append(peers, nd.id+"="+h.IP+":7302")
	}
	for _, nd := range c.nodes {
		files, err := certs.node(nd.id, nd.host.IP)
		if err != nil {
			c.close()
			return nil, err
		}
		nd.args = serverFlags(nd, strings.Join(peers, ","), files, certs.tokenKey())
		if err := nd.start(0); err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}

// start launches the node (its clocks offset by shift) and waits until it serves.
func (n *node) start(shift time.Duration) error {
	argv := append([]string{"ip", "netns", "exec", n.host.Netns}, shifted(shift, append([]string{n.binary}, n.args...))...)
	p, err := startProc(n.id, argv, []string{"GOMAXPROCS=2"}, filepath.Join(n.dir, "server.log"))
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.p = p
	n.mu.Unlock()
	for deadline := time.Now().Add(20 * time.Second); !httpOK(n.metrics, "/healthz", n.probe); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) || !p.alive() {
			return fmt.Errorf("server %s did not come up; see %s", n.id, filepath.Join(n.dir, "server.log"))
		}
	}
	return nil
}

func (n *node) proc() *proc {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.p
}

// kill SIGKILLs the node; it stays down until start.
func (n *node) kill() {
	if p := n.proc(); p != nil {
		p.kill()
	}
	n.mu.Lock()
	n.p = nil
	n.mu.Unlock()
}

func (n *node) leads() bool {
	p := n.proc()
	return p != nil && !p.isPaused() && httpOK(n.metrics, "/leaderz", n.probe)
}

func (c *cluster) addrs() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.grpc)
	}
	return out
}

// leader returns the node that leads now, or nil.
func (c *cluster) leader() *node {
	for _, n := range c.nodes {
		if n.leads() {
			return n
		}
	}
	return nil
}

// waitLeader waits until some node leads.
func (c *cluster) waitLeader(ctx context.Context) (*node, error) {
	for {
		if l := c.leader(); l != nil {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no leader: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop ends every node gracefully (so audit files are complete).
func (c *cluster) stop() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		if p := n.proc(); p != nil {
			wg.Add(1)
			go func() { defer wg.Done(); p.stop(10 * time.Second) }()
		}
	}
	wg.Wait()
}

func (c *cluster) close() {
	for _, n := range c.nodes {
		n.kill()
	}
	c.lab.Close()
}

package e2e

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
)

// cluster is n real `fence serve` processes forming one raft group.
type cluster struct {
	t     *testing.T
	nodes []*node
}

func newCluster(t *testing.T, n int, extra ...string) *cluster {
	return newClusterAt(t, n, nil, extra...)
}

// newClusterAt places node i at hosts[i].host inside hosts[i].netns (nil:
// all on 127.0.0.1 with free ports).
func newClusterAt(t *testing.T, n int, hosts []netHost, extra ...string) *cluster {
	c := &cluster{t: t}
	var peers []string
	for i := 0; i < n; i++ {
		nd := newNode(t)
		if hosts != nil {
			nd = newNodeAt(t, hosts[i].IP, hosts[i].Netns)
		}
		nd.id = fmt.Sprintf("n%d", i+1)
		c.nodes = append(c.nodes, nd)
		peers = append(peers, nd.id+"="+nd.raft)
	}
	for _, nd := range c.nodes {
		nd.args = append([]string{"--node-id", nd.id, "--bootstrap", strings.Join(peers, ",")}, extra...)
	}
	var wg sync.WaitGroup
	for _, nd := range c.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); nd.startProcess() }()
	}
	wg.Wait()
	c.leader() // waits for one
	return c
}

func (c *cluster) addrs() []string {
	var a []string
	for _, nd := range c.nodes {
		a = append(a, nd.grpc)
	}
	return a
}

func (c *cluster) dial(opts ...client.Option) *client.Client {
	cl, err := client.Dial(timeout(c.t, 10*time.Second), c.addrs(), append([]client.Option{withTLS(c.t)}, opts...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// leader returns the node that is leader and ready, waiting up to 20s.
func (c *cluster) leader() *node {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, nd := range c.nodes {
			if nd.cmd != nil && leads(nd.metrics) {
				return nd
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatal("no leader within 20s")
	return nil
}

type grant struct {
	name         string
	token        uint64
	call, ret    time.Time
	releaseTried bool
	releaseAcked bool
}

// TestClusterLeaderKills kills the leader (SIGKILL) every few seconds while
// 64 clients acquire and release, restarting each killed node. It checks: no
// token is granted twice; every acknowledged grant that was not released is
// still held after recovery; and tokens increase in real-time order (a grant
// acknowledged before another was requested has the smaller token).
// FENCE_E2E_LEADER_KILLS sets the number of kills (default 3).
func TestClusterLeaderKills(t *testing.T) {
	kills := envInt("FENCE_E2E_LEADER_KILLS", 3)
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("FENCE_E2E_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed=%d", seed)
	rng := mrand.New(mrand.NewPCG(seed, 1))
	c := newCluster(t, 3, "--lock-delay", "0")
	const clients = 64
	cls := make([]*client.Client, clients)
	for i := range cls {
		cls[i] = c.dial(client.WithTTL(10 * time.Second))
	}
	var (
		mu     sync.Mutex
		grants []grant
		failed int
	)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				name := fmt.Sprintf("c%d/%d", i, n)
				call := time.Now()
				cctx, done := context.WithTimeout(ctx, 5*time.Second)
				l, err := cls[i].TryLock(cctx, name)
				done()
				ret := time.Now()
				if err != nil {
					mu.Lock()
					failed++
					mu.Unlock()
					continue
				}
				g := grant{name: name, token: l.Token(), call: call, ret: ret}
				if n%2 == 0 { // release half of them
					rctx, done := context.WithTimeout(ctx, 5*time.Second)
					g.releaseTried, g.releaseAcked = true, l.Release(rctx) == nil
					done()
				}
				mu.Lock()
				grants = append(grants, g)
				mu.Unlock()
			}
		}()
	}
	var failovers []time.Duration
	for k := 0; k < kills; k++ {
		time.Sleep(time.Duration(1000+rng.IntN(1500)) * time.Millisecond)
		old := c.leader()
		mu.Lock()
		before := len(grants)
		mu.Unlock()
		killed := time.Now()
		old.kill()
		// Failover time: until a grant acknowledged after the kill.
		for {
			mu.Lock()
			var first time.Time
			for _, g := range grants[before:] {
				if g.call.After(killed) && (first.IsZero() || g.ret.Before(first)) {
					first = g.ret
				}
			}
			mu.Unlock()
			if !first.IsZero() {
				failovers = append(failovers, first.Sub(killed))
				break
			}
			if time.Since(killed) > 30*time.Second {
				t.Fatal("no grant within 30s of killing the leader")
			}
			time.Sleep(5 * time.Millisecond)
		}
		old.startProcess()
	}
	time.Sleep(500 * time.Millisecond)
	cancel()
	wg.Wait()

	// Check the history.
	seen := map[uint64]string{}
	for _, g := range grants {
		if other, dup := seen[g.token]; dup {
			t.Errorf("token %d granted twice: %s and %s", g.token, other, g.name)
		}
		seen[g.token] = g.name
	}
	sort.Slice(grants, func(i, j int) bool { return grants[i].ret.Before(grants[j].ret) })
	byCall := slices.Clone(grants)
	sort.Slice(byCall, func(i, j int) bool { return byCall[i].call.Before(byCall[j].call) })
	var maxBefore uint64
	j := 0
	for _, g := range byCall { // every grant returned before g was called has a smaller token
		for j < len(grants) && grants[j].ret.Before(g.call) {
			maxBefore = max(maxBefore, grants[j].token)
			j++
		}
		if g.token <= maxBefore {
			t.Errorf("grant %s got token %d, but token %d was acknowledged before it was requested", g.name, g.token, maxBefore)
		}
	}
	held := heldTokens(t, c.dial())
	kept := 0
	for _, g := range grants {
		switch {
		case g.releaseAcked:
			if _, still := held[g.name]; still {
				t.Errorf("acknowledged release of %s undone", g.name)
			}
		case !g.releaseTried:
			kept++
			if held[g.name] != g.token {
				t.Errorf("acknowledged grant %s (token %d) lost: now %d", g.name, g.token, held[g.name])
			}
		}
	}
	sort.Slice(failovers, func(i, j int) bool { return failovers[i] < failovers[j] })
	t.Logf("kills=%d grants=%d (kept and checked %d) failed calls=%d failover (kill → first grant) sorted: %v",
		kills, len(grants), kept, failed, failovers)
	if len(grants) < 200 {
		t.Fatalf("only %d grants: the load did not run", len(grants))
	}
}

// TestClusterClientFindsLeaderFromOneFollower: a client that knows only a
// follower's address is redirected to the leader.
func TestClusterClientFindsLeaderFromOneFollower(t *testing.T) {
	c := newCluster(t, 3)
	lead := c.leader()
	var follower *node
	for _, nd := range c.nodes {
		if nd != lead {
			follower = nd
			break
		}
	}
	cl, err := client.Dial(timeout(t, 5*time.Second), []string{follower.grpc}, withTLS(t))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	l, err := cl.TryLock(timeout(t, 10*time.Second), "x")
	if err != nil {
		t.Fatalf("through a follower: %v", err)
	}
	if err := l.Release(timeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// heldTokens lists the locks through cl: name → token.
func heldTokens(t *testing.T, cl *client.Client) map[string]uint64 {
	t.Helper()
	list, err := cl.List(timeout(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]uint64{}
	for _, l := range list {
		held[l.Name] = l.Token
	}
	return held
}

package conformance

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/proctest"
)

// member is one `fence serve --insecure` process.
type member struct {
	id, dir             string
	grpc, metrics, raft string
	args                []string
	cmd                 *exec.Cmd
	exited              chan struct{}          // closed when cmd has ended (killed, or on its own)
	exitErr             error                  // how it ended; set before exited is closed
	api                 api.FenceServiceClient // straight to the member, around the relay
}

// cluster is n members bootstrapped together, each a real process.
type cluster struct {
	t       testing.TB
	members []*member
}

func newCluster(t testing.TB, n int) *cluster {
	// The ports are picked free (proctest.FreeAddr) and bound only when
	// the processes start: meanwhile another socket may take one (another
	// test, or an outgoing connection's ephemeral port; CI runs many
	// packages at once), and that member exits at once ("port ... is in
	// use"). A cluster of the other two elects a leader, and every scenario
	// passes until the first kill leaves one member: "no leader within 20
	// s". So every member must be up, or the cluster starts again on new
	// ports.
	for attempt := 1; ; attempt++ {
		c := startCluster(t, n)
		dead := c.waitAllUp(20 * time.Second)
		if len(dead) == 0 {
			c.leader()
			return c
		}
		for _, m := range c.members {
			m.kill()
		}
		if attempt == 3 {
			t.Fatalf("a member did not start, %d times:\n  %s", attempt, strings.Join(dead, "\n  "))
		}
		t.Logf("a member did not start; the cluster starts again on new ports:\n  %s", strings.Join(dead, "\n  "))
	}
}

func startCluster(t testing.TB, n int) *cluster {
	c := newMembers(t, n, "--log-level", "warn")
	for _, m := range c.members {
		m.start(t)
	}
	return c
}

// newMembers makes n members bootstrapped together, with serve's extra
// flags, and starts none of them.
func newMembers(t testing.TB, n int, extra ...string) *cluster {
	c := &cluster{t: t}
	var peers []string
	for i := range n {
		m := &member{id: "n" + strconv.Itoa(i+1), dir: t.TempDir(), grpc: proctest.FreeAddr(t), metrics: proctest.FreeAddr(t), raft: proctest.FreeAddr(t)}
		conn, err := grpc.NewClient(m.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		m.api = api.NewFenceServiceClient(conn)
		t.Cleanup(func() { m.kill(); conn.Close() })
		c.members = append(c.members, m)
		peers = append(peers, m.id+"="+m.raft)
	}
	for _, m := range c.members {
		m.args = append([]string{"serve", "--insecure", "--node-id", m.id, "--bootstrap", strings.Join(peers, ","),
			"--data-dir", filepath.Join(m.dir, "data"), "--grpc-addr", m.grpc, "--metrics-addr", m.metrics,
			"--raft-addr", m.raft}, extra...)
	}
	return c
}

// waitAllUp waits (up to limit) until every member serves /readyz (it
// knows a leader), and returns, with the end of its log, each member whose
// process ended on its own meanwhile.
func (c *cluster) waitAllUp(limit time.Duration) (dead []string) {
	deadline := time.Now().Add(limit)
	for {
		dead = nil
		up := 0
		for _, m := range c.members {
			if m.ended() {
				b, _ := os.ReadFile(filepath.Join(m.dir, "server.log"))
				lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
				dead = append(dead, m.state()+": "+strings.Join(lines[max(0, len(lines)-3):], " | "))
			} else if _, ok := m.get("/readyz"); ok {
				up++
			}
		}
		if len(dead) > 0 || up == len(c.members) || time.Now().After(deadline) {
			return dead
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// on returns the cluster as seen by t (a scenario's subtest), so that a
// failure it finds ends that subtest, not the test that made the cluster.
func (c *cluster) on(t testing.TB) *cluster {
	return &cluster{t: t, members: c.members}
}

// logTails prints the end of every member's log, for a failure's reader.
func (c *cluster) logTails(t testing.TB) {
	for _, m := range c.members {
		b, err := os.ReadFile(filepath.Join(m.dir, "server.log"))
		if err != nil {
			t.Logf("%s: no log: %v", m.id, err)
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		t.Logf("%s: the last %d lines of its log:\n%s", m.id, min(len(lines), 40), strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
}

func (m *member) start(t testing.TB) {
	t.Helper()
	m.startBinary(t, proctest.Binary(t, "github.com/fencehq/fence/cmd/fence"))
}

// startBinary starts the member as the program bin.
func (m *member) startBinary(t testing.TB, bin string) {
	t.Helper()
	m.cmd = exec.Command(bin, m.args...)
	log, err := os.OpenFile(filepath.Join(m.dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	m.cmd.Stdout, m.cmd.Stderr = log, log
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Waited for at once, so that a member that ends on its own (a crash)
	// is seen as such when a leader is missing (state).
	cmd, exited := m.cmd, make(chan struct{})
	m.exited = exited
	go func() {
		m.exitErr = cmd.Wait()
		close(exited)
	}()
}

// kill ends the process with SIGKILL (nothing flushed, nothing said).
func (m *member) kill() {
	if m.cmd != nil && m.cmd.Process != nil {
		_ = m.cmd.Process.Signal(syscall.SIGKILL)
		<-m.exited
	}
	m.cmd = nil
}

// ended reports whether the member's process ended on its own (not killed
// by the test).
func (m *member) ended() bool {
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.exited:
		return true
	default:
		return false
	}
}

// state describes the member for a failure's reader: killed, ended on its
// own, or what its HTTP port says (/leaderz, /readyz and its raft metrics).
func (m *member) state() string {
	if m.cmd == nil {
		return m.id + ": killed by the test"
	}
	select {
	case <-m.exited:
		return fmt.Sprintf("%s: its process ended on its own (%v)", m.id, m.exitErr)
	default:
	}
	_, leads := m.get("/leaderz")
	_, ready := m.get("/readyz")
	raft := "no metrics"
	if body, ok := m.get("/metrics"); ok {
		var vals []string
		for _, line := range strings.Split(body, "\n") {
			for _, g := range []string{"term", "commit_index", "applied_index", "leader_changes_total"} {
				if v, ok := strings.CutPrefix(line, "fence_raft_"+g+" "); ok {
					vals = append(vals, g+"="+v)
				}
			}
		}
		raft = strings.Join(vals, " ")
	}
	return fmt.Sprintf("%s: pid %d running; leads=%v readyz=%v; raft %s", m.id, m.cmd.Process.Pid, leads, ready, raft)
}

// get fetches path from the member's HTTP port (plaintext: --insecure).
func (m *member) get(path string) (string, bool) {
	hc := http.Client{Timeout: time.Second}
	resp, err := hc.Get("http://" + m.metrics + path)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode == http.StatusOK
}

// metric reads one unlabelled metric of the member.
func (m *member) metric(t testing.TB, name string) float64 {
	t.Helper()
	body, ok := m.get("/metrics")
	if !ok {
		t.Fatalf("%s: no metrics", m.id)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: metric %s: %v", m.id, line, err)
			}
			return f
		}
	}
	t.Fatalf("%s: no metric %s", m.id, name)
	return 0
}

// leader waits (up to 20 s) for a member that leads and serves.
func (c *cluster) leader() *member {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range c.members {
			if m.cmd == nil {
				continue
			}
			if _, ok := m.get("/leaderz"); ok {
				return m
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	var states []string
	for _, m := range c.members {
		states = append(states, m.state())
	}
	c.t.Fatalf("no leader within 20 s; the members:\n  %s", strings.Join(states, "\n  "))
	return nil
}

func (c *cluster) addrs() []string {
	var a []string
	for _, m := range c.members {
		a = append(a, m.grpc)
	}
	return a
}

// other returns a member that is not m.
func (c *cluster) other(m *member) *member {
	for _, o := range c.members {
		if o != m {
			return o
		}
	}
	return nil
}

// transfer moves leadership from the leader to another member.
func (c *cluster) transfer() {
	c.t.Helper()
	from := c.leader()
	to := c.other(from)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := from.api.TransferLeader(ctx, &api.TransferLeaderRequest{Id: to.id}); err != nil {
		c.t.Fatalf("transfer %s → %s: %v", from.id, to.id, err)
	}
	for c.leader() == from {
		time.Sleep(20 * time.Millisecond)
	}
}

// lockOnServer reads lock name on the leader.
func (c *cluster) lockOnServer(name string) *api.LockInfo {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.leader().api.GetLock(ctx, &api.GetLockRequest{Name: name})
	if err != nil {
		c.t.Fatalf("GetLock %s: %v", name, err)
	}
	return r.Lock
}

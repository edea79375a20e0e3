package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/proctest"
)

// fenceBinary builds cmd/fence once per test run.
func fenceBinary(t testing.TB) string {
	t.Helper()
	return proctest.Binary(t, "github.com/fencehq/fence/cmd/fence")
}

// freePort returns a loopback address whose port was free a moment ago.
func freePort(t testing.TB) string { return proctest.FreeAddr(t) }

// node is a fence server running as a real OS process.
type node struct {
	t                   testing.TB
	id                  string
	netns               string // run inside this network namespace ("" = this one)
	dir                 string
	grpc, metrics, raft string
	args                []string
	cmd                 *exec.Cmd
	log                 *os.File
	conn                *grpc.ClientConn
	cli                 api.FenceServiceClient
}

func newNode(t testing.TB, extra ...string) *node {
	return newNodeAt(t, "", "", extra...)
}

// newNodeAt is newNode on host (ports 7300-7302) inside network namespace
// netns; host "" means free ports on 127.0.0.1 in this namespace.
func newNodeAt(t testing.TB, host, netns string, extra ...string) *node {
	n := &node{t: t, dir: t.TempDir(), args: extra, netns: netns}
	if host == "" {
		n.grpc, n.metrics, n.raft = freePort(t), freePort(t), freePort(t)
	} else {
		n.grpc, n.metrics, n.raft = host+":7300", host+":7301", host+":7302"
	}
	conn, err := grpc.NewClient(n.grpc, grpc.WithTransportCredentials(clientCreds(t)),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)),
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: time.Second,
			Backoff: backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond}}))
	if err != nil {
		t.Fatal(err)
	}
	n.conn, n.cli = conn, api.NewFenceServiceClient(conn)
	t.Cleanup(func() {
		n.kill()
		conn.Close()
	})
	return n
}

// start launches a single node and waits until it leads (/leaderz).
func (n *node) start() {
	n.t.Helper()
	n.startProcess()
	deadline := time.Now().Add(20 * time.Second)
	for !leads(n.metrics) {
		if time.Now().After(deadline) {
			n.t.Fatalf("server not ready after 20s; log:\n%s", n.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startProcess launches the process and waits until it serves (/healthz).
func (n *node) startProcess() {
	n.t.Helper()
	args := append([]string{"serve", "--data-dir", filepath.Join(n.dir, "data"), "--grpc-addr", n.grpc,
		"--metrics-addr", n.metrics, "--raft-addr", n.raft, "--log-level", "warn"}, n.args...)
	args = append(args, nodeCerts(n.t, n.dir, n.nodeID(), hostOf(n.grpc))...)
	n.cmd = exec.Command(fenceBinary(n.t), args...)
	if n.netns != "" { // ip netns exec execs the binary: the pid stays fence's
		n.cmd = exec.Command("ip", append([]string{"netns", "exec", n.netns, fenceBinary(n.t)}, args...)...)
	}
	n.cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	var err error
	if n.log, err = os.OpenFile(filepath.Join(n.dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err != nil {
		n.t.Fatal(err)
	}
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !httpOK(n.metrics, "/healthz") {
		if time.Now().After(deadline) {
			n.t.Fatalf("server not serving after 20s; log:\n%s", n.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ready reports whether the node at metrics address addr leads and serves.
// nodeID is the node's --node-id (the default's when none is given).
func (n *node) nodeID() string {
	if n.id != "" {
		return n.id
	}
	for i, a := range n.args {
		if a == "--node-id" && i+1 < len(n.args) {
			return n.args[i+1]
		}
	}
	return "node1"
}

func hostOf(addr string) string {
	host, _, _ := net.SplitHostPort(addr)
	return host
}

func leads(addr string) bool { return httpOK(addr, "/leaderz") }

// httpOK asks the node's HTTPS port for path (as a probe does: checking the
// server against the CA, with no client certificate).
func httpOK(addr, path string) bool {
	cfg := &tls.Config{RootCAs: caPool(), ServerName: hostOf(addr)}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 200 * time.Millisecond}, "tcp", addr, cfg)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.0\r\n\r\n", path)
	buf := make([]byte, 64)
	k, _ := c.Read(buf)
	return strings.Contains(string(buf[:k]), " 200 ")
}

// kill sends SIGKILL to the process we started, by its pid, and reaps it.
func (n *node) kill() {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(n.cmd.Process.Pid, syscall.SIGKILL)
	_ = n.cmd.Wait()
	n.cmd = nil
	n.log.Close()
}

func (n *node) logTail() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "server.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func timeout(t testing.TB, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

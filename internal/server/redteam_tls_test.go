package server_test

// Red-team tests of the TLS setup. Each test here FAILS on the code it was
// written against, because of the hole its comment describes; the comment
// also says what the fix should be.

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/node"
	"github.com/fencehq/fence/internal/pki"
	"github.com/fencehq/fence/internal/server"
	"github.com/fencehq/fence/internal/transport/transportpb"
)

// rtRaftHello opens a TLS connection to a raft port with cfg, sends the
// message-stream preface and a handshake Batch, and returns the receiver's
// answer (nil: stream accepted) or the transport error.
func rtRaftHello(t *testing.T, addr string, cfg *tls.Config, b *transportpb.Batch) (answer error, transportErr error) {
	t.Helper()
	st, err := dialRaftStream(addr, cfg)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	if err := st.send(b); err != nil {
		return nil, err
	}
	return st.answer()
}

// raftStream is a raft message stream opened by hand, over TLS: the
// preface, then Batch frames; the member answers the first with a status
// frame, and any later one it refuses.
type raftStream struct {
	*tls.Conn
	bw *bufio.Writer
	br *bufio.Reader
}

func dialRaftStream(addr string, cfg *tls.Config) (*raftStream, error) {
	d := net.Dialer{Timeout: 3 * time.Second}
	c, err := tls.DialWithDialer(&d, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	s := &raftStream{Conn: c, bw: bufio.NewWriter(c), br: bufio.NewReader(c)}
	s.bw.WriteString("FNCRAFT1")
	s.bw.WriteByte('M')
	return s, nil
}

func (s *raftStream) send(b *transportpb.Batch) error {
	raw, _ := proto.Marshal(b)
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(raw)))
	s.bw.Write(hdr[:])
	s.bw.Write(raw)
	return s.bw.Flush()
}

// answer reads a status frame: nil for OK, else the refusal.
func (s *raftStream) answer() (answer error, transportErr error) {
	var hdr [4]byte
	if _, err := io.ReadFull(s.br, hdr[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(s.br, body); err != nil {
		return nil, err
	}
	var st spb.Status
	if err := proto.Unmarshal(body, &st); err != nil {
		return nil, err
	}
	return status.ErrorProto(&st), nil
}

// FINDING: a *client* certificate (fence certs create-client, kind
// pki.Client: ExtKeyUsageClientAuth only) opens a raft stream to a member.
// The raft port checks only that the certificate chains to the CA, and
// every certificate the CA issues carries ClientAuth, so any client of the
// cluster (an application holding a lock) can talk raft: send MsgApp,
// MsgVote, MsgSnap as a member would. The first refusal even tells it the
// cluster id and the receiver's node id it needs. The client certificate
// here is named like a member ("n2"), so a fix that only matches the common
// name to the sender (AuthorizePeer) does not close it.
// Fix: on the raft port accept only node certificates: require
// ExtKeyUsageServerAuth (or a dedicated "fence node" marker: a URI SAN or
// an OU the CA sets only on node certs) in the peer's leaf, in
// VerifyPeerCertificate/VerifyConnection of the raft ServerTLS (and the
// node's AuthorizePeer), and do not echo the receiver's cluster id in a
// refusal to a peer not yet admitted.
func TestRedteamTLSRaftPortTakesAClientCertificate(t *testing.T) {
	certs := locktest.NewCerts(t)
	c := locktest.NewCluster(t, 3, certs.Serve)
	target := c.Nodes[0]
	// a client certificate of the CA, named like member n2
	cfg, err := pki.ClientTLS(certs.Issue(pki.Client, "n2", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ServerName = "127.0.0.1"
	from, to := node.RaftID("n2"), node.RaftID(target.ID)
	// Probe with a wrong cluster id: the refusal names the right one.
	ans, terr := rtRaftHello(t, target.Server.RaftAddr(), cfg, &transportpb.Batch{ClusterId: 1, From: from, To: to})
	if terr != nil {
		t.Logf("refused at the TLS level: %v", terr) // the fixed behaviour
		return
	}
	var a, b, cl, d uint64
	if _, err := fmt.Sscanf(status.Convert(ans).Message(), "cluster id mismatch: node %d sent cluster id %d, but node %d is in cluster id %d", &a, &b, &cl, &d); err != nil {
		if ans == nil {
			t.Fatal("a client certificate opened a raft stream with a made-up cluster id")
		}
		t.Logf("refused: %v", ans) // e.g. PermissionDenied before the cluster id is checked
		return
	}
	ans, terr = rtRaftHello(t, target.Server.RaftAddr(), cfg, &transportpb.Batch{ClusterId: d, From: from, To: to})
	if terr == nil && ans == nil {
		t.Fatalf("a client certificate opened a raft stream to member %s (cluster id %d learnt from the refusal)", target.ID, d)
	}
	t.Logf("answer %v, transport %v", ans, terr)
}

// FINDING: the dev setup writes a CA and certificates into a data dir that
// a running fence holds. openTLS runs EnsureDev before node.New takes the
// data dir's lock, so a second `fence serve --data-dir D` (no TLS flags)
// next to a running node that serves D with real certificates creates
// D/tls/{ca.key,ca.crt,node.*,client.*} and only then fails on the lock: a
// refused start leaves a fresh CA key (and a client certificate that the
// CLI in that directory picks up) inside the live node's data dir.
// Fix: take the data dir's lock (node.lockDataDir) before EnsureDev, or
// have CheckFormat also refuse a dir that is locked.
func TestRedteamTLSDevSetupWritesIntoALockedDataDir(t *testing.T) {
	certs := locktest.NewCerts(t)
	dir := filepath.Join(t.TempDir(), "data")
	cfg := locktest.Config(dir)
	certs.Serve(&cfg)
	srv, err := locktest.Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	second := locktest.Config(dir)
	second.Insecure = false // dev setup: every address is 127.0.0.1:0
	if s2, err := server.New(second); err == nil {
		s2.Close()
		t.Fatal("a second server started on a data dir in use")
	} else {
		t.Logf("refused as expected: %v", err)
	}
	if _, err := os.Stat(server.DevTLSDir(dir)); err == nil {
		ents, _ := os.ReadDir(server.DevTLSDir(dir))
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("the refused start wrote %v into the running node's data dir %s", names, server.DevTLSDir(dir))
	}
}

// FINDING: "the node is alone" is judged from the flags only. A member of
// a 3-node cluster is restarted, as documented, without --bootstrap (it is
// used only on the first start) and, by mistake, without its --tls-*
// files: openTLS sees no Bootstrap/Join, takes the dev path, creates a
// brand-new dev CA in the member's data dir and starts a cluster member
// with it. It cannot talk to its peers (another CA), and its dev client
// certificate now opens a member that holds the cluster's lock state.
// Fix: decide "alone" from the data dir too: if it holds raft state whose
// configuration has other members (or a join record), refuse the dev
// setup with the "members of a cluster need certificates" error.
func TestRedteamTLSRestartedClusterMemberTakesTheDevSetup(t *testing.T) {
	var dirs []string
	var peers []server.Peer
	var lis []net.Listener
	for i := 0; i < 3; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis = append(lis, l)
		peers = append(peers, server.Peer{ID: fmt.Sprintf("n%d", i+1), RaftAddr: l.Addr().String()})
		dirs = append(dirs, t.TempDir())
	}
	var srvs []*server.Server
	for i := range 3 {
		cfg := locktest.Config(dirs[i]) // an --insecure cluster
		cfg.NodeID, cfg.RaftListener, cfg.Bootstrap = peers[i].ID, lis[i], peers
		s, err := server.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		srvs = append(srvs, s)
	}
	rtWaitLeader(t, srvs)
	for _, s := range srvs {
		s.Close()
	}
	// Restart n1 as documented (no --bootstrap), forgetting --insecure.
	cfg := locktest.Config(dirs[0])
	cfg.NodeID, cfg.Insecure, cfg.RaftAddr = "n1", false, peers[0].RaftAddr
	s, err := server.New(cfg)
	if err == nil {
		defer s.Close()
		t.Errorf("a member of a 3-node cluster restarted with the dev setup")
	} else {
		t.Logf("refused: %v", err)
	}
	if _, err := os.Stat(filepath.Join(server.DevTLSDir(dirs[0]), pki.CAKeyFile)); err == nil {
		t.Errorf("the dev setup made a CA in the data dir of a cluster member")
	}
}

// rtWaitLeader waits (up to 10s) until one of srvs leads.
func rtWaitLeader(t *testing.T, srvs []*server.Server) *server.Server {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range srvs {
			if s.Ready() {
				return s
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no leader within 10s")
	return nil
}

// FINDING: the gRPC port keeps a connection that never starts its TLS
// handshake for grpc-go's default ConnectionTimeout, 120 s (the raft port
// closes one after 10 s, the HTTPS port after 5 s). Anyone who can reach
// the port, with no certificate, holds a goroutine and a file descriptor
// per connection for two minutes: a few thousand silent connections a
// minute exhaust the server's descriptors and lock out real clients.
// Fix: grpc.ConnectionTimeout(10*time.Second) (the raft handshake
// timeout) in grpc.NewServer.
func TestRedteamTLSGRPCHoldsASilentConnection(t *testing.T) {
	t.Parallel()
	certs := locktest.NewCerts(t)
	srv := locktest.Start(t, certs.Serve)
	c, err := net.Dial("tcp", srv.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(15 * time.Second))
	_, err = c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the gRPC port still holds a connection that sent nothing after %v (raft closes one after 10s)", time.Since(start).Round(time.Second))
	}
	t.Logf("closed after %v: %v", time.Since(start), err)
}

// FINDING: the HTTPS port (client certificate optional) has no idle
// timeout: a caller without any certificate completes the TLS handshake,
// negotiates h2 (offered by ServerConfig's NextProtos) and sends the
// preface, or makes one HTTP/1.1 request to /healthz, and then keeps the
// connection (goroutines, TLS and h2 state) open forever; ReadHeaderTimeout
// covers neither an idle h2 connection nor a keep-alive wait.
// Fix: set http.Server.IdleTimeout (e.g. 10 s; scrapes come every 15 s or
// more, so nothing is lost) and, for h2, ReadTimeout or an
// http2.Server{IdleTimeout} as well.
func TestRedteamTLSHTTPSHoldsIdleConnectionsWithoutACertificate(t *testing.T) {
	t.Parallel()
	certs := locktest.NewCerts(t)
	srv := locktest.Start(t, certs.Serve, func(c *server.Config) { c.MetricsAddr = "127.0.0.1:0" })
	cfg, err := pki.ClientTLS(certs.Client)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Certificates, cfg.ServerName = nil, "127.0.0.1" // no client certificate
	type result struct {
		proto string
		err   error
		took  time.Duration
	}
	results := make(chan result, 2)
	for _, proto := range []string{"h2", "http/1.1"} {
		go func() {
			cc := cfg.Clone()
			cc.NextProtos = []string{proto}
			c, err := tls.Dial("tcp", srv.MetricsAddr(), cc)
			if err != nil {
				results <- result{proto, err, 0}
				return
			}
			defer c.Close()
			if proto == "h2" {
				c.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
				c.Write([]byte{0, 0, 0, 4, 0, 0, 0, 0, 0}) // an empty SETTINGS frame
			} else {
				c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
			}
			start := time.Now()
			_ = c.SetReadDeadline(start.Add(15 * time.Second))
			_, err = io.Copy(io.Discard, c) // the answer, then EOF when the server lets go
			results <- result{proto, err, time.Since(start)}
		}()
	}
	for range 2 {
		r := <-results
		if ne, ok := r.err.(net.Error); ok && ne.Timeout() {
			t.Errorf("%s: a caller without a certificate still holds an idle HTTPS connection after %v", r.proto, r.took.Round(time.Second))
		} else if r.err != nil && r.took == 0 {
			t.Errorf("%s: %v", r.proto, r.err)
		}
	}
}

// FINDING: ReloadTLS (SIGHUP) accepts any certificate of the CA as the
// node's, a *client* certificate too (no ExtKeyUsageServerAuth): load
// verifies it with ExtKeyUsageAny. ReloadTLS returns nil and logs
// "reloaded TLS certificates", and from then on every new handshake on
// every port (gRPC, HTTPS, raft; and this node's dials to peers, which
// present it as a client too) fails with "certificate specifies an
// incompatible key usage": the node looks healthy and serves no new
// connection. The same certificate is accepted at startup (NewReloader).
// Fix: in pki.load for the server's Reloader verify with
// KeyUsages {ServerAuth, ClientAuth} (both, one Verify each), and check
// that the certificate names the hosts of the node's addresses
// (leaf.VerifyHostname) before swapping it in.
func TestRedteamTLSReloadTakesAClientCertificateAsTheNodes(t *testing.T) {
	certs := locktest.NewCerts(t)
	srv := locktest.Start(t, certs.Serve)
	for _, p := range [][2]string{{certs.Client.Cert, certs.Node.Cert}, {certs.Client.Key, certs.Node.Key}} {
		b, err := os.ReadFile(p[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p[1], b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	reloadErr := srv.ReloadTLS()
	cfg, err := pki.ClientTLS(certs.Client)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ServerName = "127.0.0.1"
	c, dialErr := tls.DialWithDialer(&net.Dialer{Timeout: 3 * time.Second}, "tcp", srv.GRPCAddr(), cfg)
	if c != nil {
		c.Close()
	}
	if reloadErr == nil && dialErr != nil {
		t.Fatalf("ReloadTLS took a client certificate as the node's without an error, and now no client can connect: %v", dialErr)
	}
}

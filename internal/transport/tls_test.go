package transport

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/internal/pki"
	"github.com/fencehq/fence/internal/transport/transportpb"
)

// testCA is a CA made for one test.
type testCA struct {
	t  *testing.T
	ca *pki.CA
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	ca, err := pki.NewCA(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{t: t, ca: ca}
}

// issue signs a node certificate for 127.0.0.1.
func (c *testCA) issue(name string) *pki.Issued {
	c.t.Helper()
	is, err := c.ca.Issue(pki.Node, name, []string{"127.0.0.1"}, 30*time.Minute)
	if err != nil {
		c.t.Fatal(err)
	}
	return is
}

// node writes the CA and a node certificate for 127.0.0.1 into a directory
// of their own (pki.NodeFiles) and loads them.
func (c *testCA) node(name string) *pki.Reloader {
	c.t.Helper()
	dir := filepath.Join(c.t.TempDir(), name)
	if err := pki.SaveCA(dir, c.ca); err != nil {
		c.t.Fatal(err)
	}
	if err := pki.SaveIssued(dir, "node", c.issue(name)); err != nil {
		c.t.Fatal(err)
	}
	rl, err := pki.NewReloader(pki.NodeFiles(dir))
	if err != nil {
		c.t.Fatal(err)
	}
	return rl
}

// pool is a cert pool of the CA alone.
func (c *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.ca.Cert)
	return p
}

// withTLS is how a cluster member is configured: mutual TLS both ways with
// the certificates of rl.
func withTLS(rl *pki.Reloader) nodeOpt {
	return func(c *Config) {
		c.ServerTLS = rl.ServerConfig(tls.RequireAndVerifyClientCert)
		c.ClientTLS = rl.ClientConfig
	}
}

// withClientTLS sets only the dialing side's TLS.
func withClientTLS(f func(addr string) *tls.Config) nodeOpt {
	return func(c *Config) { c.ClientTLS = f }
}

// serialOf is the serial number of a PEM certificate.
func serialOf(t *testing.T, certPEM []byte) *big.Int {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	if b == nil {
		t.Fatal("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert.SerialNumber
}

// servedSerial dials addr with TLS (cfg) and returns the serial of the
// certificate the server presented.
func servedSerial(t *testing.T, addr string, cfg *tls.Config) *big.Int {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: failSafe}, "tcp", addr, cfg)
	if err != nil {
		t.Fatalf("TLS dial of %s: %v", addr, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

// refusedTLS is what a TLS server logs for a refused handshake.
const refusedTLS = "refused a TLS handshake on the raft port"

// TestTLSExchange: two members with node certificates of one CA exchange
// messages both ways, in order, and a snapshot; nobody is reported
// unreachable, and the raft port serves each member's own certificate.
func TestTLSExchange(t *testing.T) {
	ca := newTestCA(t, "test CA")
	rlA, rlB := ca.node("a"), ca.node("b")
	a := newNode(t, 7, 1, "", withTLS(rlA))
	b := newNode(t, 7, 2, "", withTLS(rlB))
	connect(a, b)

	const n = 200
	for seq := uint64(1); seq <= n; seq++ {
		a.tr.Send([]*raftpb.Message{appMsg(1, 2, seq, 100)})
		b.tr.Send([]*raftpb.Message{appMsg(2, 1, seq, 100)})
	}
	waitFor(t, "both ways' messages", func() bool { return a.numDelivered() == n && b.numDelivered() == n })
	for _, x := range []*node{a, b} {
		got := indexes(x.delivered())
		for i, idx := range got {
			if idx != uint64(i+1) {
				t.Fatalf("node %d received indexes %v, want 1..%d in order", x.id, got, n)
			}
		}
	}

	snap := snapMsg(1, 2, 3<<20)
	a.tr.Send([]*raftpb.Message{snap})
	waitFor(t, "the snapshot's outcome", func() bool { return len(a.snapshotResults()) > 0 })
	if got := a.snapshotResults(); !slices.Equal(got, []snapResult{{2, true}}) {
		t.Fatalf("snapshot results %v, want [{2 true}]", got)
	}
	if got := b.delivered(); len(got) != n+1 || !proto.Equal(got[n], snap) {
		t.Fatalf("the snapshot did not arrive whole (%d messages delivered)", len(got))
	}
	if a.unreachable(2) != 0 || b.unreachable(1) != 0 {
		t.Errorf("reported unreachable: %d, %d", a.unreachable(2), b.unreachable(1))
	}
	// The raft port speaks TLS with the member's certificate.
	if got, want := servedSerial(t, b.tr.Addr(), rlA.ClientConfig(b.tr.Addr())), rlB.Leaf().SerialNumber; got.Cmp(want) != 0 {
		t.Errorf("node 2 serves certificate serial %v, want its own %v", got, want)
	}
	for _, x := range []*node{a, b} {
		if x.logs.contains(refusedTLS) {
			t.Errorf("node %d refused a handshake:\n%s", x.id, x.logs)
		}
	}
}

// expectRefused drives a's messages at b, whose raft port speaks TLS, until
// b has logged refusedTLS with wantErr at least twice (a keeps retrying)
// and a has reported b unreachable; then it checks that nothing was
// delivered, and that a snapshot fails too.
func expectRefused(t *testing.T, a, b *node, wantErr string) {
	t.Helper()
	seq := uint64(0)
	waitFor(t, fmt.Sprintf("node 2 to refuse node 1's handshake twice with %q", wantErr), func() bool {
		seq++
		a.tr.Send([]*raftpb.Message{appMsg(1, 2, seq, 10)})
		return countRefusals(b.logs.String(), wantErr) >= 2
	})
	waitFor(t, "node 1 to report node 2 unreachable", func() bool { return a.unreachable(2) > 0 })
	if !b.logs.contains("remote=127.0.0.1:") {
		t.Errorf("the refusal does not name the remote address:\n%s", b.logs)
	}
	if !a.logs.contains("raft stream to peer failed") {
		t.Errorf("node 1 did not log its failure:\n%s", a.logs)
	}
	snapshotFailsNothingDelivered(t, a, b)
}

// countRefusals counts the refused-handshake lines of a log that carry
// wantErr.
func countRefusals(log, wantErr string) int {
	n := 0
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, refusedTLS) && strings.Contains(line, wantErr) {
			n++
		}
	}
	return n
}

// TestTLSOtherCARefused: a dialer that trusts the member's CA but presents
// a certificate of another CA is refused by the member's handshake: nothing
// is delivered, the member logs the refusal with the remote address, and
// the dialer reports the peer unreachable and keeps retrying.
func TestTLSOtherCARefused(t *testing.T) {
	ca, other := newTestCA(t, "cluster CA"), newTestCA(t, "other CA")
	b := newNode(t, 7, 2, "", withTLS(ca.node("b")))
	is := other.issue("intruder")
	cert, err := tls.X509KeyPair(is.CertPEM, is.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	a := newNode(t, 7, 1, "", withClientTLS(func(addr string) *tls.Config {
		return &tls.Config{
			RootCAs: ca.pool(), MinVersion: tls.VersionTLS12,
			// Certificates would send nothing: Go's client offers only a
			// certificate of a CA the server names. Offer it anyway.
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil },
		}
	}))
	a.tr.SetPeer(2, b.tr.Addr())
	expectRefused(t, a, b, "certificate signed by unknown authority")
}

// TestTLSNoClientCertRefused: a dialer that presents no certificate at all
// is refused the same way.
func TestTLSNoClientCertRefused(t *testing.T) {
	ca := newTestCA(t, "cluster CA")
	b := newNode(t, 7, 2, "", withTLS(ca.node("b")))
	a := newNode(t, 7, 1, "", withClientTLS(func(addr string) *tls.Config {
		return &tls.Config{RootCAs: ca.pool(), MinVersion: tls.VersionTLS12} // ServerName from addr
	}))
	a.tr.SetPeer(2, b.tr.Addr())
	expectRefused(t, a, b, "didn't provide a certificate")
}

// TestTLSPlaintextDialerRefused: a plaintext dialer (no ClientTLS) at a TLS
// raft port delivers nothing and is refused; and the server closes such a
// connection at once, without waiting out the handshake timeout or
// answering in the raft protocol.
func TestTLSPlaintextDialerRefused(t *testing.T) {
	ca := newTestCA(t, "cluster CA")
	b := newNode(t, 7, 2, "", withTLS(ca.node("b")))
	a := newNode(t, 7, 1, "")
	a.tr.SetPeer(2, b.tr.Addr())
	expectRefused(t, a, b, "does not look like a TLS handshake")

	c := dialRaw(t, b.tr.Addr(), kindMessages)
	if err := writeFrame(c.bw, &transportpb.Batch{ClusterId: 7, From: 1, To: 2}); err != nil {
		t.Fatal(err)
	}
	if err := c.bw.Flush(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got, err := io.ReadAll(c.Conn) // under dialRaw's fail-safe deadline
	took := time.Since(start)
	if errors.Is(err, os.ErrDeadlineExceeded) || took >= handshakeTimeout {
		t.Fatalf("the server kept a plaintext connection open for %v (read: %v)", took, err)
	}
	if len(got) > 0 && got[0] != 0x15 { // a TLS alert record, if anything
		t.Errorf("the server answered a plaintext connection with %q", got)
	}
	if n := b.numDelivered(); n != 0 {
		t.Errorf("node 2 delivered %d messages", n)
	}
}

// TestTLSDialerToPlaintextListener: a TLS dialer at a plaintext raft port
// fails its handshake (the dial error says so), delivers nothing, and
// reports the peer unreachable; the plaintext side refuses the bytes as no
// raft protocol.
func TestTLSDialerToPlaintextListener(t *testing.T) {
	ca := newTestCA(t, "cluster CA")
	b := newNode(t, 7, 2, "")
	a := newNode(t, 7, 1, "", withClientTLS(ca.node("a").ClientConfig))
	a.tr.SetPeer(2, b.tr.Addr())
	a.tr.Send([]*raftpb.Message{appMsg(1, 2, 1, 10)})
	want := "TLS handshake with " + b.tr.Addr() + ": "
	waitFor(t, fmt.Sprintf("node 1 to log %q", want), func() bool { return a.logs.contains(want) })
	waitFor(t, "node 1 to report node 2 unreachable", func() bool { return a.unreachable(2) > 0 })
	waitFor(t, "node 2 to refuse the bytes", func() bool { return b.logs.contains("bad preface") })
	snapshotFailsNothingDelivered(t, a, b)
}

// snapshotFailsNothingDelivered: a snapshot from a to b fails, and b has
// delivered nothing from a.
func snapshotFailsNothingDelivered(t *testing.T, a, b *node) {
	t.Helper()
	a.tr.Send([]*raftpb.Message{snapMsg(1, 2, 1000)})
	waitFor(t, "the snapshot to fail", func() bool { return len(a.snapshotResults()) > 0 })
	if got := a.snapshotResults(); !slices.Equal(got, []snapResult{{2, false}}) {
		t.Errorf("snapshot results %v, want [{2 false}]", got)
	}
	if n := b.numDelivered(); n != 0 {
		t.Errorf("node 2 delivered %d messages from a refused peer", n)
	}
}

// TestTLSRotation: after the member's certificate files are overwritten
// with a new certificate of the same CA and its Reloader reloads them, a
// new connection sees the new certificate, and members still talk (new
// dials take ClientTLS's fresh config).
func TestTLSRotation(t *testing.T) {
	ca := newTestCA(t, "cluster CA")
	rlA, rlB := ca.node("a"), ca.node("b")
	a := newNode(t, 7, 1, "", withTLS(rlA))
	b := newNode(t, 7, 2, "", withTLS(rlB))
	connect(a, b)
	a.tr.Send([]*raftpb.Message{appMsg(1, 2, 1, 10)})
	waitFor(t, "the first message", func() bool { return b.numDelivered() == 1 })

	old := rlB.Leaf().SerialNumber
	if got := servedSerial(t, b.tr.Addr(), rlA.ClientConfig(b.tr.Addr())); got.Cmp(old) != 0 {
		t.Fatalf("served serial %v before the rotation, want %v", got, old)
	}
	is := ca.issue("b")
	files := rlB.Files()
	if err := os.WriteFile(files.Key, is.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files.Cert, is.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rlB.Reload(); err != nil {
		t.Fatal(err)
	}
	want := serialOf(t, is.CertPEM)
	if want.Cmp(old) == 0 {
		t.Fatal("the new certificate has the old serial")
	}
	if got := servedSerial(t, b.tr.Addr(), rlA.ClientConfig(b.tr.Addr())); got.Cmp(want) != 0 {
		t.Errorf("served serial %v after the rotation, want the new %v (old %v)", got, want, old)
	}

	// Both ways still work: b's stream to a is dialed now, with the new
	// certificate, and a's open stream to b carries on.
	b.tr.Send([]*raftpb.Message{appMsg(2, 1, 1, 10)})
	a.tr.Send([]*raftpb.Message{appMsg(1, 2, 2, 10)})
	waitFor(t, "messages after the rotation", func() bool { return a.numDelivered() == 1 && b.numDelivered() == 2 })
}

// TestTLSCloseDuringHandshake: Close does not wait for a connection stuck
// in its TLS handshake (a client that connected and said nothing): it
// closes it.
func TestTLSCloseDuringHandshake(t *testing.T) {
	ca := newTestCA(t, "cluster CA")
	b := newNode(t, 7, 2, "", withTLS(ca.node("b")))
	c, err := net.DialTimeout("tcp", b.tr.Addr(), failSafe)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "the connection to be accepted", func() bool {
		b.tr.mu.Lock()
		defer b.tr.mu.Unlock()
		return len(b.tr.inbound) == 1
	})
	start := time.Now()
	b.close()
	if took := time.Since(start); took >= handshakeTimeout {
		t.Errorf("Close took %v: it waited for the handshake", took)
	}
	_ = c.SetReadDeadline(time.Now().Add(failSafe))
	if _, err := io.ReadAll(c); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Error("the connection was not closed")
	}
	if b.logs.contains(refusedTLS) {
		t.Errorf("Close's own closing was logged as a refusal:\n%s", b.logs)
	}
}

// withAuthorize makes the receiving side accept only senders whose
// certificate's common name is their node id in decimal (the node itself
// checks names against raft ids the same way).
func withAuthorize(seen *atomic.Int64) nodeOpt {
	return func(c *Config) {
		c.AuthorizePeer = func(from uint64, cert *x509.Certificate) error {
			seen.Add(1)
			if cert.Subject.CommonName != fmt.Sprint(from) {
				return fmt.Errorf("the certificate names %q", cert.Subject.CommonName)
			}
			return nil
		}
	}
}

// A member's certificate speaks only for that member: a stream (or a
// snapshot) whose sender id is not the one its certificate names is refused
// with PermissionDenied, and nothing of it is delivered.
func TestTLSPeerMustBeWhoItsCertificateNames(t *testing.T) {
	ca := newTestCA(t, "test CA")
	var seen atomic.Int64
	impostor := newNode(t, 7, 1, "", withTLS(ca.node("3"))) // node 1 with node 3's certificate
	b := newNode(t, 7, 2, "", withTLS(ca.node("2")), withAuthorize(&seen))
	connect(impostor, b)
	seq := uint64(0)
	waitFor(t, "node 2 to refuse the impostor", func() bool {
		seq++
		impostor.tr.Send([]*raftpb.Message{appMsg(1, 2, seq, 10)})
		return b.logs.contains(`node 1 refused: the certificate names \"3\"`)
	})
	waitFor(t, "node 1 to learn why", func() bool {
		return impostor.logs.contains("PermissionDenied") || impostor.logs.contains("the certificate names")
	})
	snapshotFailsNothingDelivered(t, impostor, b)

	// The rightful node 1 gets in, over the same port.
	a := newNode(t, 7, 1, "", withTLS(ca.node("1")))
	connect(a, b)
	a.tr.Send([]*raftpb.Message{appMsg(1, 2, 1, 10)})
	waitFor(t, "node 1's message", func() bool { return b.numDelivered() == 1 })
	if seen.Load() < 2 {
		t.Fatalf("AuthorizePeer asked %d times", seen.Load())
	}
}

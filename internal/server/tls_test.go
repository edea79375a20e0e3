package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/pki"
	"github.com/fencehq/fence/internal/server"
)

// call makes one read-only call to addr with creds and returns its error.
func call(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = api.NewFenceServiceClient(conn).GetLock(ctx, &api.GetLockRequest{Name: "x"})
	return err
}

func tlsCreds(t *testing.T, f pki.Files) credentials.TransportCredentials {
	t.Helper()
	cfg, err := pki.ClientTLS(f)
	if err != nil {
		t.Fatal(err)
	}
	return credentials.NewTLS(cfg)
}

// servedSerial is the serial of the certificate addr serves now.
func servedSerial(t *testing.T, addr string, f pki.Files) *big.Int {
	t.Helper()
	cfg, err := pki.ClientTLS(f)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ServerName = "127.0.0.1"
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

func TestDevSetupServesTLSOnEveryPort(t *testing.T) {
	dir := t.TempDir()
	cfg := locktest.Config(dir)
	cfg.Insecure, cfg.MetricsAddr, cfg.Pprof = false, "127.0.0.1:0", true
	srv, err := locktest.Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dev := pki.ClientFiles(server.DevTLSDir(dir))
	for _, f := range []string{dev.CA, dev.Cert, dev.Key, filepath.Join(server.DevTLSDir(dir), pki.CAKeyFile)} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("dev setup: %v", err)
		}
	}

	// The dev client certificate works.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, []string{srv.GRPCAddr()}, client.WithTLSFiles(dev.CA, dev.Cert, dev.Key))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lease, err := c.Lock(ctx, "dev/tls")
	if err != nil || lease.Token() != 1 {
		t.Fatalf("lock over TLS: %v", err)
	}
	if err := call(t, srv.GRPCAddr(), tlsCreds(t, dev)); err != nil && status.Code(err) != codes.NotFound {
		t.Fatalf("raw call with the dev certificate: %v", err)
	}

	// Everything else is refused: plaintext, no client certificate, a
	// certificate of another CA.
	other := locktest.NewCerts(t)
	noCert, _ := pki.ClientTLS(dev)
	noCert.Certificates = nil
	foreignCfg, err := tls.LoadX509KeyPair(other.Client.Cert, other.Client.Key)
	if err != nil {
		t.Fatal(err)
	}
	withForeign, _ := pki.ClientTLS(dev)
	withForeign.Certificates = []tls.Certificate{foreignCfg}
	for name, creds := range map[string]credentials.TransportCredentials{
		"plaintext":             insecure.NewCredentials(),
		"no client certificate": credentials.NewTLS(noCert),
		"another CA's client":   credentials.NewTLS(withForeign),
		"trusting another CA":   tlsCreds(t, other.Client),
	} {
		if err := call(t, srv.GRPCAddr(), creds); status.Code(err) != codes.Unavailable {
			t.Errorf("%s: %v, want Unavailable", name, err)
		}
	}
	if _, err := client.Dial(ctxT(t, time.Second), []string{srv.GRPCAddr()}, client.WithInsecure()); err == nil {
		t.Error("a plaintext client reached a TLS server")
	}

	// The HTTP port: probes and /metrics need no client certificate, pprof
	// does, plaintext gets nothing.
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(mustRead(t, dev.CA))
	anon := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	full, _ := pki.ClientTLS(dev)
	withCert := &http.Client{Transport: &http.Transport{TLSClientConfig: full}}
	base := "https://" + srv.MetricsAddr()
	for _, tc := range []struct {
		c    *http.Client
		path string
		want int
	}{
		{anon, "/readyz", 200}, {anon, "/leaderz", 200}, {anon, "/healthz", 200}, {anon, "/metrics", 200},
		{anon, "/debug/pprof/cmdline", http.StatusUnauthorized}, {withCert, "/debug/pprof/cmdline", 200},
	} {
		resp, err := tc.c.Get(base + tc.path)
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %d, want %d", tc.path, resp.StatusCode, tc.want)
		}
	}
	if resp, err := http.Get("http://" + srv.MetricsAddr() + "/readyz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("plaintext HTTP got an answer from the TLS port")
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestWithoutCertificatesOnlyALoopbackSingleNodeStarts(t *testing.T) {
	for name, mutate := range map[string]func(*server.Config){
		"gRPC on every interface":    func(c *server.Config) { c.GRPCAddr = "0.0.0.0:0" },
		"metrics on every interface": func(c *server.Config) { c.MetricsAddr = ":0" },
		"raft on another address":    func(c *server.Config) { c.RaftAddr = "10.1.2.3:7302" },
		"a cluster": func(c *server.Config) {
			c.Bootstrap = []server.Peer{{ID: c.NodeID, RaftAddr: c.RaftAddr}, {ID: "n2", RaftAddr: "127.0.0.1:1"}}
		},
		"a join": func(c *server.Config) { c.Join = []string{"127.0.0.1:1"} },
	} {
		dir := filepath.Join(t.TempDir(), "data")
		cfg := locktest.Config(dir)
		cfg.Insecure, cfg.RaftAddr = false, "127.0.0.1:17999"
		mutate(&cfg)
		srv, err := server.New(cfg)
		if err == nil {
			srv.Close()
			t.Errorf("%s: started without certificates", name)
			continue
		}
		if !strings.Contains(err.Error(), "--tls-cert") || !strings.Contains(err.Error(), "--insecure") {
			t.Errorf("%s: the error does not say what to do: %v", name, err)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%s: the refused start created the data dir", name)
		}
	}
	cfg := locktest.Config(t.TempDir())
	cfg.TLS = locktest.NewCerts(t).Node
	if _, err := server.New(cfg); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("TLS files with insecure: %v", err)
	}
	cfg.Insecure, cfg.TLS.Key = false, ""
	if _, err := server.New(cfg); err == nil || !strings.Contains(err.Error(), "missing: key") {
		t.Errorf("TLS without a key: %v", err)
	}
}

func TestClusterTalksMutualTLS(t *testing.T) {
	certs := locktest.NewCerts(t)
	c := locktest.NewCluster(t, 3, certs.Serve)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, c.Addrs(), client.WithTLSFiles(certs.Client.CA, certs.Client.Cert, certs.Client.Key))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	lease, err := cl.Lock(ctx, "cluster/tls")
	if err != nil || lease.Token() == 0 {
		t.Fatalf("lock on a TLS cluster: %v", err)
	}
	// The raft port speaks TLS and wants a member's certificate.
	raftAddr := c.Nodes[0].Server.RaftAddr()
	member, _ := pki.ClientTLS(certs.Node)
	member.ServerName = "127.0.0.1"
	conn, err := tls.Dial("tcp", raftAddr, member)
	if err != nil {
		t.Fatalf("a member's TLS handshake with the raft port: %v", err)
	}
	conn.Close()
	other := locktest.NewCerts(t)
	strangerCert, err := tls.LoadX509KeyPair(other.Node.Cert, other.Node.Key)
	if err != nil {
		t.Fatal(err)
	}
	stranger := member.Clone()
	stranger.Certificates = []tls.Certificate{strangerCert}
	if conn, err := tls.Dial("tcp", raftAddr, stranger); err == nil {
		// TLS 1.3: the server's verdict on the client's certificate comes
		// with the first read.
		conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("raft port with another CA's certificate: read gave %v", err)
		}
	}

	// The grant is replicated: a new leader has it.
	old := c.Leader()
	if err := old.Server.Close(); err != nil {
		t.Fatal(err)
	}
	var rest []*locktest.Node
	for _, n := range c.Nodes {
		if n != old {
			rest = append(rest, n)
		}
	}
	c.Leader(rest...)
	st, err := cl.Status(ctx, "cluster/tls")
	if err != nil || st.Token != lease.Token() {
		t.Fatalf("after failover over mutual TLS: %+v, %v", st, err)
	}
}

func TestReloadTLSRotatesWithoutARestart(t *testing.T) {
	certs := locktest.NewCerts(t)
	srv := locktest.Start(t, certs.Serve)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, []string{srv.GRPCAddr()}, client.WithTLSFiles(certs.Client.CA, certs.Client.Cert, certs.Client.Key), client.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	lease, err := cl.Lock(ctx, "rotate")
	if err != nil {
		t.Fatal(err)
	}
	before := servedSerial(t, srv.GRPCAddr(), certs.Client)

	// A broken replacement changes nothing.
	os.WriteFile(certs.Node.Cert, []byte("not a certificate"), 0o644)
	if err := srv.ReloadTLS(); err == nil {
		t.Fatal("reloaded a broken certificate")
	}
	if got := servedSerial(t, srv.GRPCAddr(), certs.Client); got.Cmp(before) != 0 {
		t.Fatal("a failed reload changed the served certificate")
	}

	is, err := certs.CA.Issue(pki.Node, "node", []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(certs.Node.Cert, is.CertPEM, 0o644)
	os.WriteFile(certs.Node.Key, is.KeyPEM, 0o600)
	if err := srv.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	if got := servedSerial(t, srv.GRPCAddr(), certs.Client); got.Cmp(before) == 0 {
		t.Fatal("new connections still get the old certificate")
	}
	// The lease lived through it: renewed over the connection made before,
	// and a new client can see it.
	select {
	case <-lease.Done():
		t.Fatalf("lease ended during rotation: %v", lease.Err())
	case <-time.After(3 * time.Second): // longer than the TTL: renewals happened
	}
	st, err := cl.Status(ctx, "rotate")
	if err != nil || st.Token != lease.Token() {
		t.Fatalf("after rotation: %+v, %v", st, err)
	}
}

// A member that holds another member's certificate cannot speak raft as
// itself: the others refuse its streams, naming the certificate's member.
func TestMemberWithAnotherMembersCertificateIsRefused(t *testing.T) {
	certs := locktest.NewCerts(t)
	logs := map[string]*locktest.LogBuffer{}
	c := locktest.NewCluster(t, 3, func(cfg *server.Config) {
		id := cfg.NodeID
		if id == "n3" {
			id = "n1" // n3 presents n1's certificate
		}
		cfg.TLS, cfg.Insecure = certs.NodeFiles(id), false
		logs[cfg.NodeID] = &locktest.LogBuffer{}
		cfg.Logger = slog.New(slog.NewTextHandler(logs[cfg.NodeID], &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	want := `its certificate is member \"n1\"'s`
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs["n1"].String()+logs["n2"].String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no member refused n3's streams; logs:\nn1: %s\nn2: %s", logs["n1"], logs["n2"])
		}
		time.Sleep(20 * time.Millisecond)
	}
	if l := c.Leader(c.Nodes[0], c.Nodes[1]); l.ID == "n3" {
		t.Fatal("n3 leads with another member's certificate")
	}
}

// Rotation under load: clients lock and release without pause while the
// server's certificate is replaced three times and new clients come with
// new client certificates; every call succeeds and no lease is lost.
func TestRotationUnderLoadLosesNoLease(t *testing.T) {
	certs := locktest.NewCerts(t)
	srv := locktest.Start(t, certs.Serve)
	newClient := func(name string) *client.Client {
		f := certs.Issue(pki.Client, name, time.Hour)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := client.Dial(ctx, []string{srv.GRPCAddr()}, client.WithTTL(2*time.Second), client.WithTLSFiles(f.CA, f.Cert, f.Key))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	const workers = 4
	stop := make(chan struct{})
	errs := make(chan error, workers)
	var cycles sync.WaitGroup
	var done atomic.Int64
	for w := range workers {
		c := newClient(fmt.Sprintf("worker-%d", w))
		cycles.Add(1)
		go func() {
			defer cycles.Done()
			ctx := context.Background()
			held, err := c.Lock(ctx, fmt.Sprintf("held/%d", w)) // held through every rotation
			if err != nil {
				errs <- err
				return
			}
			for {
				select {
				case <-stop:
					if err := held.Err(); err != nil {
						errs <- fmt.Errorf("worker %d: the lease held through the rotations ended: %w", w, err)
					}
					return
				case <-held.Done():
					errs <- fmt.Errorf("worker %d: lease lost during rotation: %v", w, held.Err())
					return
				default:
				}
				l, err := c.Lock(ctx, fmt.Sprintf("cycle/%d", w))
				if err == nil {
					err = l.Release(ctx)
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d: %w", w, err)
					return
				}
				done.Add(1)
			}
		}()
	}
	// Between rotations: cycles, and more than a renewal interval (TTL/3),
	// so the held leases renew across each one (4 s in all, twice the TTL).
	for i := range 3 {
		before, since := done.Load(), time.Now()
		waitUntil(t, "cycles between rotations", func() bool { return done.Load() >= before+20 && time.Since(since) > time.Second })
		is, err := certs.CA.Issue(pki.Node, "node1", []string{"127.0.0.1", "localhost"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		old := servedSerial(t, srv.GRPCAddr(), certs.Client)
		os.WriteFile(certs.Node.Cert, is.CertPEM, 0o644)
		os.WriteFile(certs.Node.Key, is.KeyPEM, 0o600)
		if err := srv.ReloadTLS(); err != nil {
			t.Fatal(err)
		}
		if servedSerial(t, srv.GRPCAddr(), certs.Client).Cmp(old) == 0 {
			t.Fatalf("rotation %d: the old certificate is still served", i+1)
		}
		// A new client, with a new client certificate, joins the load.
		if _, err := newClient(fmt.Sprintf("late-%d", i)).Lock(context.Background(), fmt.Sprintf("late/%d", i)); err != nil {
			t.Fatalf("a client after rotation %d: %v", i+1, err)
		}
	}
	before, since := done.Load(), time.Now()
	waitUntil(t, "cycles after the last rotation", func() bool { return done.Load() >= before+20 && time.Since(since) > time.Second })
	close(stop)
	cycles.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d lock+release cycles across 3 rotations", done.Load())
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

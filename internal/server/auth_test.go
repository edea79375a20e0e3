package server_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/audit"
	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/pki"
	"github.com/fencehq/fence/internal/policy"
	"github.com/fencehq/fence/internal/server"
)

const testPolicy = `
identities:
  - name: alice
    prefixes: [a/]
    rights: [acquire, read]
  - name: reader
    prefixes: [""]
    rights: [read]
  - name: cron
    token_sha256: %s
    prefixes: [jobs/]
    rights: [acquire, read]
  - name: ops
    prefixes: [""]
    rights: [acquire, read, admin]
`

type policyCluster struct {
	t      *testing.T
	certs  *locktest.Certs
	addr   string
	srv    *server.Server
	policy string // the file
	audit  string // the audit file
}

// startWithPolicy starts a TLS node under the policy doc; mutate, if
// given, adjusts its config.
func startWithPolicy(t *testing.T, doc string, mutate ...func(*server.Config)) *policyCluster {
	t.Helper()
	dir := t.TempDir()
	pc := &policyCluster{t: t, certs: locktest.NewCerts(t), policy: filepath.Join(dir, "policy.yaml"), audit: filepath.Join(dir, "audit.jsonl")}
	if err := os.WriteFile(pc.policy, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	pc.srv = locktest.Start(t, append([]func(*server.Config){pc.certs.Serve, func(c *server.Config) { c.PolicyFile, c.AuditFile = pc.policy, pc.audit }}, mutate...)...)
	pc.addr = pc.srv.GRPCAddr()
	return pc
}

// clientFiles issues a client certificate for identity.
func (pc *policyCluster) clientFiles(identity string) pki.Files {
	pc.t.Helper()
	return pc.certs.Issue(pki.Client, identity, time.Hour)
}

func (pc *policyCluster) dial(opts ...client.Option) *client.Client {
	pc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, []string{pc.addr}, append([]client.Option{client.WithTTL(5 * time.Second)}, opts...)...)
	if err != nil {
		pc.t.Fatal(err)
	}
	pc.t.Cleanup(func() { c.Close() })
	return c
}

func (pc *policyCluster) as(identity string) *client.Client {
	f := pc.clientFiles(identity)
	return pc.dial(client.WithTLSFiles(f.CA, f.Cert, f.Key), client.WithOwner(identity))
}

// noCert is TLS that trusts the CA and presents no certificate.
func (pc *policyCluster) noCert() client.Option {
	cfg, err := pki.ClientTLS(pc.certs.Client)
	if err != nil {
		pc.t.Fatal(err)
	}
	cfg.Certificates = nil
	return client.WithTLS(cfg)
}

func wantCode(t *testing.T, what string, err error, code codes.Code, msg string) {
	t.Helper()
	if status.Code(err) != code && !strings.Contains(err.Error(), code.String()) {
		t.Errorf("%s: %v, want %v", what, err, code)
	} else if msg != "" && !strings.Contains(err.Error(), msg) {
		t.Errorf("%s: %v, want it to say %q", what, err, msg)
	}
}

func TestPolicyGrantsByIdentityAndPrefix(t *testing.T) {
	pc := startWithPolicy(t, strings.Replace(testPolicy, "%s", policy.HashToken("cron-secret"), 1))
	ctx := t.Context()
	alice, ops, reader := pc.as("alice"), pc.as("ops"), pc.as("reader")

	if _, err := alice.Lock(ctx, "a/job"); err != nil {
		t.Fatalf("alice on her prefix: %v", err)
	}
	_, err := alice.Lock(ctx, "b/job")
	wantCode(t, "alice outside her prefix", err, codes.PermissionDenied, `identity "alice" has the acquire right only under the prefixes "a/"`)
	if _, err := ops.Lock(ctx, "b/job"); err != nil {
		t.Fatalf("ops: %v", err)
	}
	_, err = alice.Status(ctx, "b/job")
	wantCode(t, "alice reading outside her prefix", err, codes.PermissionDenied, "")
	_, err = reader.Lock(ctx, "a/other")
	wantCode(t, "reader acquiring", err, codes.PermissionDenied, "no acquire right")

	// Listing shows each identity only what it may read.
	names := func(c *client.Client) []string {
		infos, err := c.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, i := range infos {
			out = append(out, i.Name)
		}
		return out
	}
	if got := names(alice); len(got) != 1 || got[0] != "a/job" {
		t.Errorf("alice lists %v, want only a/job", got)
	}
	if got := names(reader); len(got) != 2 {
		t.Errorf("reader lists %v, want both", got)
	}

	// Admin calls need the admin right.
	_, _, err = alice.ForceRelease(ctx, "a/job", "test")
	wantCode(t, "alice force-releasing", err, codes.PermissionDenied, "")
	if _, _, err := ops.ForceRelease(ctx, "a/job", "test"); err != nil {
		t.Fatalf("ops force-releasing: %v", err)
	}

	// A certificate the policy does not name may do nothing.
	_, err = pc.as("mallory").Lock(ctx, "a/job")
	wantCode(t, "an unnamed identity", err, codes.PermissionDenied, "")

	// Each refusal is in the audit file with the caller.
	b, err := os.ReadFile(pc.audit)
	if err != nil {
		t.Fatal(err)
	}
	var denied []audit.Denial
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var rec audit.Record
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Denied != nil {
			denied = append(denied, *rec.Denied)
		}
	}
	found := false
	for _, d := range denied {
		if d.Identity == "alice" && strings.HasSuffix(d.Method, "/Acquire") && d.Code == "PermissionDenied" && strings.HasPrefix(d.Caller, "127.0.0.1:") && strings.Contains(d.Reason, "b/job") {
			found = true
		}
	}
	if !found || len(denied) < 5 {
		t.Errorf("audit file denials %+v: want alice's Acquire of b/job among ≥5", denied)
	}
}

func TestPolicyTokensIdentifyClientsWithoutACertificate(t *testing.T) {
	pc := startWithPolicy(t, strings.Replace(testPolicy, "%s", policy.HashToken("cron-secret"), 1))
	ctx := t.Context()
	cron := pc.dial(pc.noCert(), client.WithToken("cron-secret"))
	l, err := cron.Lock(ctx, "jobs/nightly")
	if err != nil {
		t.Fatalf("a token client on its prefix: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = cron.Lock(ctx, "a/job")
	wantCode(t, "a token client outside its prefix", err, codes.PermissionDenied, `"cron"`)

	// Without a certificate, a wrong token or none gets nothing.
	for name, opts := range map[string][]client.Option{
		"wrong token": {pc.noCert(), client.WithToken("guess")},
		"no token":    {pc.noCert()},
	} {
		c := pc.dial(opts...)
		_, err := c.Lock(ctx, "jobs/nightly")
		wantCode(t, name, err, codes.Unauthenticated, "")
	}
}

func TestPolicyReload(t *testing.T) {
	pc := startWithPolicy(t, strings.Replace(testPolicy, "%s", policy.HashToken("cron-secret"), 1))
	ctx := t.Context()
	alice := pc.as("alice")
	_, err := alice.Lock(ctx, "b/job")
	wantCode(t, "before the reload", err, codes.PermissionDenied, "")

	grown := strings.Replace(strings.Replace(testPolicy, "%s", policy.HashToken("cron-secret"), 1), "prefixes: [a/]", "prefixes: [a/, b/]", 1)
	os.WriteFile(pc.policy, []byte("identities:\n  - name: x\n    rights: [fly]\n"), 0o600)
	if err := pc.srv.ReloadPolicy(); err == nil || !strings.Contains(err.Error(), `unknown right "fly"`) {
		t.Fatalf("a broken policy reloaded: %v", err)
	}
	if _, err := alice.Lock(ctx, "a/still"); err != nil {
		t.Fatalf("the failed reload changed the policy: %v", err)
	}
	os.WriteFile(pc.policy, []byte(grown), 0o600)
	if err := pc.srv.ReloadPolicy(); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Lock(ctx, "b/job"); err != nil {
		t.Fatalf("after the reload: %v", err)
	}
}

// A broken policy file stops the start, listing its problems.
func TestBadPolicyFileRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.yaml")
	os.WriteFile(path, []byte("identities:\n  - name: a\n    rights: [read]\n  - rights: [x]\n"), 0o600)
	cfg := locktest.Config(filepath.Join(dir, "data"))
	cfg.PolicyFile, cfg.Insecure = path, false
	if _, err := server.New(cfg); err == nil || !strings.Contains(err.Error(), "no prefixes") || !strings.Contains(err.Error(), "no name") {
		t.Fatalf("start with a broken policy: %v", err)
	}
}

// rawAs is a raw gRPC connection to pc: with identity's certificate, or
// (identity "") with no certificate at all.
func (pc *policyCluster) rawAs(identity string) api.FenceServiceClient {
	pc.t.Helper()
	var cfg *tls.Config
	var err error
	if identity != "" {
		cfg, err = pki.ClientTLS(pc.clientFiles(identity))
	} else {
		cfg, err = pki.ClientTLS(pc.certs.Client)
		if cfg != nil {
			cfg.Certificates = nil
		}
	}
	if err != nil {
		pc.t.Fatal(err)
	}
	conn, err := grpc.NewClient(pc.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		pc.t.Fatal(err)
	}
	pc.t.Cleanup(func() { conn.Close() })
	return api.NewFenceServiceClient(conn)
}

// A lease is used only by the identity that created it: another identity
// with the same rights, holding the lease's secret, can neither take,
// release, renew nor revoke with it.
func TestLeaseBelongsToItsCreator(t *testing.T) {
	doc := strings.Replace(strings.Replace(testPolicy, "%s", policy.HashToken("cron-secret"), 1),
		"  - name: reader", "  - name: bob\n    prefixes: [a/]\n    rights: [acquire, read]\n  - name: reader", 1)
	pc := startWithPolicy(t, doc)
	ctx := t.Context()
	alice, bob := pc.rawAs("alice"), pc.rawAs("bob")
	lease, err := alice.CreateLease(ctx, &api.CreateLeaseRequest{RequestId: rid(1), Ttl: durationpb.New(10 * time.Second), Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Acquire(ctx, &api.AcquireRequest{RequestId: rid(2), LeaseSecret: lease.LeaseSecret, Name: "a/shared", Seq: 1, Ack: 1}); err != nil {
		t.Fatalf("alice acquiring with her lease: %v", err)
	}
	for name, call := range map[string]func() error{
		"acquire": func() error {
			_, err := bob.Acquire(ctx, &api.AcquireRequest{RequestId: rid(3), LeaseSecret: lease.LeaseSecret, Name: "a/other", Seq: 2, Ack: 1})
			return err
		},
		"release": func() error {
			_, err := bob.Release(ctx, &api.ReleaseRequest{RequestId: rid(4), LeaseSecret: lease.LeaseSecret, Name: "a/shared", Seq: 2, Ack: 1})
			return err
		},
		"revoke": func() error {
			_, err := bob.Revoke(ctx, &api.RevokeRequest{RequestId: rid(5), LeaseSecret: lease.LeaseSecret})
			return err
		},
		"create with alice's request id": func() error {
			_, err := bob.CreateLease(ctx, &api.CreateLeaseRequest{RequestId: rid(1), Ttl: durationpb.New(10 * time.Second), Owner: "bob"})
			return err
		},
		"renew": func() error {
			ka, err := bob.KeepAlive(ctx)
			if err != nil {
				return err
			}
			if err := ka.Send(&api.KeepAliveRequest{LeaseSecret: lease.LeaseSecret, Seq: 1}); err != nil {
				return err
			}
			resp, err := ka.Recv()
			if err != nil {
				return err
			}
			if resp.GetOk() {
				return nil
			}
			return status.Error(codes.PermissionDenied, resp.GetError())
		},
	} {
		err := call()
		if err == nil || !strings.Contains(err.Error(), "another identity") {
			t.Errorf("bob's %s with alice's lease: %v, want a refusal naming another identity", name, err)
		}
	}
	st, err := alice.GetLock(ctx, &api.GetLockRequest{Name: "a/shared"})
	if err != nil || st.GetLock().GetHolderLeaseNumber() != lease.LeaseNumber {
		t.Fatalf("alice's lock after bob's attempts: %+v %v", st, err)
	}
}

func rid(n byte) []byte { return append(make([]byte, 15), n) }

// A reload that takes away an identity's right to a lock ends its queued
// Acquire of that lock with PermissionDenied, and the lock is not handed to
// it when the holder lets go; a queued Acquire the new policy still allows
// keeps waiting and gets the lock.
func TestPolicyReloadEndsQueuedAcquires(t *testing.T) {
	doc := strings.Replace(testPolicy, "%s", policy.HashToken("cron-secret"), 1)
	pc := startWithPolicy(t, doc)
	ctx := t.Context()
	ops, alice := pc.as("ops"), pc.as("alice")
	held, err := ops.Lock(ctx, "a/queued")
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := alice.Lock(ctx, "a/queued")
		waited <- err
	}()
	waitQueued(t, ops, "a/queued", 1)
	os.WriteFile(pc.policy, []byte(strings.Replace(doc, "prefixes: [a/]", "prefixes: [c/]", 1)), 0o600)
	if err := pc.srv.ReloadPolicy(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		wantCode(t, "alice's queued Acquire after the reload", err, codes.PermissionDenied, "")
	case <-time.After(10 * time.Second):
		t.Fatal("alice's queued Acquire still waits 10 s after the reload took a/ from her")
	}
	waitQueued(t, ops, "a/queued", 0)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := ops.Status(ctx, "a/queued"); err != nil || st.HolderLease != 0 {
		t.Fatalf("a/queued after the holder let go: %+v, %v (want free)", st, err)
	}

	// Another reload, which keeps ops's rights: its queued Acquire stays.
	held, err = alice.Lock(ctx, "c/queued")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := ops.Lock(ctx, "c/queued")
		waited <- err
	}()
	waitQueued(t, alice, "c/queued", 1)
	if err := pc.srv.ReloadPolicy(); err != nil {
		t.Fatal(err)
	}
	held.Release(ctx)
	if err := <-waited; err != nil {
		t.Fatalf("ops's queued Acquire across a reload that kept its rights: %v", err)
	}
}

// waitQueued waits until name has n waiters.
func waitQueued(t *testing.T, c *client.Client, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := c.Status(t.Context(), name)
		if err == nil && st.Waiters == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not %d waiters within 10 s (%+v, %v)", name, n, st, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

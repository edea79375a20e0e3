package server_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"database/sql"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/dbtest"
	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/pki"
	"github.com/fencehq/fence/internal/server"
)

const attackPolicy = `
identities:
  - name: tenant-a
    prefixes: [a/]
    rights: [acquire, read]
  - name: tenant-b
    prefixes: [b/]
    rights: [acquire, read]
  - name: ops
    prefixes: [""]
    rights: [acquire, read, admin]
`

// TestAttackSuite throws ≥ 10,000 hostile requests of every kind the
// security issue lists at a real 3-node cluster with mutual TLS and a
// policy, and requires 0 successes: each is refused (the right code where a
// call gets that far, a failed handshake or a closed connection where it
// does not), and the victim's lock is untouched afterwards.
func TestAttackSuite(t *testing.T) {
	certs := locktest.NewCerts(t)
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(attackPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	keyFile, verifier := newTokenKey(t)
	// The attacks go to the leader's address: elections of a second (not the
	// test default of 50 ms) keep it leading on a loaded machine, so every
	// refusal is the one under test, never NotLeader.
	c := locktest.NewCluster(t, 3, certs.Serve, func(cfg *server.Config) {
		cfg.PolicyFile, cfg.TokenKeyFile = policyFile, keyFile
		cfg.HeartbeatTimeout, cfg.ElectionTimeout = 100*time.Millisecond, time.Second
	})
	leader := c.Leader()
	addr, raftAddr := leader.Server.GRPCAddr(), leader.Server.RaftAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	issue := func(kind pki.Kind, ca *pki.CA, name string, validity time.Duration) pki.Files {
		f, err := ca.IssueFiles(t.TempDir(), certs.Client.CA, kind, name, []string{"127.0.0.1"}, validity)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	// tlsWith trusts the cluster's CA and presents f's certificate (none: zero Files).
	tlsWith := func(f pki.Files) *tls.Config {
		cfg, err := pki.ClientTLS(certs.Client)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = nil
		if f.Cert != "" {
			kp, err := tls.LoadX509KeyPair(f.Cert, f.Key)
			if err != nil {
				t.Fatal(err)
			}
			// Sent whatever CAs the server names, as an attacker would.
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &kp, nil }
		}
		return cfg
	}
	conn := func(creds credentials.TransportCredentials) api.FenceServiceClient {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return api.NewFenceServiceClient(cc)
	}

	// The victim: tenant-a holds a/victim.
	victim := conn(credentials.NewTLS(tlsWith(issue(pki.Client, certs.CA, "tenant-a", time.Hour))))
	lease, err := victim.CreateLease(ctx, &api.CreateLeaseRequest{RequestId: rid(1), Ttl: durationpb.New(time.Minute), Owner: "victim"})
	if err != nil {
		t.Fatal(err)
	}
	grant, err := victim.Acquire(ctx, &api.AcquireRequest{RequestId: rid(2), LeaseSecret: lease.LeaseSecret, Name: "a/victim", Seq: 1, Ack: 1})
	if err != nil {
		t.Fatal(err)
	}
	ka, err := victim.KeepAlive(ctx) // the victim keeps its lease alive throughout
	if err != nil {
		t.Fatal(err)
	}
	renewing := make(chan struct{})
	defer func() { cancel(); <-renewing }()
	go func() {
		defer close(renewing)
		for seq := uint64(1); ; seq++ {
			if ka.Send(&api.KeepAliveRequest{LeaseSecret: lease.LeaseSecret, Seq: seq}) != nil {
				return
			}
			if _, err := ka.Recv(); err != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Second):
			}
		}
	}()

	other, err := pki.NewCA("attacker CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tenantB := conn(credentials.NewTLS(tlsWith(issue(pki.Client, certs.CA, "tenant-b", time.Hour))))
	exEmployee := conn(credentials.NewTLS(tlsWith(issue(pki.Client, certs.CA, "ex-employee", time.Hour))))
	noCert := conn(credentials.NewTLS(tlsWith(pki.Files{})))
	expired := issue(pki.Client, certs.CA, "tenant-a", time.Millisecond)
	foreign := issue(pki.Client, other, "tenant-a", 30*time.Minute)
	time.Sleep(5 * time.Millisecond) // the millisecond certificate has expired

	counts := map[string]int{}
	took := map[string]time.Duration{}
	var successes []string
	var mu sync.Mutex
	// refused records one attempt: ok means the attack got through.
	refused := func(kind string, err error, want ...codes.Code) {
		mu.Lock()
		defer mu.Unlock()
		counts[kind]++
		if err == nil {
			successes = append(successes, kind+": succeeded")
			return
		}
		if len(want) > 0 && !containsCode(want, status.Code(err)) {
			successes = append(successes, fmt.Sprintf("%s: %v (want %v)", kind, err, want))
		}
	}
	call := func(fc api.FenceServiceClient, n int) func(i int) error {
		return func(i int) error {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			switch i % 6 {
			case 0:
				_, err := fc.GetLock(cctx, &api.GetLockRequest{Name: "a/victim"})
				return err
			case 1:
				_, err := fc.Release(cctx, &api.ReleaseRequest{RequestId: randID(), LeaseSecret: lease.LeaseSecret, Name: "a/victim", Seq: uint64(n + i), Ack: 1})
				return err
			case 2:
				_, err := fc.ForceRelease(cctx, &api.ForceReleaseRequest{RequestId: randID(), Name: "a/victim", Token: grant.Token, Reason: "attack"})
				return err
			case 3:
				_, err := fc.Put(cctx, &api.PutRequest{RequestId: randID(), Key: "a/victim", Value: []byte("x"), Token: 1 << 60})
				return err
			case 4:
				_, err := fc.Revoke(cctx, &api.RevokeRequest{RequestId: randID(), LeaseSecret: lease.LeaseSecret})
				return err
			default:
				_, err := fc.Acquire(cctx, &api.AcquireRequest{RequestId: randID(), LeaseSecret: lease.LeaseSecret, Name: "a/victim", Seq: uint64(n + i), Ack: 1})
				return err
			}
		}
	}
	// run makes n attempts of kind, 8 at a time.
	run := func(kind string, n int, attempt func(i int) error, want ...codes.Code) {
		start := time.Now()
		var wg sync.WaitGroup
		next := make(chan int)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					refused(kind, attempt(i), want...)
				}
			}()
		}
		for i := range n {
			next <- i
		}
		close(next)
		wg.Wait()
		took[kind] = time.Since(start)
	}

	// Calls that reach the server over a good connection but carry no
	// right: each must be refused with the code that says why.
	run("no client certificate, no token", 1500, call(noCert, 1000), codes.Unauthenticated)
	run("identity removed from the policy", 1500, call(exEmployee, 2000), codes.PermissionDenied)
	run("another tenant's prefix", 1500, call(tenantB, 3000), codes.PermissionDenied)
	// tenant-b on its own prefix, with tenant-a's stolen lease secret.
	run("another identity's lease id", 1500, func(i int) error {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if i%2 == 0 {
			_, err := tenantB.Acquire(cctx, &api.AcquireRequest{RequestId: randID(), LeaseSecret: lease.LeaseSecret, Name: fmt.Sprintf("b/%d", i), Seq: uint64(5000 + i), Ack: 1})
			return err
		}
		_, err := tenantB.Revoke(cctx, &api.RevokeRequest{RequestId: randID(), LeaseSecret: lease.LeaseSecret})
		return err
	}, codes.PermissionDenied)
	run("garbage bearer tokens", 1000, func(i int) error {
		tok := make([]byte, 24)
		rand.Read(tok)
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := noCert.GetLock(withBearer(cctx, fmt.Sprintf("%x", tok)), &api.GetLockRequest{Name: "a/victim"})
		return err
	}, codes.Unauthenticated)

	// Connections that must not get as far as a call: a new connection
	// (and handshake) per attempt.
	dialCall := func(creds credentials.TransportCredentials) func(int) error {
		return func(i int) error {
			cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
			if err != nil {
				return err
			}
			defer cc.Close()
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			_, err = api.NewFenceServiceClient(cc).GetLock(cctx, &api.GetLockRequest{Name: "a/victim"})
			return err
		}
	}
	run("a certificate of another CA", 500, dialCall(credentials.NewTLS(tlsWith(foreign))), codes.Unavailable)
	run("an expired certificate", 500, dialCall(credentials.NewTLS(tlsWith(expired))), codes.Unavailable)
	run("plaintext to the TLS port", 500, dialCall(insecure.NewCredentials()), codes.Unavailable)
	run("garbage and truncated TLS", 1000, func(i int) error {
		return rawBytes(i%2 == 0, addr, raftAddr, i)
	})
	asMember := tlsWith(issue(pki.Client, certs.CA, "n2", time.Hour)) // a client certificate named like a member
	asMember.ServerName = "127.0.0.1"
	run("a client certificate on the raft port", 500, func(i int) error {
		cfg := asMember
		tc, err := tls.Dial("tcp", raftAddr, cfg)
		if err != nil {
			return err
		}
		defer tc.Close()
		tc.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := tc.Write([]byte("FNCRAFT1M")); err != nil {
			return err
		}
		_, err = tc.Read(make([]byte, 1)) // TLS 1.3: the refusal comes with the first read
		return err
	})

	// The storage side: a row only holders of a/victim may write, checked
	// with the cluster's public key. The victim writes it first; tenant-b
	// holds a real grant of its own lock, b/own.
	totals, h := signedTable(t, verifier, "a/victim")
	write := func(signed string, amount int) error {
		return totals.UpdateSigned(ctx, fencing.SQL(h), signed, 1, map[string]any{"amount": amount})
	}
	if err := write(grant.SignedToken, 100); err != nil {
		t.Fatalf("the victim's own signed write: %v", err)
	}
	bLease, err := tenantB.CreateLease(ctx, &api.CreateLeaseRequest{RequestId: rid(3), Ttl: durationpb.New(time.Minute), Owner: "tenant-b"})
	if err != nil {
		t.Fatal(err)
	}
	own, err := tenantB.Acquire(ctx, &api.AcquireRequest{RequestId: rid(4), LeaseSecret: bLease.LeaseSecret, Name: "b/own", Seq: 1, Ack: 1})
	if err != nil || own.SignedToken == "" {
		t.Fatalf("tenant-b's own grant: %v (signed %q)", err, own.GetSignedToken())
	}
	_, attackerKey, _ := ed25519.GenerateKey(rand.Reader)
	forger := fencing.NewSigner(attackerKey)
	// signedRefused turns a storage refusal into the attempt's error, and
	// reports a refusal for another reason (the row must refuse the
	// signature, not fail by chance).
	signedRefused := func(kind string, err error) error {
		if err != nil && !errors.Is(err, fencing.ErrBadSignature) {
			t.Errorf("%s: refused, but not for its signature: %v", kind, err)
		}
		return err
	}
	run("forged signed tokens", 500, func(i int) error {
		tok, _ := forger.Sign(fencing.Grant{Name: "a/victim", Token: grant.Token + 1<<40 + uint64(i), Lease: lease.LeaseNumber, IssuedAt: time.Now()})
		return signedRefused("forged", write(tok, i))
	})
	run("altered signed tokens", 500, func(i int) error {
		return signedRefused("altered", write(alterSigned(t, own.SignedToken, i), i))
	})
	run("signed tokens replayed for another name", 500, func(i int) error {
		return signedRefused("replayed", write(own.SignedToken, i))
	})
	run("plain tokens where signed ones are required", 500, func(i int) error {
		return signedRefused("plain", totals.Update(ctx, h, grant.Token+uint64(i), 1, map[string]any{"amount": i}))
	})
	var amount, fence int64
	if err := h.QueryRow("SELECT amount, fence FROM totals WHERE id = 1").Scan(&amount, &fence); err != nil || amount != 100 || uint64(fence) != grant.Token {
		t.Fatalf("the victim's row after the attacks: amount %d, fence %d, %v (want 100, %d)", amount, fence, err, grant.Token)
	}

	total := 0
	kinds := make([]string, 0, len(counts))
	for k, n := range counts {
		total += n
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		t.Logf("%-40s %5d refused (%v)", k, counts[k], took[k].Round(time.Millisecond))
	}
	t.Logf("%d attacks, %d successes", total, len(successes))
	if total < 10_000 {
		t.Errorf("only %d attacks", total)
	}
	for _, s := range successes {
		t.Error(s)
	}
	if len(successes) > 20 {
		t.Fatalf("%d successes in all", len(successes))
	}

	// The victim's grant is untouched.
	st, err := victim.GetLock(ctx, &api.GetLockRequest{Name: "a/victim"})
	if err != nil || st.GetLock().GetHolderLeaseNumber() != lease.LeaseNumber || st.GetLock().GetToken() != grant.Token {
		t.Fatalf("the victim's lock after the attacks: %+v, %v", st, err)
	}
	if _, err := victim.Get(ctx, &api.GetRequest{Key: "a/victim"}); status.Code(err) != codes.NotFound {
		t.Fatalf("a fenced write landed: %v", err)
	}
}

// signedTable is a SQLite table totals(id, amount, fence) with row 1,
// which only signed tokens of lock may write.
func signedTable(t *testing.T, v *fencing.Verifier, lock string) (*fencing.Table, *sql.DB) {
	t.Helper()
	h := dbtest.Open(t, dbtest.SQLite(t))
	if _, err := h.Exec("CREATE TABLE totals (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL, fence BIGINT NOT NULL DEFAULT 0)"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Exec("INSERT INTO totals (id, amount) VALUES (1, 0)"); err != nil {
		t.Fatal(err)
	}
	tbl, err := fencing.NewTable(fencing.TableConfig{Dialect: fencing.SQLite, Name: "totals", Key: []string{"id"},
		Verifier: v, LockName: func([]string) string { return lock }})
	if err != nil {
		t.Fatal(err)
	}
	return tbl, h
}

// alterSigned changes a real signed token the ways an attacker would: its
// token raised, its name swapped for another lock's, or one random byte of
// it changed; the signature stays the original's.
func alterSigned(t *testing.T, signed string, i int) string {
	raw, err := base64.RawURLEncoding.DecodeString(signed)
	if err != nil {
		t.Fatal(err)
	}
	const header = 43 // version, key id, cluster, token, lease, issued-at, name length
	n := int(binary.BigEndian.Uint16(raw[41:43]))
	body, sig := raw[:header+n], raw[header+n:]
	switch i % 3 {
	case 0:
		binary.BigEndian.PutUint64(body[17:25], 1<<60+uint64(i))
	case 1:
		body = binary.BigEndian.AppendUint16(bytes.Clone(body[:41]), uint16(len("a/victim")))
		body = append(body, "a/victim"...)
	default:
		body = bytes.Clone(body)
		body[9+i%(len(body)-9)] ^= byte(1 + i%255)
	}
	return base64.RawURLEncoding.EncodeToString(append(append([]byte{}, body...), sig...))
}

func randID() []byte {
	b := make([]byte, 16)
	rand.Read(b)
	return b
}

func containsCode(cs []codes.Code, c codes.Code) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}

func withBearer(ctx context.Context, tok string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

// rawBytes sends garbage (or a truncated ClientHello) to the gRPC or the
// raft port and reports an error unless the port answered with anything a
// client could take as success (it must only close the connection).
func rawBytes(grpcPort bool, grpcAddr, raftAddr string, i int) error {
	target := raftAddr
	if grpcPort {
		target = grpcAddr
	}
	c, err := net.DialTimeout("tcp", target, 3*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	// A port that waits for the rest of a handshake holds the connection
	// until its handshake timeout (10 s); 100 ms of silence is a refusal too.
	c.SetDeadline(time.Now().Add(100 * time.Millisecond))
	var payload []byte
	switch i % 4 {
	case 0, 1: // random bytes
		payload = make([]byte, 1+i%700)
		rand.Read(payload)
	case 2: // a TLS record header claiming a ClientHello, cut short
		payload = []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03}
	default: // an HTTP/2 preface in plaintext
		payload = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	}
	if _, err := c.Write(payload); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		return err // closed (or reset): refused
	}
	if strings.HasPrefix(string(buf[:n]), "\x15\x03") { // a TLS alert: refused
		return fmt.Errorf("TLS alert")
	}
	return fmt.Errorf("the port answered %d bytes to garbage: %q", n, buf[:n]) // still not a success
}

package server_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/pki"
	"github.com/fencehq/fence/internal/server"
)

// newTokenKey writes a token key pair into a new dir and returns the
// private key's file and a verifier for the public key.
func newTokenKey(t *testing.T) (string, *fencing.Verifier) {
	t.Helper()
	dir := t.TempDir()
	if _, err := pki.CreateTokenKey(dir); err != nil {
		t.Fatal(err)
	}
	v, err := fencing.LoadVerifier(filepath.Join(dir, pki.TokenPubKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, pki.TokenKeyFile), v
}

// Every grant of a 3-node cluster with a token key — at once or after
// waiting in the queue — carries a signed token stating that grant; a key
// reloaded on every member signs the grants after it.
func TestSignedTokens(t *testing.T) {
	keyFile, v := newTokenKey(t)
	c := locktest.NewCluster(t, 3, func(cfg *server.Config) { cfg.TokenKeyFile = keyFile })
	cluster := c.ClusterID()
	cl, err := client.Dial(ctxT(t, 5*time.Second), c.Addrs(), client.WithInsecure(), client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	check := func(l *client.Lease, v *fencing.Verifier) fencing.Grant {
		t.Helper()
		g, err := v.Verify(l.SignedToken())
		if err != nil {
			t.Fatalf("the signed token of %s: %v", l.Name(), err)
		}
		if g.Name != l.Name() || g.Token != l.Token() || g.Lease != l.LeaseNumber() || g.Cluster != cluster ||
			time.Since(g.IssuedAt) > time.Minute || time.Until(g.IssuedAt) > time.Minute {
			t.Fatalf("signed %+v for the grant of %s with token %d, lease #%d, cluster %x", g, l.Name(), l.Token(), l.LeaseNumber(), cluster)
		}
		return g
	}
	first, err := cl.Lock(ctxT(t, 5*time.Second), "signed/a")
	if err != nil {
		t.Fatal(err)
	}
	check(first, v)

	other, err := client.Dial(ctxT(t, 5*time.Second), c.Addrs(), client.WithInsecure(), client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	waited := make(chan *client.Lease, 1)
	go func() {
		l, err := other.Lock(ctxT(t, 10*time.Second), "signed/a")
		if err != nil {
			t.Error(err)
		}
		waited <- l
	}()
	time.Sleep(100 * time.Millisecond) // let it queue (if it does not, it is granted later anyway)
	if err := first.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	second := <-waited
	if second == nil {
		t.FailNow()
	}
	check(second, v)
	second.Release(ctxT(t, 5*time.Second))

	// Rotation: the new key in place on every member, then reload.
	newFile, newV := newTokenKey(t)
	data, _ := os.ReadFile(newFile)
	if err := os.WriteFile(keyFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, nd := range c.Nodes {
		if err := nd.Server.ReloadTokenKey(); err != nil {
			t.Fatal(err)
		}
	}
	after, err := cl.Lock(ctxT(t, 5*time.Second), "signed/b")
	if err != nil {
		t.Fatal(err)
	}
	check(after, newV)
	if _, err := v.Verify(after.SignedToken()); !errors.Is(err, fencing.ErrBadSignature) {
		t.Fatalf("the old key's verifier took the new key's token: %v", err)
	}

	// A broken key file is refused at reload and changes nothing.
	os.WriteFile(keyFile, []byte("garbage"), 0o600)
	for _, nd := range c.Nodes {
		if err := nd.Server.ReloadTokenKey(); err == nil {
			t.Fatal("reloaded a garbage token key")
		}
	}
	after.Release(ctxT(t, 5*time.Second))
	again, err := cl.Lock(ctxT(t, 5*time.Second), "signed/b")
	if err != nil {
		t.Fatal(err)
	}
	check(again, newV)
}

// Without a token key, grants carry no signed token; a token key that
// cannot be used stops the server from starting, saying why.
func TestTokenKeyFile(t *testing.T) {
	srv := locktest.Start(t)
	cl, err := client.Dial(ctxT(t, 5*time.Second), []string{srv.GRPCAddr()}, client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	l, err := cl.Lock(ctxT(t, 5*time.Second), "unsigned")
	if err != nil {
		t.Fatal(err)
	}
	if l.SignedToken() != "" || srv.SignsTokens() || srv.ReloadTokenKey() == nil {
		t.Fatalf("a server without a token key signed %q", l.SignedToken())
	}

	keyFile, _ := newTokenKey(t)
	open := filepath.Join(t.TempDir(), "open.pem")
	data, _ := os.ReadFile(keyFile)
	os.WriteFile(open, data, 0o644)
	for name, c := range map[string]struct{ file, want string }{
		"missing":         {filepath.Join(t.TempDir(), "none.pem"), "no such file"},
		"open to others":  {open, "chmod 600"},
		"a public key":    {strings.Replace(keyFile, pki.TokenKeyFile, pki.TokenPubKeyFile, 1), "open to others"},
		"not a token key": {writeFile(t, "PRIVATE KEY garbage"), "no PEM PRIVATE KEY"},
	} {
		cfg := locktest.Config(t.TempDir())
		cfg.TokenKeyFile = c.file
		srv, err := server.New(cfg)
		if err == nil {
			srv.Close()
			t.Errorf("%s: the server started", name)
		} else if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f.pem")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

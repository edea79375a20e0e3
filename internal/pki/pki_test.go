package pki

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func mustCA(t *testing.T, dir string) *CA {
	t.Helper()
	ca, err := NewCA("test CA", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := SaveCA(dir, ca); err != nil {
		t.Fatal(err)
	}
	return ca
}

func parse(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	c, err := parseCert(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestIssuedCertificatesChainAndSayWhatTheyAreFor(t *testing.T) {
	dir := t.TempDir()
	ca := mustCA(t, dir)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)

	node, err := ca.Issue(Node, "n1", []string{"127.0.0.1", "node1.example", " "}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	nc := parse(t, node.CertPEM)
	if _, err := nc.Verify(x509.VerifyOptions{Roots: roots, DNSName: "node1.example", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("node certificate as a server's: %v", err)
	}
	if _, err := nc.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("node certificate as a member's client certificate: %v", err)
	}
	if len(nc.IPAddresses) != 1 || !nc.IPAddresses[0].Equal([]byte{127, 0, 0, 1}) || len(nc.DNSNames) != 1 || nc.Subject.CommonName != "n1" {
		t.Errorf("node certificate names %v %v %q", nc.IPAddresses, nc.DNSNames, nc.Subject.CommonName)
	}

	cl, err := ca.Issue(Client, "alice", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cc := parse(t, cl.CertPEM)
	if _, err := cc.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if _, err := cc.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("a client certificate verifies as a server's")
	}
	if cc.Subject.CommonName != "alice" {
		t.Errorf("client CN %q", cc.Subject.CommonName)
	}
}

func TestIssueRefusesWhatCannotWork(t *testing.T) {
	ca := mustCA(t, t.TempDir())
	for name, f := range map[string]func() error{
		"no name":             func() error { _, err := ca.Issue(Client, " ", nil, time.Hour); return err },
		"node without hosts":  func() error { _, err := ca.Issue(Node, "n1", nil, time.Hour); return err },
		"zero validity":       func() error { _, err := ca.Issue(Client, "a", nil, 0); return err },
		"outlives its CA":     func() error { _, err := ca.Issue(Client, "a", nil, 48*time.Hour); return err },
		"CA without validity": func() error { _, err := NewCA("x", -time.Second); return err },
	} {
		if f() == nil {
			t.Errorf("%s: issued", name)
		}
	}
}

func TestSavedFilesAreNotOverwritten(t *testing.T) {
	dir := t.TempDir()
	ca := mustCA(t, dir)
	before, _ := os.ReadFile(filepath.Join(dir, CACertFile))
	other, _ := NewCA("other", time.Hour)
	if err := SaveCA(dir, other); err == nil || !strings.Contains(err.Error(), "not overwriting") {
		t.Fatalf("second SaveCA: %v", err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, CACertFile))
	if !bytes.Equal(before, after) {
		t.Fatal("the CA file changed")
	}
	loaded, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !loaded.Cert.Equal(ca.Cert) {
		t.Fatal("LoadCA gave another CA")
	}
	if info, _ := os.Stat(filepath.Join(dir, CAKeyFile)); info.Mode().Perm() != 0o600 {
		t.Errorf("CA key mode %v", info.Mode().Perm())
	}
}

func TestEnsureDevCreatesOnceAndKeepsTheCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	nf, err := EnsureDev(dir, "node1", DevHosts)
	if err != nil {
		t.Fatal(err)
	}
	ca1, _ := os.ReadFile(nf.CA)
	node1, _ := os.ReadFile(nf.Cert)
	if _, err := NewReloader(nf); err != nil {
		t.Fatalf("node files: %v", err)
	}
	if _, err := ClientTLS(ClientFiles(dir)); err != nil {
		t.Fatalf("client files: %v", err)
	}
	// A second start changes nothing; a lost node certificate is re-made
	// under the same CA.
	if _, err := EnsureDev(dir, "node1", DevHosts); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(nf.Cert); !bytes.Equal(b, node1) {
		t.Fatal("second EnsureDev replaced the node certificate")
	}
	os.Remove(nf.Cert)
	os.Remove(nf.Key)
	if _, err := EnsureDev(dir, "node1", DevHosts); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(nf.CA); !bytes.Equal(b, ca1) {
		t.Fatal("the CA changed")
	}
	if _, err := NewReloader(nf); err != nil {
		t.Fatalf("re-made node files: %v", err)
	}
}

func TestReloaderKeepsTheOldFilesWhenTheNewOnesAreBad(t *testing.T) {
	dir := t.TempDir()
	ca := mustCA(t, dir)
	is, _ := ca.Issue(Node, "n1", []string{"127.0.0.1"}, time.Hour)
	if err := SaveIssued(dir, "node", is); err != nil {
		t.Fatal(err)
	}
	r, err := NewReloader(NodeFiles(dir))
	if err != nil {
		t.Fatal(err)
	}
	serial := r.Leaf().SerialNumber

	// A certificate of another CA, and a key that is not the certificate's.
	other, _ := NewCA("other", 24*time.Hour)
	foreign, _ := other.Issue(Node, "n1", []string{"127.0.0.1"}, time.Hour)
	os.WriteFile(NodeFiles(dir).Cert, foreign.CertPEM, 0o644)
	os.WriteFile(NodeFiles(dir).Key, foreign.KeyPEM, 0o600)
	if err := r.Reload(); err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Fatalf("reload with another CA's certificate: %v", err)
	}
	fresh, _ := ca.Issue(Node, "n1", []string{"127.0.0.1"}, time.Hour)
	os.WriteFile(NodeFiles(dir).Cert, fresh.CertPEM, 0o644)
	if err := r.Reload(); err == nil {
		t.Fatal("reload with a key of another certificate succeeded")
	}
	if r.Leaf().SerialNumber.Cmp(serial) != 0 {
		t.Fatal("a failed reload changed the certificate")
	}
	os.WriteFile(NodeFiles(dir).Key, fresh.KeyPEM, 0o600)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if r.Leaf().SerialNumber.Cmp(parse(t, fresh.CertPEM).SerialNumber) != 0 {
		t.Fatal("reload did not take the new certificate")
	}
	cfg, err := r.ServerConfig(tls.RequireAndVerifyClientCert).GetConfigForClient(nil)
	if err != nil || len(cfg.Certificates) != 1 || !bytes.Equal(cfg.Certificates[0].Leaf.Raw, r.Leaf().Raw) {
		t.Fatal("the server config does not serve the reloaded certificate")
	}
}

func TestFilesCheckNamesEveryMissingFile(t *testing.T) {
	err := Files{Cert: "x"}.Check()
	if err == nil || !strings.Contains(err.Error(), "CA, key") {
		t.Fatalf("Check: %v", err)
	}
	if (Files{}).Set() || !(Files{Key: "k"}).Set() {
		t.Fatal("Set")
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7300": true, "127.9.9.9:1": true, "[::1]:7300": true, "localhost:7300": true,
		":7300": false, "0.0.0.0:7300": false, "10.0.0.1:7300": false, "[::]:7300": false, "example.com:7300": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v", addr, got)
		}
	}
}

// TestKeyFileModes: a key private to its owner loads, and so does one root
// owns that its group may only read (a Kubernetes secret volume under a
// pod's fsGroup is root's, mode 0440); a key its group may write, others
// may read, or that is group-readable but not root's, is refused.
func TestKeyFileModes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the cases give the key to another owner")
	}
	files, err := EnsureDev(t.TempDir(), "n1", DevHosts)
	if err != nil {
		t.Fatal(err)
	}
	const nonroot = 65532
	for _, c := range []struct {
		name  string
		owner int
		mode  os.FileMode
		loads bool
	}{
		{"the owner's only", nonroot, 0o600, true},
		{"the owner's, read-only", nonroot, 0o400, true},
		{"root's, its group reads", 0, 0o440, true},
		{"root's, 0640", 0, 0o640, true},
		{"root's, its group writes", 0, 0o660, false},
		{"root's, others read", 0, 0o644, false},
		{"not root's, its group reads", nonroot, 0o640, false},
	} {
		if err := os.Chown(files.Key, c.owner, -1); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(files.Key, c.mode); err != nil {
			t.Fatal(err)
		}
		_, err := NewReloader(files)
		if c.loads && err != nil {
			t.Errorf("%s (%04o): %v", c.name, c.mode, err)
		}
		if !c.loads && (err == nil || !strings.Contains(err.Error(), "open to others")) {
			t.Errorf("%s (%04o): %v, want refused as open to others", c.name, c.mode, err)
		}
	}
}

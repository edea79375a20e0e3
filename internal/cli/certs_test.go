package cli

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/pki"
)

// certsRun runs `fence certs args...` in-process, like fence() in cli_test.go
// (no server needed).
func certsRun(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	if c, _, err := NewRoot().Find([]string{"certs"}); err != nil || c.Name() != "certs" {
		t.Fatal("fence has no certs command: add newCerts() to NewRoot's AddCommand in root.go")
	}
	var out, errb bytes.Buffer
	code = Run(context.Background(), append([]string{"certs"}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// certsTree maps every file under dir (relative path) to its contents.
func certsTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		m[rel] = string(b)
		return err
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return m
}

func certsLoad(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCertsCreateCANodeClient(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	out := filepath.Join(t.TempDir(), "issued")

	code, stdout, stderr := certsRun(t, "create-ca", "--dir", dir, "--name", "test CA")
	if code != 0 {
		t.Fatalf("create-ca: %d %s", code, stderr)
	}
	for _, f := range []string{"ca.crt", "ca.key"} {
		if !strings.Contains(stdout, filepath.Join(dir, f)) {
			t.Errorf("create-ca output does not name %s:\n%s", f, stdout)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "ca.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("ca.key: %v %v", fi, err)
	}

	code, stdout, stderr = certsRun(t, "create-node", "n1", "--host", "n1.example.com,10.0.0.1", "--host", "localhost", "--dir", dir, "--out", out)
	if code != 0 {
		t.Fatalf("create-node: %d %s", code, stderr)
	}
	wantHint := fmt.Sprintf("fence serve --tls-ca %s --tls-cert %s --tls-key %s",
		filepath.Join(dir, "ca.crt"), filepath.Join(out, "n1.crt"), filepath.Join(out, "n1.key"))
	if !strings.Contains(stdout, wantHint) {
		t.Errorf("create-node output lacks %q:\n%s", wantHint, stdout)
	}

	code, stdout, stderr = certsRun(t, "create-client", "alice", "--dir", dir, "--days", "30")
	if code != 0 {
		t.Fatalf("create-client: %d %s", code, stderr)
	}
	wantHint = fmt.Sprintf("fence --ca %s --cert %s --key %s ls",
		filepath.Join(dir, "ca.crt"), filepath.Join(dir, "alice.crt"), filepath.Join(dir, "alice.key"))
	if !strings.Contains(stdout, wantHint) || !strings.Contains(stdout, "FENCE_CA") {
		t.Errorf("create-client output lacks %q:\n%s", wantHint, stdout)
	}

	ca := certsLoad(t, filepath.Join(dir, "ca.crt"))
	if !ca.IsCA || ca.Subject.CommonName != "test CA" {
		t.Fatalf("CA: IsCA %v CN %q", ca.IsCA, ca.Subject.CommonName)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	node := certsLoad(t, filepath.Join(out, "n1.crt"))
	if node.Subject.CommonName != "n1" || node.IsCA {
		t.Errorf("node: CN %q IsCA %v", node.Subject.CommonName, node.IsCA)
	}
	if !slices.Equal(node.DNSNames, []string{"n1.example.com", "localhost"}) ||
		len(node.IPAddresses) != 1 || !node.IPAddresses[0].Equal(net.ParseIP("10.0.0.1")) {
		t.Errorf("node SANs: %v %v", node.DNSNames, node.IPAddresses)
	}
	if !slices.Contains(node.ExtKeyUsage, x509.ExtKeyUsageServerAuth) || !slices.Contains(node.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		t.Errorf("node ExtKeyUsage: %v", node.ExtKeyUsage)
	}
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		for _, host := range []string{"n1.example.com", "10.0.0.1", "localhost"} {
			if _, err := node.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
				t.Errorf("node for %s, usage %v: %v", host, u, err)
			}
		}
	}
	if _, err := node.Verify(x509.VerifyOptions{Roots: roots, DNSName: "other.example.com"}); err == nil {
		t.Error("node verified for a host it was not issued for")
	}
	if fi, err := os.Stat(filepath.Join(out, "n1.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("n1.key: %v %v", fi, err)
	}

	client := certsLoad(t, filepath.Join(dir, "alice.crt"))
	if client.Subject.CommonName != "alice" || client.IsCA || len(client.DNSNames)+len(client.IPAddresses) != 0 {
		t.Errorf("client: CN %q IsCA %v SANs %v %v", client.Subject.CommonName, client.IsCA, client.DNSNames, client.IPAddresses)
	}
	if !slices.Equal(client.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("client ExtKeyUsage: %v, want only ClientAuth", client.ExtKeyUsage)
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client does not chain to the CA: %v", err)
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("client certificate verified for server auth")
	}
	if d := client.NotAfter.Sub(client.NotBefore).Hours() / 24; d < 29.9 || d > 30.1 {
		t.Errorf("client valid for %.2f days, want 30", d)
	}

	// The same name again is refused, and the files stay as they were.
	before := certsTree(t, dir)
	if code, _, stderr := certsRun(t, "create-client", "alice", "--dir", dir); code != ExitError || !strings.Contains(stderr, "not overwriting") {
		t.Errorf("second create-client alice: %d %s", code, stderr)
	}
	if after := certsTree(t, dir); !maps.Equal(before, after) {
		t.Error("a refused create-client changed files")
	}
}

func TestCertsCreateCARefusesOverwrite(t *testing.T) {
	dir := t.TempDir()
	if code, _, stderr := certsRun(t, "create-ca", "--dir", dir); code != 0 {
		t.Fatalf("create-ca: %d %s", code, stderr)
	}
	before := certsTree(t, dir)
	code, stdout, stderr := certsRun(t, "create-ca", "--dir", dir)
	if code != ExitError || !strings.Contains(stderr, "not overwriting") || !strings.Contains(stderr, "ca.") || stdout != "" {
		t.Fatalf("second create-ca: code %d stdout %q stderr %q", code, stdout, stderr)
	}
	if after := certsTree(t, dir); !maps.Equal(before, after) {
		t.Fatal("second create-ca changed the CA files")
	}

	// Only ca.crt left (ca.key lost): still refused, and no new key appears
	// next to the old certificate.
	if err := os.Remove(filepath.Join(dir, "ca.key")); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := certsRun(t, "create-ca", "--dir", dir); code != ExitError || !strings.Contains(stderr, "ca.crt exists") {
		t.Fatalf("create-ca over a lone ca.crt: %d %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "ca.key")); !os.IsNotExist(err) {
		t.Fatalf("create-ca wrote ca.key next to an existing ca.crt: %v", err)
	}
}

func TestCertsBadInput(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if code, _, stderr := certsRun(t, "create-ca", "--dir", dir, "--days", "365"); code != 0 {
		t.Fatalf("create-ca: %d %s", code, stderr)
	}
	out := filepath.Join(t.TempDir(), "out") // must never be created
	noCA := filepath.Join(t.TempDir(), "nothing-here")
	for _, tt := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"create-node", "n1", "--dir", dir, "--out", out}, ExitUsage, "needs --host"},
		{[]string{"create-node", "n1", "--host", "", "--dir", dir, "--out", out}, ExitUsage, "needs --host"},
		{[]string{"create-node", "n1", "--host", " , ", "--dir", dir, "--out", out}, ExitUsage, "needs --host"},
		{[]string{"create-node", "n1", "--host", "10.0.0.1:7300", "--dir", dir, "--out", out}, ExitUsage, "without a scheme or port"},
		{[]string{"create-node", "a/b", "--host", "x", "--dir", dir, "--out", out}, ExitUsage, "no '/'"},
		{[]string{"create-client", "", "--dir", dir, "--out", out}, ExitUsage, "NAME is empty"},
		{[]string{"create-client", "  ", "--dir", dir, "--out", out}, ExitUsage, "NAME is empty"},
		{[]string{"create-client", "../evil", "--dir", dir, "--out", out}, ExitUsage, "no '/'"},
		{[]string{"create-client", "..", "--dir", dir, "--out", out}, ExitUsage, "no '/'"},
		{[]string{"create-client", `a\b`, "--dir", dir, "--out", out}, ExitUsage, "no '/'"},
		{[]string{"create-client", ".", "--dir", dir, "--out", out}, ExitUsage, "no '/'"},
		{[]string{"create-client", " alice", "--dir", dir, "--out", out}, ExitUsage, "leading or trailing"},
		{[]string{"create-client", "a\nb", "--dir", dir, "--out", out}, ExitUsage, "control characters"},
		{[]string{"create-client", "alice", "--days", "0", "--dir", dir, "--out", out}, ExitUsage, "positive number of days"},
		{[]string{"create-client", "alice", "--days", "-3", "--dir", dir, "--out", out}, ExitUsage, "positive number of days"},
		{[]string{"create-client", "alice", "--days", "ten", "--dir", dir, "--out", out}, ExitUsage, "invalid argument"},
		{[]string{"create-client", "alice", "--days", "400", "--dir", dir, "--out", out}, ExitUsage, "outlive the CA"},
		{[]string{"create-client", "--dir", dir, "--out", out}, ExitUsage, "accepts 1 arg"},
		{[]string{"create-client", "a", "b", "--dir", dir, "--out", out}, ExitUsage, "accepts 1 arg"},
		{[]string{"create-client", "alice", "--dir", noCA, "--out", out}, ExitError, "no CA in"},
		{[]string{"create-node", "n1", "--host", "x", "--dir", noCA, "--out", out}, ExitError, "create-ca"},
		{[]string{"create-ca", "--dir", noCA, "--days", "0"}, ExitUsage, "positive number of days"},
		{[]string{"create-ca", "--dir", noCA, "--name", ""}, ExitUsage, "needs a name"},
		{[]string{"create-ca", "extra", "--dir", noCA}, ExitUsage, "unknown command"},
		{[]string{"show"}, ExitUsage, "requires at least 1 arg"},
	} {
		before := certsTree(t, dir)
		code, stdout, stderr := certsRun(t, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.msg) {
			t.Errorf("fence certs %q: code %d, stderr %q; want %d and %q", tt.args, code, stderr, tt.code, tt.msg)
		}
		if stdout != "" {
			t.Errorf("fence certs %q printed %q", tt.args, stdout)
		}
		if after := certsTree(t, dir); !maps.Equal(before, after) {
			t.Errorf("fence certs %q changed %s", tt.args, dir)
		}
		for _, p := range []string{out, noCA} {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Fatalf("fence certs %q created %s", tt.args, p)
			}
		}
	}
}

func TestCertsShow(t *testing.T) {
	dir := t.TempDir()
	certsRun(t, "create-ca", "--dir", dir, "--name", "show CA")
	if code, _, stderr := certsRun(t, "create-node", "n7", "--host", "n7.internal,192.0.2.7", "--dir", dir); code != 0 {
		t.Fatalf("create-node: %d %s", code, stderr)
	}
	node := certsLoad(t, filepath.Join(dir, "n7.crt"))
	code, stdout, stderr := certsRun(t, "show", filepath.Join(dir, "n7.crt"), filepath.Join(dir, "ca.crt"))
	if code != 0 {
		t.Fatalf("show: %d %s", code, stderr)
	}
	node1, ca := stdout, ""
	if i := strings.Index(stdout, filepath.Join(dir, "ca.crt")); i > 0 {
		node1, ca = stdout[:i], stdout[i:]
	}
	for _, want := range []string{
		"subject CN:  n7",
		"issuer CN:   show CA",
		fmt.Sprintf("serial:      %X", node.SerialNumber),
		"not after:   " + node.NotAfter.UTC().Format("2006-01-02T15:04:05Z"),
		"DNS names:   n7.internal",
		"IPs:         192.0.2.7",
		"usages:      server, client",
		"CA:          no",
	} {
		if !strings.Contains(node1, want) {
			t.Errorf("show n7.crt lacks %q:\n%s", want, node1)
		}
	}
	for _, want := range []string{"subject CN:  show CA", "CA:          yes", "cert sign"} {
		if !strings.Contains(ca, want) {
			t.Errorf("show ca.crt lacks %q:\n%s", want, ca)
		}
	}

	if code, _, stderr := certsRun(t, "show", filepath.Join(dir, "n7.key")); code != ExitError || !strings.Contains(stderr, "private key, not a certificate") {
		t.Errorf("show n7.key: %d %s", code, stderr)
	}
	if code, _, stderr := certsRun(t, "show", filepath.Join(dir, "missing.crt")); code != ExitError || !strings.Contains(stderr, "no such file") {
		t.Errorf("show missing.crt: %d %s", code, stderr)
	}
}

// create-token-key writes a key pair the server and fencing.LoadVerifier
// read, with the private key 0600; it never overwrites one.
func TestCertsCreateTokenKey(t *testing.T) {
	dir := t.TempDir()
	code, stdout, stderr := certsRun(t, "create-token-key", "--dir", dir)
	if code != 0 {
		t.Fatalf("create-token-key: %d %s", code, stderr)
	}
	key, err := pki.LoadTokenKey(filepath.Join(dir, pki.TokenKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	v, err := fencing.LoadVerifier(filepath.Join(dir, pki.TokenPubKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	signer := fencing.NewSigner(key)
	if !strings.Contains(stdout, signer.KeyID().String()) {
		t.Errorf("the output does not name key id %s:\n%s", signer.KeyID(), stdout)
	}
	signed, _ := signer.Sign(fencing.Grant{Name: "a", Token: 1})
	if _, err := v.VerifyFor(signed, "a", "a"); err != nil {
		t.Fatalf("the public key does not verify the private key's token: %v", err)
	}
	if code, out, stderr := certsRun(t, "show", filepath.Join(dir, pki.TokenPubKeyFile)); code != 0 || !strings.Contains(out, "key id "+signer.KeyID().String()) {
		t.Errorf("certs show of the public key: %d %q %q", code, out, stderr)
	}
	if info, _ := os.Stat(filepath.Join(dir, pki.TokenKeyFile)); info.Mode().Perm() != 0o600 {
		t.Errorf("token-key.pem has mode %04o", info.Mode().Perm())
	}
	before := certsTree(t, dir)
	if code, _, stderr := certsRun(t, "create-token-key", "--dir", dir); code != ExitError || !strings.Contains(stderr, "not overwriting") {
		t.Fatalf("second create-token-key: %d %s", code, stderr)
	}
	if after := certsTree(t, dir); !maps.Equal(before, after) {
		t.Fatal("second create-token-key changed the key files")
	}
	os.Chmod(filepath.Join(dir, pki.TokenKeyFile), 0o644)
	if _, err := pki.LoadTokenKey(filepath.Join(dir, pki.TokenKeyFile)); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a token key open to others loaded: %v", err)
	}
	if _, err := pki.LoadTokenKey(filepath.Join(dir, pki.TokenPubKeyFile)); err == nil {
		t.Error("the public key file loaded as a token key")
	}
}

// fence version and fence --version print the same line.
func TestVersion(t *testing.T) {
	run := func(args ...string) string {
		var out, errb bytes.Buffer
		if code := Run(context.Background(), args, strings.NewReader(""), &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	a, b := run("version"), run("--version")
	if a != b || !strings.HasPrefix(a, "fence ") || !strings.Contains(a, runtime.Version()) {
		t.Fatalf("fence version %q, fence --version %q", a, b)
	}
}

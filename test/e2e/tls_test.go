package e2e

import (
	"crypto/tls"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/pki"
)

// devServer is `fence serve` as the README's quick start runs it: no flags
// but free ports, data in ./fence-data of its working directory.
type devServer struct {
	t                   *testing.T
	dir                 string // the working directory
	grpc, metrics, raft string
	cmd                 *exec.Cmd
	log                 locktest.LogBuffer
}

func startDevServer(t *testing.T, args ...string) *devServer {
	s := &devServer{t: t, dir: t.TempDir(), grpc: freePort(t), metrics: freePort(t), raft: freePort(t)}
	s.cmd = exec.Command(fenceBinary(t), append([]string{"serve", "--grpc-addr", s.grpc, "--metrics-addr", s.metrics, "--raft-addr", s.raft}, args...)...)
	s.cmd.Dir, s.cmd.Stdout, s.cmd.Stderr = s.dir, &s.log, &s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.cmd.Process.Kill(); s.cmd.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for !s.ready() {
		if time.Now().After(deadline) {
			t.Fatalf("dev server not ready over HTTPS after 20s; log:\n%s", s.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}

func (s *devServer) certs() pki.Files {
	return pki.ClientFiles(filepath.Join(s.dir, "fence-data", "tls"))
}

// ready: /readyz answers 200 over HTTPS, checked against the dev CA.
func (s *devServer) ready() bool {
	cfg, err := pki.ClientTLS(s.certs())
	if err != nil {
		return false // not created yet
	}
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	resp, err := c.Get("https://" + s.metrics + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

// fence runs the CLI in dir with env added and returns its exit code and output.
func (s *devServer) fence(dir string, env []string, args ...string) (int, string) {
	cmd := exec.Command(fenceBinary(s.t), append([]string{"--server", s.grpc, "--connect-timeout", "2s"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(withoutTLSEnv(), env...)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		s.t.Fatal(err)
	}
	return 0, string(out)
}

func withoutTLSEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FENCE_CA=") && !strings.HasPrefix(kv, "FENCE_CERT=") && !strings.HasPrefix(kv, "FENCE_KEY=") {
			env = append(env, kv)
		}
	}
	return env
}

func (s *devServer) servedSerial() *big.Int {
	cfg, err := pki.ClientTLS(s.certs())
	if err != nil {
		s.t.Fatal(err)
	}
	cfg.ServerName = "127.0.0.1"
	c, err := tls.Dial("tcp", s.grpc, cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

// The README's quick start: `fence serve` with no flags serves TLS with
// certificates it makes, and the next commands, run in the same directory,
// work without a flag.
func TestQuickStartIsTLSWithNoExtraStep(t *testing.T) {
	s := startDevServer(t)
	if code, out := s.fence(s.dir, nil, "run", "quick/start", "--", "echo", "ran under the lock"); code != 0 || !strings.Contains(out, "ran under the lock") {
		t.Fatalf("fence run next to the dev server: exit %d\n%s", code, out)
	}
	if code, out := s.fence(s.dir, nil, "ls"); code != 0 {
		t.Fatalf("fence ls: exit %d\n%s", code, out)
	}

	elsewhere := t.TempDir()
	if code, out := s.fence(elsewhere, nil, "ls"); code == 0 || !strings.Contains(out, "no TLS certificates") {
		t.Errorf("fence ls away from the data dir, no certificates: exit %d\n%s", code, out)
	}
	f := s.certs()
	env := []string{"FENCE_CA=" + f.CA, "FENCE_CERT=" + f.Cert, "FENCE_KEY=" + f.Key}
	if code, out := s.fence(elsewhere, env, "ls"); code != 0 {
		t.Errorf("fence ls with FENCE_CA/CERT/KEY: exit %d\n%s", code, out)
	}
	if code, out := s.fence(elsewhere, nil, "--ca", f.CA, "--cert", f.Cert, "--key", f.Key, "ls"); code != 0 {
		t.Errorf("fence ls with --ca/--cert/--key: exit %d\n%s", code, out)
	}
	if code, out := s.fence(s.dir, nil, "--insecure", "ls"); code == 0 {
		t.Errorf("a plaintext client reached the TLS server: %s", out)
	}
}

// SIGHUP re-reads the certificate files: new connections get the new one,
// the process keeps running; a broken file is logged and changes nothing.
func TestSIGHUPRotatesTheCertificate(t *testing.T) {
	s := startDevServer(t)
	before := s.servedSerial()
	dir := filepath.Join(s.dir, "fence-data", "tls")

	os.WriteFile(filepath.Join(dir, pki.NodeCertFile), []byte("garbage"), 0o644)
	s.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 10*time.Second, "the failed reload is logged", func() bool { return strings.Contains(s.log.String(), "not reloaded") })
	if got := s.servedSerial(); got.Cmp(before) != 0 {
		t.Fatal("a failed reload changed the served certificate")
	}

	ca, err := pki.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	is, err := ca.Issue(pki.Node, "node1", pki.DevHosts, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, pki.NodeCertFile), is.CertPEM, 0o644)
	os.WriteFile(filepath.Join(dir, pki.NodeKeyFile), is.KeyPEM, 0o600)
	s.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 10*time.Second, "the new certificate is served", func() bool { return s.servedSerial().Cmp(before) != 0 })
	if code, out := s.fence(s.dir, nil, "ls"); code != 0 {
		t.Fatalf("fence ls after rotation: exit %d\n%s", code, out)
	}
}

// Listening beyond loopback without certificates is refused, saying what to do.
func TestServeRefusesPlaintextBeyondLoopback(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(fenceBinary(t), "serve", "--data-dir", filepath.Join(dir, "d"), "--grpc-addr", "0.0.0.0:0")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("served plaintext on 0.0.0.0:\n%s", out)
	}
	if !strings.Contains(string(out), "not a loopback address") || !strings.Contains(string(out), "--insecure") {
		t.Errorf("the refusal does not say what to do:\n%s", out)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

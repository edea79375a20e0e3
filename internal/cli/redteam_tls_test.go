package cli

// Red-team tests of the CLI's TLS setup. Each FAILS on the code it was
// written against, because of the hole its comment describes.

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/fencehq/fence/internal/pki"
	"github.com/fencehq/fence/internal/server"
)

// FINDING: the CLI's discovery of ./fence-data/tls (meant for "fence serve
// with no flags, fence commands in the same directory") also applies when
// --server names a remote host. Run from a directory someone else
// controls (a cloned repo, a shared checkout, /tmp) with no --ca/FENCE_CA,
// `fence --server fence.prod:7300 lock ...` trusts whatever CA sits in
// that directory's fence-data/tls/ca.crt and presents its client
// certificate: a network attacker holding that CA's key then stands in
// for the cluster and sees the lease secrets. The dev certificates are
// only ever valid for loopback (DevHosts), so nothing is lost by refusing.
// Fix: in globals.tlsConfig use the ./fence-data/tls fallback only if every
// --server address is loopback (pki.IsLoopback), else give the "no TLS
// certificates" error.
func TestRedteamTLSCLIUsesCwdDevCertsForARemoteServer(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if _, err := pki.EnsureDev(server.DevTLSDir(devDataDir), "planted", pki.DevHosts); err != nil {
		t.Fatal(err)
	}
	g := &globals{servers: "fence.prod.example.com:7300"}
	if cfg, err := g.tlsConfig(); err == nil && cfg != nil {
		t.Fatalf("for the remote server %s the CLI trusts the CA found in %s/%s", g.servers, dir, server.DevTLSDir(devDataDir))
	}
}

// FINDING (misleading error): with FENCE_CA (or FENCE_CERT/FENCE_KEY) set
// in the environment, `fence --insecure ls` fails with "--insecure connects
// in plaintext: give it or --ca/--cert/--key, not both", although no --ca
// was given: the flags' defaults came from the environment, and the
// message does not say so, so the user looks for a flag that is not there.
// Fix: name the source ("$FENCE_CA is set: unset it or drop --insecure"),
// e.g. by checking pf.Changed("ca") vs os.Getenv.
func TestRedteamTLSCLIInsecureErrorBlamesAFlagNotGiven(t *testing.T) {
	t.Setenv("FENCE_CA", "/etc/fence/ca.crt")
	t.Setenv("FENCE_CERT", "")
	t.Setenv("FENCE_KEY", "")
	var out, errb bytes.Buffer
	code := Run(context.Background(), []string{"--insecure", "--server", "127.0.0.1:1", "--connect-timeout", "100ms", "ls"}, strings.NewReader(""), &out, &errb)
	msg := errb.String()
	if code == 0 {
		t.Skipf("no error: %s", out.String())
	}
	if !strings.Contains(msg, "FENCE_CA") {
		t.Fatalf("the error blames flags the user did not give and does not name $FENCE_CA: %q", msg)
	}
}

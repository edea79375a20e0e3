package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/pki"
)

// The e2e servers serve TLS like a real cluster: one CA for the test run,
// a node certificate per node (named by its --node-id, for its host), and
// one client certificate that the tests and the CLI use.
var (
	caOnce sync.Once
	caDir  string
	testCA *pki.CA
	caErr  error
)

func theCA(t testing.TB) *pki.CA {
	t.Helper()
	caOnce.Do(func() {
		if caDir, caErr = os.MkdirTemp("", "fence-e2e-ca"); caErr != nil {
			return
		}
		if testCA, caErr = pki.NewCA("e2e CA", 24*time.Hour); caErr != nil {
			return
		}
		if caErr = pki.SaveCA(caDir, testCA); caErr != nil {
			return
		}
		_, caErr = testCA.IssueFiles(caDir, filepath.Join(caDir, pki.CACertFile), pki.Client, "client", nil, 12*time.Hour)
	})
	if caErr != nil {
		t.Fatal(caErr)
	}
	return testCA
}

// clientCerts are the test client's certificate files.
func clientCerts(t testing.TB) pki.Files {
	theCA(t)
	return pki.ClientFiles(caDir)
}

// cliTLS are the CLI flags that use them.
func cliTLS(t testing.TB) []string {
	f := clientCerts(t)
	return []string{"--ca", f.CA, "--cert", f.Cert, "--key", f.Key}
}

// clientTLS is the test client's TLS config.
func clientTLS(t testing.TB) *tls.Config {
	t.Helper()
	cfg, err := pki.ClientTLS(clientCerts(t))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// clientCreds are the gRPC credentials of the test client.
func clientCreds(t testing.TB) credentials.TransportCredentials {
	return credentials.NewTLS(clientTLS(t))
}

// nodeCerts issues, in dir, the certificate of node id reached at host, and
// returns the serve flags that use it.
func nodeCerts(t testing.TB, dir, id, host string) []string {
	t.Helper()
	// A restart issues afresh, in a dir of its own: files are never overwritten.
	dir = filepath.Join(dir, fmt.Sprintf("certs-%d", time.Now().UnixNano()))
	ca := theCA(t) // sets caDir
	f, err := ca.IssueFiles(dir, filepath.Join(caDir, pki.CACertFile), pki.Node, id, []string{host, "127.0.0.1", "localhost"}, 12*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return []string{"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key}
}

// caPool holds the test CA (theCA must have run: every node's start does).
func caPool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(testCA.Cert)
	return p
}

// withTLS is the client option of the test client's certificate.
func withTLS(t testing.TB) client.Option {
	f := clientCerts(t)
	return client.WithTLSFiles(f.CA, f.Cert, f.Key)
}

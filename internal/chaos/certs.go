package chaos

import (
	"crypto/tls"
	"fmt"
	"path/filepath"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/fencehq/fence/internal/pki"
)

// certs are a run's TLS files, as a real cluster has them: one CA, a node
// certificate per member (named by its id, for its address), one for the
// proxy's listeners, and the client certificate that the workers, the
// proxy (towards the members) and the harness use.
type certs struct {
	dir    string
	ca     *pki.CA
	client pki.Files
}

func newCerts(dir string) (*certs, error) {
	ca, err := pki.NewCA("chaos CA", 48*time.Hour)
	if err != nil {
		return nil, err
	}
	if err := pki.SaveCA(dir, ca); err != nil {
		return nil, err
	}
	c := &certs{dir: dir, ca: ca, client: pki.ClientFiles(dir)}
	if _, err := c.issue(pki.Client, "client", nil); err != nil {
		return nil, err
	}
	if _, err := pki.CreateTokenKey(dir); err != nil {
		return nil, err
	}
	return c, nil
}

// tokenKey is the cluster's token key, which every member signs with;
// tokenPub its public key, which the workers' tables verify with.
func (c *certs) tokenKey() string { return filepath.Join(c.dir, pki.TokenKeyFile) }
func (c *certs) tokenPub() string { return filepath.Join(c.dir, pki.TokenPubKeyFile) }

// node issues member id's node certificate for host.
func (c *certs) node(id, host string) (pki.Files, error) {
	return c.issue(pki.Node, id, []string{host})
}

func (c *certs) issue(kind pki.Kind, name string, hosts []string) (pki.Files, error) {
	return c.ca.IssueFiles(c.dir, c.client.CA, kind, name, hosts, 24*time.Hour)
}

// clientCreds are the gRPC credentials of the client certificate.
func (c *certs) clientCreds() (credentials.TransportCredentials, error) {
	cfg, err := pki.ClientTLS(c.client)
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(cfg), nil
}

// proxyCreds are the proxy listeners' (on 127.0.0.1): they require the
// client certificate of the CA, as a member does.
func (c *certs) proxyCreds() (credentials.TransportCredentials, error) {
	f, err := c.node("proxy", "127.0.0.1")
	if err != nil {
		return nil, err
	}
	rl, err := pki.NewReloader(f)
	if err != nil {
		return nil, fmt.Errorf("proxy certificate: %w", err)
	}
	return credentials.NewTLS(rl.ServerConfig(tls.RequireAndVerifyClientCert)), nil
}

// probe is the TLS config of a health probe of a member's HTTPS port: the
// server checked against the CA, no client certificate.
func (c *certs) probe() (*tls.Config, error) {
	cfg, err := pki.ClientTLS(c.client)
	if err != nil {
		return nil, err
	}
	cfg.Certificates = nil
	return cfg, nil
}

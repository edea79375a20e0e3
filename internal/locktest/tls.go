package locktest

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencehq/fence/internal/pki"
	"github.com/fencehq/fence/internal/server"
)

// Certs is a CA with a client certificate and node certificates (for
// 127.0.0.1 and localhost; Node is "node1"'s, the default node id; Serve
// makes one per node id), in a temp dir.
type Certs struct {
	Dir          string
	CA           *pki.CA
	Node, Client pki.Files
	t            testing.TB
}

// NewCerts makes them.
func NewCerts(t testing.TB) *Certs {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.NewCA("test CA", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.SaveCA(dir, ca); err != nil {
		t.Fatal(err)
	}
	c := &Certs{Dir: dir, CA: ca, t: t}
	c.Client = c.issueIn(dir, pki.Client, "client", time.Hour)
	c.Node = c.NodeFiles(server.DefaultConfig().NodeID)
	return c
}

// NodeFiles are the files of id's node certificate, made on first use.
func (c *Certs) NodeFiles(id string) pki.Files {
	f := pki.Files{CA: c.Client.CA, Cert: filepath.Join(c.Dir, id+".crt"), Key: filepath.Join(c.Dir, id+".key")}
	if _, err := os.Stat(f.Cert); err != nil {
		f = c.issueIn(c.Dir, pki.Node, id, time.Hour)
	}
	return f
}

// Issue makes a certificate of kind for name (valid for 127.0.0.1 and
// localhost, for validity) in a temp dir of its own.
func (c *Certs) Issue(kind pki.Kind, name string, validity time.Duration) pki.Files {
	c.t.Helper()
	return c.issueIn(c.t.TempDir(), kind, name, validity)
}

func (c *Certs) issueIn(dir string, kind pki.Kind, name string, validity time.Duration) pki.Files {
	c.t.Helper()
	f, err := c.CA.IssueFiles(dir, filepath.Join(c.Dir, pki.CACertFile), kind, name, []string{"127.0.0.1", "localhost"}, validity)
	if err != nil {
		c.t.Fatal(err)
	}
	return f
}

// Serve makes cfg serve TLS with the certificate of its node id (a mutate
// function for Start and NewCluster).
func (c *Certs) Serve(cfg *server.Config) { cfg.TLS, cfg.Insecure = c.NodeFiles(cfg.NodeID), false }

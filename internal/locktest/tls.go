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
	c.issue(pki.Client, "client")
	c.Client = pki.ClientFiles(dir)
	c.Node = c.NodeFiles(server.DefaultConfig().NodeID)
	return c
}

// NodeFiles are the files of id's node certificate, made on first use.
func (c *Certs) NodeFiles(id string) pki.Files {
	f := pki.Files{CA: c.Client.CA, Cert: filepath.Join(c.Dir, id+".crt"), Key: filepath.Join(c.Dir, id+".key")}
	if _, err := os.Stat(f.Cert); err != nil {
		c.issue(pki.Node, id)
	}
	return f
}

func (c *Certs) issue(kind pki.Kind, name string) {
	c.t.Helper()
	is, err := c.CA.Issue(kind, name, []string{"127.0.0.1", "localhost"}, time.Hour)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := pki.SaveIssued(c.Dir, name, is); err != nil {
		c.t.Fatal(err)
	}
}

// Serve makes cfg serve TLS with the certificate of its node id (a mutate
// function for Start and NewCluster).
func (c *Certs) Serve(cfg *server.Config) { cfg.TLS, cfg.Insecure = c.NodeFiles(cfg.NodeID), false }

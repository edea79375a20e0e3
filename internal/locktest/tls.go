package locktest

import (
	"testing"
	"time"

	"github.com/fencehq/fence/internal/pki"
	"github.com/fencehq/fence/internal/server"
)

// Certs is a CA with a node certificate (for 127.0.0.1 and localhost,
// shared by every node of a test cluster) and a client certificate, in a
// temp dir.
type Certs struct {
	Dir          string
	CA           *pki.CA
	Node, Client pki.Files
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
	for base, kind := range map[string]pki.Kind{"node": pki.Node, "client": pki.Client} {
		is, err := ca.Issue(kind, base, []string{"127.0.0.1", "localhost"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := pki.SaveIssued(dir, base, is); err != nil {
			t.Fatal(err)
		}
	}
	return &Certs{Dir: dir, CA: ca, Node: pki.NodeFiles(dir), Client: pki.ClientFiles(dir)}
}

// Serve makes cfg serve TLS with the node certificate (a mutate function
// for Start and NewCluster).
func (c *Certs) Serve(cfg *server.Config) { cfg.TLS, cfg.Insecure = c.Node, false }

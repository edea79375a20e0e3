package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fencehq/fence/internal/node"
	"github.com/fencehq/fence/internal/pki"
)

// DevTLSDir is where the dev setup keeps its certificates: a CA, the node's
// and a client's (pki.NodeFiles, pki.ClientFiles), in the data dir.
func DevTLSDir(dataDir string) string { return filepath.Join(dataDir, "tls") }

// openTLS decides how this node serves (Config.TLS, Config.Insecure): nil
// for plaintext, else the node's certificates, loaded, and whether they are
// the dev setup's.
func (c *Config) openTLS(log *slog.Logger) (_ *pki.Reloader, dev devSetup, _ error) {
	if c.Insecure {
		log.Warn("serving without TLS (insecure): anyone who can reach these ports can take, hold and watch any lock, and read lease secrets on the wire")
		return nil, dev, nil
	}
	files := c.TLS
	if !files.Set() {
		if err := node.CheckDataDir(c.DataDir); err != nil {
			return nil, dev, err // refused before the dev setup writes into it
		}
		dir := DevTLSDir(c.DataDir)
		_, err := os.Stat(dir)
		dev.made = errors.Is(err, fs.ErrNotExist)
		if files, err = pki.EnsureDev(dir, c.NodeID, pki.DevHosts); err != nil {
			return nil, dev, fmt.Errorf("dev certificates in %s: %w", dir, err)
		}
		dev.dir = dir
		log.Info("serving TLS with the dev certificates; the fence CLI on this machine finds the client's there (or set FENCE_CA, FENCE_CERT, FENCE_KEY)", "dir", dir)
	}
	r, err := pki.NewReloader(files)
	return r, dev, err
}

// checkDevSetup refuses, before anything is bound or written, a node that
// would need the dev setup (no certificates, not --insecure) where it
// cannot serve: beyond loopback, or in a cluster.
func (c *Config) checkDevSetup() error {
	if c.Insecure || c.TLS.Set() {
		return nil
	}
	for _, addr := range c.listenAddrs() {
		if !pki.IsLoopback(addr) {
			return fmt.Errorf("%s is not a loopback address, and no TLS certificates were given: "+
				"give --tls-ca, --tls-cert and --tls-key (make them with 'fence certs'), or --insecure to serve plaintext on purpose", addr)
		}
	}
	if len(c.Bootstrap) > 1 || len(c.Join) > 0 {
		return errors.New("the members of a cluster need certificates from one CA, and none were given: " +
			"make them with 'fence certs' and give each member --tls-ca, --tls-cert and --tls-key (README, Security), or --insecure")
	}
	return nil
}

// devSetup is where the dev setup's certificates are ("" when it is not in
// use) and whether this start made them.
type devSetup struct {
	dir  string
	made bool
}

// checkAlone refuses the dev setup for a node whose raft log makes it a
// member of a cluster (a member restarted without its --tls-* flags: its
// own dev CA would cut it off from the others); open then removes the
// certificates this start made.
func (s *Server) checkAlone(dev devSetup) error {
	if dev.dir == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	members, err := s.node.Members(ctx)
	if err != nil {
		return err
	}
	if len(members) <= 1 {
		return nil
	}
	return fmt.Errorf("this node is a member of a cluster of %d (its raft log says so), and no TLS certificates were given: "+
		"give it its --tls-ca, --tls-cert and --tls-key (certificates of the cluster's CA), or --insecure if the cluster runs plaintext", len(members))
}

// listenAddrs are the addresses this node listens on and gives out (the
// dev setup's certificates name loopback only).
func (c *Config) listenAddrs() []string {
	raft := c.RaftAddr
	if c.RaftListener != nil {
		raft = c.RaftListener.Addr().String()
	}
	addrs := []string{c.GRPCAddr, raft}
	for _, a := range []string{c.MetricsAddr, c.AdvertiseGRPCAddr, c.AdvertiseRaftAddr} {
		if a != "" {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

// clientCreds are the credentials this node calls another member's gRPC
// port with (joining): its node certificate, or plaintext.
func (s *Server) clientCreds(addr string) credentials.TransportCredentials {
	if s.tls == nil {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(s.tls.ClientConfig(addr))
}

// ReloadTLS re-reads the certificate, key and CA files (fence serve does on
// SIGHUP). Handshakes after it use them; connections already open keep
// theirs. If the files are unreadable or do not fit together, nothing
// changes and the error says why.
func (s *Server) ReloadTLS() error {
	if s.tls == nil {
		return errors.New("this node serves without TLS (--insecure): there are no certificates to reload")
	}
	if err := s.tls.Reload(); err != nil {
		return err
	}
	leaf := s.tls.Leaf()
	s.log.Info("reloaded TLS certificates", "cert", s.tls.Files().Cert, "serial", leaf.SerialNumber.Text(16), "not_after", leaf.NotAfter)
	return nil
}

// requireClientCert serves h only to callers that presented a certificate
// of the cluster's CA (the HTTP port asks for one but serves /metrics,
// /healthz and /readyz without: probes and scrapers often have none).
func requireClientCert(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.VerifiedChains) == 0 {
			http.Error(w, "this endpoint needs a client certificate of the cluster's CA", http.StatusUnauthorized)
			return
		}
		h(w, r)
	}
}

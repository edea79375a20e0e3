package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fencehq/fence/internal/node"
	"github.com/fencehq/fence/internal/pki"
)

// DevTLSDir is where the dev setup keeps its certificates: a CA, the node's
// and a client's (pki.NodeFiles, pki.ClientFiles), in the data dir.
func DevTLSDir(dataDir string) string { return filepath.Join(dataDir, "tls") }

// openTLS decides how this node serves (Config.TLS, Config.Insecure): nil
// for plaintext, else the node's certificates, loaded.
func (c *Config) openTLS(log *slog.Logger) (*pki.Reloader, error) {
	if c.Insecure {
		log.Warn("serving without TLS (insecure): anyone who can reach these ports can take, hold and watch any lock, and read lease secrets on the wire")
		return nil, nil
	}
	files := c.TLS
	if !files.Set() {
		for _, addr := range c.listenAddrs() {
			if !pki.IsLoopback(addr) {
				return nil, fmt.Errorf("%s is not a loopback address, and no TLS certificates were given: "+
					"give --tls-ca, --tls-cert and --tls-key (make them with 'fence certs'), or --insecure to serve plaintext on purpose", addr)
			}
		}
		if len(c.Bootstrap) > 1 || len(c.Join) > 0 {
			return nil, errors.New("the members of a cluster need certificates from one CA, and none were given: " +
				"make them with 'fence certs' and give each member --tls-ca, --tls-cert and --tls-key (README, Security), or --insecure")
		}
		if err := node.CheckFormat(c.DataDir); err != nil {
			return nil, err // refused before the dev setup writes into it
		}
		dir := DevTLSDir(c.DataDir)
		var err error
		if files, err = pki.EnsureDev(dir, c.NodeID, pki.DevHosts); err != nil {
			return nil, fmt.Errorf("dev certificates in %s: %w", dir, err)
		}
		log.Info("serving TLS with the dev certificates; the fence CLI on this machine finds the client's there (or set FENCE_CA, FENCE_CERT, FENCE_KEY)", "dir", dir)
	}
	return pki.NewReloader(files)
}

// listenAddrs are the addresses this node listens on.
func (c *Config) listenAddrs() []string {
	raft := c.RaftAddr
	if c.RaftListener != nil {
		raft = c.RaftListener.Addr().String()
	}
	addrs := []string{c.GRPCAddr, raft}
	if c.MetricsAddr != "" {
		addrs = append(addrs, c.MetricsAddr)
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

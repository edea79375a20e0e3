package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
)

// Reloader holds a node's certificate, key and CA (Files) as loaded last, and
// gives TLS configs that use whatever is current: a Reload (on SIGHUP)
// takes effect for every handshake after it, without a restart.
// Connections already open keep the certificates they were made with.
type Reloader struct {
	files Files
	cur   atomic.Pointer[loaded]
}

type loaded struct {
	cert  tls.Certificate
	leaf  *x509.Certificate
	roots *x509.CertPool
}

// NewReloader loads files, or reports what is wrong with them.
func NewReloader(files Files) (*Reloader, error) {
	if err := files.Check(); err != nil {
		return nil, err
	}
	r := &Reloader{files: files}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// Files returns the files r reads.
func (r *Reloader) Files() Files { return r.files }

// Reload re-reads the files. If any is unreadable or they do not fit
// together (a key of another certificate, a certificate the CA did not
// sign, one that expired), it changes nothing and says why.
func (r *Reloader) Reload() error {
	l, err := load(r.files, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}
	r.cur.Store(l)
	return nil
}

// load reads f and checks that they fit together: the key is the
// certificate's, private to its owner, and the certificate chains to the CA
// for each of uses (a node's certificate serves and dials; a client's
// dials).
func load(f Files, uses ...x509.ExtKeyUsage) (*loaded, error) {
	if err := privateKeyFile(f.Key); err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("load certificate %s with key %s: %w", f.Cert, f.Key, err)
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("read CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s holds no PEM certificate", f.CA)
	}
	leaf := cert.Leaf
	for _, use := range uses {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{use}}); err != nil {
			return nil, fmt.Errorf("certificate %s does not verify against CA %s as %s: %w", f.Cert, f.CA, useNames[use], err)
		}
	}
	return &loaded{cert: cert, leaf: leaf, roots: roots}, nil
}

var useNames = map[x509.ExtKeyUsage]string{
	x509.ExtKeyUsageServerAuth: "a node's (server authentication; a client certificate cannot serve)",
	x509.ExtKeyUsageClientAuth: "a client's (client authentication)",
}

// privateKeyFile refuses a key file that others than its owner may read or
// write, as ssh does: whoever reads a node's key can pose as that node. Like
// PostgreSQL it also takes a key owned by root that its group may read
// (mode 0640 or 0440, no more): root gave that group the key on purpose.
// That is what a Kubernetes secret volume is under a pod's fsGroup
// (root-owned, mode 0440 whatever defaultMode says), and root:fence 0640
// under systemd.
func privateKeyFile(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("key: %w", err)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 && (perm&0o037 != 0 || !ownedByRoot(info)) {
		return fmt.Errorf("key file %s is open to others (mode %04o): run chmod 600 %s "+
			"(or, for a key root owns, chmod 640 to let its group read it, as a Kubernetes secret volume does under fsGroup)", path, perm, path)
	}
	return nil
}

// Leaf returns the current certificate.
func (r *Reloader) Leaf() *x509.Certificate { return r.cur.Load().leaf }

// ServerConfig is a TLS config for a listener: it serves the current
// certificate and, with clientAuth of tls.RequireAndVerifyClientCert or
// tls.VerifyClientCertIfGiven, checks client certificates against the
// current CA.
func (r *Reloader) ServerConfig(clientAuth tls.ClientAuthType) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.serverConfig(clientAuth), nil
		},
	}
}

// serverConfig is a listener's config with the current files.
func (r *Reloader) serverConfig(clientAuth tls.ClientAuthType) *tls.Config {
	l := r.cur.Load()
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{l.cert},
		ClientCAs:    l.roots,
		ClientAuth:   clientAuth,
		NextProtos:   []string{"h2", "http/1.1"},
	}
}

// MemberConfig is the raft port's TLS config: ServerConfig requiring a
// client certificate, and one that is a node certificate (server and
// client authentication): a client certificate of the same CA does not
// open the port to the members' traffic.
func (r *Reloader) MemberConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cfg := r.serverConfig(tls.RequireAndVerifyClientCert)
			cfg.VerifyConnection = func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 || !slices.Contains(cs.PeerCertificates[0].ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
					return errors.New("the raft port takes only members' node certificates, and this is none (a client certificate?)")
				}
				return nil
			}
			return cfg, nil
		},
	}
}

// ClientConfig is a TLS config for dialing addr (host:port): the server's
// certificate must chain to the current CA and name addr's host; the
// current certificate is presented as the client's.
func (r *Reloader) ClientConfig(addr string) *tls.Config {
	l := r.cur.Load()
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		RootCAs:      l.roots,
		Certificates: []tls.Certificate{l.cert},
		ServerName:   HostOf(addr),
	}
}

// HostOf returns the host part of addr (addr itself if it has no port).
func HostOf(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// IsLoopback reports whether every address that addr (host:port) may
// listen on is on this machine's loopback: 127.0.0.0/8, ::1 or localhost.
// An empty host (all interfaces) is not.
func IsLoopback(addr string) bool {
	host := HostOf(addr)
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// IsLoopbackHost reports whether an HTTP Host header (host, host:port,
// [v6] or [v6]:port) names a loopback address or localhost, in any case.
func IsLoopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ClientTLS is a TLS config for a client of fence (gRPC fills in the
// server name from the address dialed): files' certificate as the client's,
// servers checked against files' CA. Unlike a Reloader it reads the files
// once.
func ClientTLS(files Files) (*tls.Config, error) {
	if err := files.Check(); err != nil {
		return nil, err
	}
	l, err := load(files, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: l.roots, Certificates: []tls.Certificate{l.cert}}, nil
}

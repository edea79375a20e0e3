package pki

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"sync/atomic"
)

// Reloader holds the certificate, key and CA of Files as loaded last, and
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
	l, err := load(r.files)
	if err != nil {
		return err
	}
	r.cur.Store(l)
	return nil
}

func load(f Files) (*loaded, error) {
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
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("certificate %s does not verify against CA %s: %w", f.Cert, f.CA, err)
	}
	return &loaded{cert: cert, leaf: leaf, roots: roots}, nil
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
			l := r.cur.Load()
			return &tls.Config{
				MinVersion:   tls.VersionTLS12,
				Certificates: []tls.Certificate{l.cert},
				ClientCAs:    l.roots,
				ClientAuth:   clientAuth,
				NextProtos:   []string{"h2", "http/1.1"},
			}, nil
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

// ClientTLS is a TLS config for a client of fence (gRPC fills in the
// server name from the address dialed): files' certificate as the client's,
// servers checked against files' CA. Unlike a Reloader it reads the files
// once.
func ClientTLS(files Files) (*tls.Config, error) {
	if err := files.Check(); err != nil {
		return nil, err
	}
	l, err := load(files)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: l.roots, Certificates: []tls.Certificate{l.cert}}, nil
}

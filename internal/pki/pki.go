// Package pki makes and loads the certificates of a fence cluster: a CA,
// node certificates (a member serves with it and presents it to other
// members) and client certificates, as PEM files, with Go's crypto/x509 (no
// openssl needed). Keys are ECDSA P-256, which every TLS stack and browser
// takes. Reloader serves the current files to TLS configs and re-reads them
// on demand, so certificates rotate without a restart.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Default lifetimes of what this package issues.
const (
	CAValidity   = 10 * 365 * 24 * time.Hour
	CertValidity = 2 * 365 * 24 * time.Hour
)

// CA is a certificate authority that issues a cluster's certificates.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// CertPEM is Cert in PEM form (what clients and members trust).
	CertPEM []byte
}

// NewCA creates a self-signed CA named name, valid for validity from now.
func NewCA(name string, validity time.Duration) (*CA, error) {
	key, tmpl, err := newKey(name, validity)
	if err != nil {
		return nil, err
	}
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.MaxPathLenZero = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pemBlock("CERTIFICATE", der)}, nil
}

// Kind is what a certificate is for.
type Kind int

const (
	// Node certificates serve a member's ports and identify it to the other
	// members (server and client authentication).
	Node Kind = iota
	// Client certificates identify a client (client authentication only).
	Client
)

// Issued is a certificate and its private key, in PEM form.
type Issued struct {
	CertPEM, KeyPEM []byte
}

// Issue signs a certificate of kind for name (its common name). hosts are
// the DNS names and IP addresses it is valid for (a node's; a client needs
// none).
func (ca *CA) Issue(kind Kind, name string, hosts []string, validity time.Duration) (*Issued, error) {
	if strings.TrimSpace(name) == "" {
		return nil, errors.New("a certificate needs a name")
	}
	key, tmpl, err := newKey(name, validity)
	if err != nil {
		return nil, err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if kind == Node {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		switch ip := net.ParseIP(h); {
		case h == "":
		case ip != nil:
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		default:
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	if kind == Node && len(tmpl.IPAddresses)+len(tmpl.DNSNames) == 0 {
		return nil, fmt.Errorf("node certificate %q: give the host names or addresses it serves on", name)
	}
	if validity > time.Until(ca.Cert.NotAfter) {
		return nil, fmt.Errorf("certificate %q would outlive its CA (which expires %s)", name, ca.Cert.NotAfter.Format(time.DateOnly))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &Issued{CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: pemBlock("PRIVATE KEY", keyDER)}, nil
}

// newKey makes a key and what every certificate shares: a random serial,
// the name, and a validity that starts an hour ago (clocks of a cluster
// differ a little).
func newKey(name string, validity time.Duration) (*ecdsa.PrivateKey, *x509.Certificate, error) {
	if validity <= 0 {
		return nil, nil, fmt.Errorf("validity %v must be positive", validity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	return key, &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name, Organization: []string{"fence"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
	}, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// Files name a certificate, its key and the CA that the other side's
// certificate must chain to.
type Files struct {
	CA, Cert, Key string
}

// Set reports whether any of the three is given.
func (f Files) Set() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// Check reports which of the three are missing, all at once.
func (f Files) Check() error {
	var missing []string
	for _, x := range []struct{ name, path string }{{"CA", f.CA}, {"certificate", f.Cert}, {"key", f.Key}} {
		if x.path == "" {
			missing = append(missing, x.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("TLS needs a CA, a certificate and its key; missing: %s", strings.Join(missing, ", "))
	}
	return nil
}

// Names of the files in a directory of certificates (what `fence certs`
// writes and what the dev setup creates in <data-dir>/tls).
const (
	CACertFile     = "ca.crt"
	CAKeyFile      = "ca.key"
	NodeCertFile   = "node.crt"
	NodeKeyFile    = "node.key"
	ClientCertFile = "client.crt"
	ClientKeyFile  = "client.key"
)

// NodeFiles are the node certificate files in dir.
func NodeFiles(dir string) Files {
	return Files{CA: filepath.Join(dir, CACertFile), Cert: filepath.Join(dir, NodeCertFile), Key: filepath.Join(dir, NodeKeyFile)}
}

// ClientFiles are the client certificate files in dir.
func ClientFiles(dir string) Files {
	return Files{CA: filepath.Join(dir, CACertFile), Cert: filepath.Join(dir, ClientCertFile), Key: filepath.Join(dir, ClientKeyFile)}
}

// SaveCA writes the CA's certificate and key into dir (created if missing);
// it refuses to overwrite an existing CA.
func SaveCA(dir string, ca *CA) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := writeNew(filepath.Join(dir, CAKeyFile), pemBlock("PRIVATE KEY", keyDER), 0o600); err != nil {
		return err
	}
	return writeNew(filepath.Join(dir, CACertFile), ca.CertPEM, 0o644)
}

// LoadCA reads the CA that SaveCA wrote into dir.
func LoadCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, fmt.Errorf("read the CA: %w", err)
	}
	if err := privateKeyFile(filepath.Join(dir, CAKeyFile)); err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, fmt.Errorf("read the CA's key: %w (only the machine that signs certificates needs it)", err)
	}
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, CACertFile), err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("%s is not a CA certificate", filepath.Join(dir, CACertFile))
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM key in it", filepath.Join(dir, CAKeyFile))
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, CAKeyFile), err)
	}
	key, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: not a signing key", filepath.Join(dir, CAKeyFile))
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM}, nil
}

// SaveIssued writes a certificate and its key as dir/<base>.crt and
// dir/<base>.key; it refuses to overwrite either.
func SaveIssued(dir, base string, is *Issued) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := writeNew(filepath.Join(dir, base+".key"), is.KeyPEM, 0o600); err != nil {
		return err
	}
	return writeNew(filepath.Join(dir, base+".crt"), is.CertPEM, 0o644)
}

// IssueFiles issues a certificate (Issue), saves it into dir as name.crt
// and name.key (SaveIssued), and returns its Files, with caFile as the CA
// the other side is checked against.
func (ca *CA) IssueFiles(dir, caFile string, kind Kind, name string, hosts []string, validity time.Duration) (Files, error) {
	is, err := ca.Issue(kind, name, hosts, validity)
	if err != nil {
		return Files{}, err
	}
	if err := SaveIssued(dir, name, is); err != nil {
		return Files{}, err
	}
	return Files{CA: caFile, Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")}, nil
}

// writeNew creates path with data, or fails if it exists.
func writeNew(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s exists; not overwriting it (remove it first to replace it)", path)
		}
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func parseCert(certPEM []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate in it")
	}
	return x509.ParseCertificate(block.Bytes)
}

// DevHosts are the names a dev node certificate is valid for: this machine's
// loopback.
var DevHosts = []string{"localhost", "127.0.0.1", "::1"}

// EnsureDev makes sure dir holds a CA, a node certificate for hosts, a
// client certificate (named "dev", full rights in a dev setup) and a token
// key (CreateTokenKey), creating
// what is missing, and returns the node's files. It is how `fence serve`
// with no TLS flags serves TLS on first start, and the CLI on the same
// machine finds the client files in the same dir. An existing CA is reused,
// so certificates made earlier stay valid.
func EnsureDev(dir, nodeName string, hosts []string) (Files, error) {
	nf := NodeFiles(dir)
	if !exists(filepath.Join(dir, TokenKeyFile)) {
		if _, err := CreateTokenKey(dir); err != nil {
			return Files{}, err
		}
	}
	if exists(nf.CA) && exists(nf.Cert) && exists(nf.Key) && exists(filepath.Join(dir, ClientCertFile)) {
		return nf, nil
	}
	var ca *CA
	var err error
	if exists(nf.CA) {
		if ca, err = LoadCA(dir); err != nil {
			return Files{}, err
		}
	} else {
		if ca, err = NewCA("fence dev CA", CAValidity); err != nil {
			return Files{}, err
		}
		if err := SaveCA(dir, ca); err != nil {
			return Files{}, err
		}
	}
	validity := min(CertValidity, time.Until(ca.Cert.NotAfter))
	if !exists(nf.Cert) {
		is, err := ca.Issue(Node, nodeName, hosts, validity)
		if err != nil {
			return Files{}, err
		}
		if err := SaveIssued(dir, "node", is); err != nil {
			return Files{}, err
		}
	}
	if !exists(filepath.Join(dir, ClientCertFile)) {
		is, err := ca.Issue(Client, "dev", nil, validity)
		if err != nil {
			return Files{}, err
		}
		if err := SaveIssued(dir, "client", is); err != nil {
			return Files{}, err
		}
	}
	return nf, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

package cli

import (
	"crypto"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/pki"
)

// certsDefaultDir is where 'fence certs' keeps the CA unless --dir says otherwise.
const certsDefaultDir = "certs"

// certsMaxDays is the longest validity a time.Duration holds (about 292 years).
const certsMaxDays = int(math.MaxInt64 / int64(24*time.Hour))

func newCerts() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Make the TLS certificates of a fence cluster (CA, nodes, clients) and its token key",
		Long: `Make the certificates a fence cluster runs TLS with, as PEM files, without
openssl (keys are ECDSA P-256): a CA, a node certificate per member (it
serves the member's ports and identifies it to the other members) and client
certificates (their common name is the client's identity).

Nodes and clients need ca.crt and their own .crt and .key. ca.key only signs
certificates: keep it secret, on the machine that runs these commands.

Nothing is ever overwritten. To rotate a certificate, issue it under another
name (or remove the old files first), check it with 'fence certs show' and
put it in place; 'fence serve' re-reads its certificate files on SIGHUP.`,
		Example: `  fence certs create-ca --dir certs
  fence certs create-node n1 --host n1.example.com,10.0.0.1 --dir certs
  fence certs create-client alice --dir certs
  fence certs create-token-key --dir certs
  fence certs show certs/n1.crt`,
	}
	cmd.AddCommand(newCertsCreateCA(), newCertsCreateNode(), newCertsCreateClient(), newCertsCreateTokenKey(), newCertsShow())
	return cmd
}

func newCertsCreateCA() *cobra.Command {
	var (
		dir, name string
		days      int
	)
	cmd := &cobra.Command{
		Use:   "create-ca",
		Short: "Create the cluster's CA: DIR/ca.crt and DIR/ca.key",
		Long: `Create a new certificate authority in --dir (created if missing): ca.crt,
which every node and client trusts, and ca.key (mode 0600), its private key,
which signs the node and client certificates.

It refuses to overwrite an existing CA: a new CA would leave every
certificate the old one issued untrusted. To start over, remove ca.crt and
ca.key first.`,
		Example: `  fence certs create-ca
  fence certs create-ca --dir /etc/fence/certs --name "acme fence CA" --days 1825`,
		Args: usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strings.TrimSpace(name) == "" {
				return certsUsage(cmd, "--name: the CA needs a name")
			}
			if err := certsCheckText(cmd, "--name", name); err != nil {
				return err
			}
			if dir == "" {
				return certsUsage(cmd, "--dir: give the directory to write the CA into")
			}
			validity, err := certsValidity(cmd, days)
			if err != nil {
				return err
			}
			crt, key := filepath.Join(dir, pki.CACertFile), filepath.Join(dir, pki.CAKeyFile)
			if err := certsRefuseExisting("there is a CA in "+dir+" already; to replace it, remove "+pki.CACertFile+" and "+pki.CAKeyFile+" first, and every certificate it issued stops being trusted", crt, key); err != nil {
				return err
			}
			ca, err := pki.NewCA(name, validity)
			if err != nil {
				return err
			}
			if err := pki.SaveCA(dir, ca); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "wrote %s (CA %q, valid until %s: give it to every node and client)\n", crt, name, ca.Cert.NotAfter.UTC().Format(time.DateOnly))
			fmt.Fprintf(out, "wrote %s (its private key, mode 0600: keep it secret, it signs certificates)\n", key)
			fmt.Fprintf(out, "next: fence certs create-node NAME --host HOST[,HOST…] --dir %s\n", certsShellArg(dir))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", certsDefaultDir, "directory to write ca.crt and ca.key into")
	f.StringVar(&name, "name", "fence CA", "the CA's common name")
	f.IntVar(&days, "days", int(pki.CAValidity/(24*time.Hour)), "days the CA is valid")
	return cmd
}

func newCertsCreateTokenKey() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "create-token-key",
		Short: "Create the key that signs fencing tokens: DIR/token-key.pem and DIR/token-key.pub.pem",
		Long: `Create a new Ed25519 token key in --dir (created if missing): token-key.pem
(mode 0600), which every member signs its grants with (fence serve
--token-key), and token-key.pub.pem, which storage loads to verify signed
tokens offline (fencing.LoadVerifier): a writer can then neither make up a
token nor use a grant of another lock.

To rotate: create the new key in another directory, add its .pub.pem to
every verifier (keep the old one: tokens signed before the switch still
verify), then put the new token-key.pem in place on every member and send
SIGHUP. Drop the old public key once no grant signed with it is held.`,
		Example: `  fence certs create-token-key --dir certs
  fence serve --token-key certs/token-key.pem ...`,
		Args: usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return certsUsage(cmd, "--dir: give the directory to write the token key into")
			}
			priv, pub := filepath.Join(dir, pki.TokenKeyFile), filepath.Join(dir, pki.TokenPubKeyFile)
			if err := certsRefuseExisting("there is a token key in "+dir+" already; to rotate, create the new one in another directory", priv, pub); err != nil {
				return err
			}
			id, err := pki.CreateTokenKey(dir)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "wrote %s (key id %s, mode 0600: give it to every member, fence serve --token-key; keep it secret, it signs tokens)\n", priv, id)
			fmt.Fprintf(out, "wrote %s (give it to the storage that verifies signed tokens: fencing.LoadVerifier)\n", pub)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", certsDefaultDir, "directory to write token-key.pem and token-key.pub.pem into")
	return cmd
}

// certsIssueFlags are the flags create-node and create-client share.
type certsIssueFlags struct {
	dir, out string
	days     int
}

func (fl *certsIssueFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&fl.dir, "dir", certsDefaultDir, "directory holding the CA (ca.crt and ca.key)")
	f.StringVar(&fl.out, "out", "", "directory to write NAME.crt and NAME.key into (default --dir)")
	f.IntVar(&fl.days, "days", int(pki.CertValidity/(24*time.Hour)), "days the certificate is valid (at most what is left of the CA's)")
}

func newCertsCreateNode() *cobra.Command {
	var (
		fl    certsIssueFlags
		hosts []string
	)
	cmd := &cobra.Command{
		Use:   "create-node NAME --host HOST[,HOST…]",
		Short: "Issue a node certificate: OUT/NAME.crt and OUT/NAME.key",
		Long: `Issue a certificate for the member NAME, signed by the CA in --dir. A member
serves its client and raft ports with it and presents it to the other
members, so it is good for both server and client authentication. NAME must
be the member's --node-id: the other members accept raft traffic from a
member only under the name its certificate gives.

--host lists the DNS names and IP addresses clients and other members reach
the node at (no scheme or port); give it more than once or comma-separated.
The certificate is valid for those only.`,
		Example: `  fence certs create-node n1 --host n1.example.com,10.0.0.1
  fence certs create-node n2 --host n2.example.com --host 10.0.0.2 --dir certs --out certs/n2
  fence certs create-node node1 --host localhost,127.0.0.1,::1 --days 90`,
		Args: usage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := certsCheckName(cmd, name); err != nil {
				return err
			}
			hs, err := certsHosts(cmd, name, hosts)
			if err != nil {
				return err
			}
			r, err := certsIssue(cmd, &fl, pki.Node, name, hs)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "wrote %s (node certificate %q for %s, valid until %s)\n", r.crt, name, strings.Join(hs, ", "), r.notAfter.UTC().Format(time.DateOnly))
			fmt.Fprintf(out, "wrote %s (its private key, mode 0600: keep it on that node only)\n", r.key)
			fmt.Fprintf(out, "serve with: fence serve --tls-ca %s --tls-cert %s --tls-key %s\n", certsShellArg(r.ca), certsShellArg(r.crt), certsShellArg(r.key))
			return nil
		},
	}
	fl.add(cmd)
	cmd.Flags().StringSliceVar(&hosts, "host", nil, "DNS name or IP address the node serves on (required; repeatable or comma-separated)")
	return cmd
}

func newCertsCreateClient() *cobra.Command {
	var fl certsIssueFlags
	cmd := &cobra.Command{
		Use:   "create-client NAME",
		Short: "Issue a client certificate: OUT/NAME.crt and OUT/NAME.key",
		Long: `Issue a client certificate named NAME, signed by the CA in --dir. Its common
name, NAME, is the identity the client connects as. It is good for client
authentication only: nothing can serve with it.`,
		Example: `  fence certs create-client alice
  fence certs create-client ci-runner --dir certs --out /tmp/ci --days 30`,
		Args: usage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := certsCheckName(cmd, name); err != nil {
				return err
			}
			r, err := certsIssue(cmd, &fl, pki.Client, name, nil)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "wrote %s (client certificate, identity %q, valid until %s)\n", r.crt, name, r.notAfter.UTC().Format(time.DateOnly))
			fmt.Fprintf(out, "wrote %s (its private key, mode 0600: keep it secret)\n", r.key)
			fmt.Fprintf(out, "use with: fence --ca %s --cert %s --key %s ls (or set FENCE_CA, FENCE_CERT, FENCE_KEY)\n", certsShellArg(r.ca), certsShellArg(r.crt), certsShellArg(r.key))
			return nil
		},
	}
	fl.add(cmd)
	return cmd
}

// certsIssued is what certsIssue wrote.
type certsIssued struct {
	ca, crt, key string
	notAfter     time.Time
}

// certsIssue loads the CA of fl.dir, checks that a certificate of fl.days
// fits in its life and that its files are new, then issues and writes it.
// Nothing is written unless every check passes.
func certsIssue(cmd *cobra.Command, fl *certsIssueFlags, kind pki.Kind, name string, hosts []string) (*certsIssued, error) {
	if fl.dir == "" {
		return nil, certsUsage(cmd, "--dir: give the directory holding the CA")
	}
	validity, err := certsValidity(cmd, fl.days)
	if err != nil {
		return nil, err
	}
	outDir := fl.out
	if outDir == "" {
		outDir = fl.dir
	}
	ca, err := pki.LoadCA(fl.dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no CA in %s (%v); create one with 'fence certs create-ca --dir %s', or point --dir at the directory holding %s and %s",
				fl.dir, err, certsShellArg(fl.dir), pki.CACertFile, pki.CAKeyFile)
		}
		return nil, err
	}
	if pub, ok := ca.Key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(ca.Cert.PublicKey) {
		return nil, fmt.Errorf("%s is not the key of %s", filepath.Join(fl.dir, pki.CAKeyFile), filepath.Join(fl.dir, pki.CACertFile))
	}
	left := time.Until(ca.Cert.NotAfter)
	if left <= 0 {
		return nil, fmt.Errorf("the CA in %s expired on %s; create a new one (and new certificates) to go on", fl.dir, ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	if validity > left {
		return nil, certsUsage(cmd, "--days %d: the certificate would outlive the CA in %s, which expires on %s; give at most --days %d",
			fl.days, fl.dir, ca.Cert.NotAfter.UTC().Format(time.DateOnly), int(left/(24*time.Hour)))
	}
	r := &certsIssued{
		ca:  filepath.Join(fl.dir, pki.CACertFile),
		crt: filepath.Join(outDir, name+".crt"),
		key: filepath.Join(outDir, name+".key"),
	}
	if err := certsRefuseExisting("to replace the certificate, remove "+filepath.Base(r.crt)+" and "+filepath.Base(r.key)+" first, or pick another name", r.crt, r.key); err != nil {
		return nil, err
	}
	is, err := ca.Issue(kind, name, hosts, validity)
	if err != nil {
		return nil, err
	}
	cert, err := certsParse(is.CertPEM)
	if err != nil {
		return nil, err
	}
	r.notAfter = cert.NotAfter
	if err := pki.SaveIssued(outDir, name, is); err != nil {
		return nil, err
	}
	return r, nil
}

func newCertsShow() *cobra.Command {
	return &cobra.Command{
		Use:   "show FILE...",
		Short: "Print a certificate's names, issuer, serial, validity and usages (or a token public key's id)",
		Long: `Print, for each certificate in the PEM files given: the subject and issuer
common names, the serial number (hex), the validity (RFC 3339, UTC, and how
long is left), the DNS names and IP addresses it is valid for, its key usages
(server: it can serve TLS; client: it can identify a client or member) and
whether it is a CA.

Use it to check a rotation: a new certificate has another serial and a later
not-after, and must have the issuer its peers trust.`,
		Example: `  fence certs show certs/n1.crt
  fence certs show certs/*.crt`,
		Args: usage(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			for i, file := range args {
				if i > 0 {
					fmt.Fprintln(out)
				}
				if err := certsShowFile(out, file); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// certsShowFile prints every certificate in file.
func certsShowFile(w io.Writer, file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var certs []*x509.Certificate
	var tokenKeys []fencing.KeyID
	sawKey := false
	for rest := data; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		switch {
		case block.Type == "CERTIFICATE":
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			certs = append(certs, c)
		case strings.HasSuffix(block.Type, "PRIVATE KEY"):
			sawKey = true
		case block.Type == "PUBLIC KEY":
			if k, err := x509.ParsePKIXPublicKey(block.Bytes); err == nil {
				if pub, ok := k.(ed25519.PublicKey); ok {
					tokenKeys = append(tokenKeys, fencing.KeyIDOf(pub))
				}
			}
		}
	}
	if len(certs) == 0 && len(tokenKeys) > 0 {
		for _, id := range tokenKeys {
			fmt.Fprintf(w, "%s\n  %-12s %s\n", file, "token key:", "Ed25519 public key, key id "+id.String()+" (verifies signed tokens)")
		}
		return nil
	}
	if len(certs) == 0 {
		if sawKey {
			return fmt.Errorf("%s holds a private key, not a certificate (show the .crt file)", file)
		}
		return fmt.Errorf("%s: no PEM certificate in it", file)
	}
	now := time.Now()
	for i, c := range certs {
		if len(certs) > 1 {
			if i > 0 {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "%s (certificate %d of %d)\n", file, i+1, len(certs))
		} else {
			fmt.Fprintln(w, file)
		}
		row := func(label, format string, a ...any) {
			fmt.Fprintf(w, "  %-12s %s\n", label+":", fmt.Sprintf(format, a...))
		}
		row("subject CN", "%s", c.Subject.CommonName)
		row("issuer CN", "%s", c.Issuer.CommonName)
		row("serial", "%X", c.SerialNumber)
		notYet := ""
		if now.Before(c.NotBefore) {
			notYet = " (not valid yet)"
		}
		row("not before", "%s%s", c.NotBefore.UTC().Format(time.RFC3339), notYet)
		row("not after", "%s (%s)", c.NotAfter.UTC().Format(time.RFC3339), certsLeft(c.NotAfter.Sub(now)))
		row("DNS names", "%s", certsList(c.DNSNames))
		ips := make([]string, len(c.IPAddresses))
		for j, ip := range c.IPAddresses {
			ips[j] = ip.String()
		}
		row("IPs", "%s", certsList(ips))
		row("usages", "%s", certsUsages(c))
		if c.IsCA {
			row("CA", "yes (it issues certificates)")
		} else {
			row("CA", "no")
		}
	}
	return nil
}

// certsLeft says how long a certificate has left, or how long ago it expired.
func certsLeft(d time.Duration) string {
	past := d < 0
	if past {
		d = -d
	}
	s := fmt.Sprintf("%d days", int(d/(24*time.Hour)))
	if d < 48*time.Hour {
		s = d.Round(time.Minute).String()
	}
	if past {
		return "EXPIRED " + s + " ago"
	}
	return "in " + s
}

func certsList(xs []string) string {
	if len(xs) == 0 {
		return "-"
	}
	return strings.Join(xs, ", ")
}

// certsUsages names what c may be used for: server, client (its extended
// key usages) and cert sign.
func certsUsages(c *x509.Certificate) string {
	var server, client bool
	var us []string
	for _, u := range c.ExtKeyUsage {
		switch u {
		case x509.ExtKeyUsageServerAuth:
			server = true
		case x509.ExtKeyUsageClientAuth:
			client = true
		case x509.ExtKeyUsageAny:
			us = append(us, "any")
		default:
			us = append(us, fmt.Sprintf("other (%d)", u))
		}
	}
	if client {
		us = append([]string{"client"}, us...)
	}
	if server {
		us = append([]string{"server"}, us...)
	}
	if c.KeyUsage&x509.KeyUsageCertSign != 0 {
		us = append(us, "cert sign")
	}
	return certsList(us)
}

// certsUsage is a bad-usage error (exit 2) of cmd.
func certsUsage(cmd *cobra.Command, format string, a ...any) error {
	return &exitError{ExitUsage, fmt.Errorf("%s (see 'fence %s --help')", fmt.Sprintf(format, a...), strings.TrimPrefix(cmd.CommandPath(), "fence "))}
}

// certsCheckName checks a certificate's NAME, which is its common name and
// the base of its file names.
func certsCheckName(cmd *cobra.Command, name string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return certsUsage(cmd, "NAME is empty: a certificate needs a name (its common name, and its files are NAME.crt and NAME.key)")
	case strings.TrimSpace(name) != name:
		return certsUsage(cmd, "NAME %q: no leading or trailing spaces", name)
	case strings.ContainsAny(name, `/\`) || strings.ContainsRune(name, os.PathSeparator) || strings.Contains(name, "..") ||
		name == "." || filepath.Base(name) != name || filepath.VolumeName(name) != "":
		return certsUsage(cmd, "NAME %q: no '/', '\\' or '..' (it names the files NAME.crt and NAME.key in --out; use --out for another directory)", name)
	}
	return certsCheckText(cmd, "NAME", name)
}

// certsCheckText refuses control characters in a name.
func certsCheckText(cmd *cobra.Command, what, s string) error {
	if strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return certsUsage(cmd, "%s %q: no control characters", what, s)
	}
	return nil
}

// certsHosts cleans up --host: trimmed, empty ones dropped, IPv6 brackets
// removed; each must be a DNS name or an IP address.
func certsHosts(cmd *cobra.Command, name string, hosts []string) ([]string, error) {
	var hs []string
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if inner, ok := strings.CutPrefix(h, "["); ok && strings.HasSuffix(inner, "]") && net.ParseIP(strings.TrimSuffix(inner, "]")) != nil {
			h = strings.TrimSuffix(inner, "]")
		}
		switch {
		case h == "":
			continue
		case net.ParseIP(h) == nil && (strings.ContainsAny(h, ":/@ ") || strings.IndexFunc(h, unicode.IsControl) >= 0):
			return nil, certsUsage(cmd, "--host %q is neither a DNS name nor an IP address (give hosts without a scheme or port, e.g. --host n1.example.com,10.0.0.1)", h)
		}
		hs = append(hs, h)
	}
	if len(hs) == 0 {
		return nil, certsUsage(cmd, "create-node needs --host: the DNS names and IP addresses clients and other members reach %s at (e.g. --host %s.example.com,10.0.0.1)", name, name)
	}
	return hs, nil
}

// certsValidity turns --days into a duration.
func certsValidity(cmd *cobra.Command, days int) (time.Duration, error) {
	if days <= 0 {
		return 0, certsUsage(cmd, "--days %d: give a positive number of days", days)
	}
	if days > certsMaxDays {
		return 0, certsUsage(cmd, "--days %d: at most %d", days, certsMaxDays)
	}
	return time.Duration(days) * 24 * time.Hour, nil
}

// certsRefuseExisting fails if any of paths exists, before anything is
// written (pki's savers refuse too, but only after writing the key).
func certsRefuseExisting(hint string, paths ...string) error {
	for _, p := range paths {
		_, err := os.Lstat(p)
		switch {
		case err == nil:
			return fmt.Errorf("%s exists; not overwriting it: %s", p, hint)
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
	}
	return nil
}

func certsParse(certPEM []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

// certsShellArg quotes s for a shell if it needs it.
func certsShellArg(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("-_./:=+,@%", r)))
	}) < 0 {
		return s
	}
	return shellQuote(s)
}

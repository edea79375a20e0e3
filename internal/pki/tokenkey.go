package pki

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fencehq/fence/fencing"
)

// Names of the token key files (what `fence certs create-token-key` writes
// and the dev setup creates in <data-dir>/tls). The private key signs the
// fencing tokens a server hands out; every member of a cluster is given the
// same one. The public key is what a resource's fencing.Verifier loads.
const (
	TokenKeyFile    = "token-key.pem"
	TokenPubKeyFile = "token-key.pub.pem"
)

// CreateTokenKey writes a new Ed25519 token key pair into dir as
// token-key.pem (0600) and token-key.pub.pem; it refuses to overwrite
// either. It returns the new key's id.
func CreateTokenKey(dir string) (fencing.KeyID, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return fencing.KeyID{}, err
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return fencing.KeyID{}, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return fencing.KeyID{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fencing.KeyID{}, err
	}
	pubPath := filepath.Join(dir, TokenPubKeyFile)
	if exists(pubPath) {
		return fencing.KeyID{}, fmt.Errorf("%s exists; not overwriting it (to rotate, write the new key into another directory)", pubPath)
	}
	if err := writeNew(filepath.Join(dir, TokenKeyFile), pemBlock("PRIVATE KEY", privDER), 0o600); err != nil {
		return fencing.KeyID{}, err
	}
	if err := writeNew(pubPath, pemBlock("PUBLIC KEY", pubDER), 0o644); err != nil {
		return fencing.KeyID{}, err
	}
	return fencing.KeyIDOf(pub), nil
}

// LoadTokenKey reads a token key that CreateTokenKey wrote, refusing a file
// others may read (whoever has the key can sign any token).
func LoadTokenKey(path string) (ed25519.PrivateKey, error) {
	if err := privateKeyFile(path); err != nil {
		return nil, fmt.Errorf("token %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("token key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("token key %s: no PEM PRIVATE KEY in it", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("token key %s: %w", path, err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("token key %s is a %T, not an Ed25519 key (make one with `fence certs create-token-key`)", path, k)
	}
	return key, nil
}

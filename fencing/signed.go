package fencing

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// A signed token is a fence server's statement about one lock grant —
// cluster, lock name, token, lease number, when it was issued, and which
// key signed it — with an Ed25519 signature by the cluster's token key.
// A resource that holds the cluster's public key checks it offline (no
// call to the server): a writer can then neither make up a token (one far
// above every real token would lock the resource out) nor write under a
// lock it never held (a real token, for another lock's name).
//
// Its text form (what Lease.SignedToken returns and the Fence-Token header
// carries) is the URL-safe base64 (no padding) of:
//
//	version   1 byte, 1
//	key id    8 bytes: the first 8 bytes of SHA-256 of the public key
//	cluster   8 bytes, big-endian
//	token     8 bytes, big-endian
//	lease     8 bytes, big-endian: the lease number of the grant's holder
//	issued    8 bytes, big-endian: Unix milliseconds, the signer's clock
//	name      2 bytes of length n, big-endian, then n bytes
//	signature 64 bytes: Ed25519 over signedContext followed by all of the above
//
// Fixed-width fields make the encoding canonical: one grant, one text.

const (
	signedVersion = 1
	signedHeader  = 1 + 8 + 8 + 8 + 8 + 8 + 2 // up to the name
	// MaxSignedTokenLen bounds a signed token's text: a longer one is
	// refused before it is decoded (a name is at most 1 KiB).
	MaxSignedTokenLen = 2048
	maxSignedName     = 1024
)

// signedContext separates these signatures from any other use of the key.
var signedContext = []byte("fence signed token\x00")

// ErrBadSignature is matched by every refusal of a signed token, and of a
// plain token where a signed one is required (a *SignatureError says why).
// Nothing was written or recorded.
var ErrBadSignature = errors.New("fencing: signed token refused")

// SignatureError reports a refused signed token.
type SignatureError struct {
	Resource string // what the write was for (table, resource key, ledger key)
	Reason   string
}

func (e *SignatureError) Error() string {
	if e.Resource == "" {
		return "fencing: signed token refused: " + e.Reason
	}
	return fmt.Sprintf("fencing: signed token for %s refused: %s", e.Resource, e.Reason)
}

// Is makes errors.Is(err, ErrBadSignature) true.
func (e *SignatureError) Is(target error) bool { return target == ErrBadSignature }

// KeyID names a token key: the first 8 bytes of SHA-256 of its public key.
type KeyID [8]byte

// KeyIDOf returns the id of a public key.
func KeyIDOf(pub ed25519.PublicKey) KeyID {
	sum := sha256.Sum256(pub)
	var id KeyID
	copy(id[:], sum[:8])
	return id
}

// String returns the id in hex, as `fence certs show` prints it.
func (id KeyID) String() string { return hex.EncodeToString(id[:]) }

// Grant is what a signed token states.
type Grant struct {
	KeyID    KeyID
	Cluster  uint64 // the fence cluster's id
	Name     string // the lock name
	Token    Token
	Lease    uint64 // the lease number of the holder
	IssuedAt time.Time
}

// Signer signs grants with one token key. Safe for concurrent use.
type Signer struct {
	key ed25519.PrivateKey
	id  KeyID
}

// NewSigner returns a Signer for key.
func NewSigner(key ed25519.PrivateKey) *Signer {
	return &Signer{key: key, id: KeyIDOf(key.Public().(ed25519.PublicKey))}
}

// KeyID returns the id of the signer's key.
func (s *Signer) KeyID() KeyID { return s.id }

// Sign returns the signed token for g (g.KeyID is set to the signer's).
// It fails only for a name longer than 1 KiB.
func (s *Signer) Sign(g Grant) (string, error) {
	if len(g.Name) > maxSignedName {
		return "", fmt.Errorf("fencing: cannot sign a lock name of %d bytes (at most %d)", len(g.Name), maxSignedName)
	}
	msg := make([]byte, 0, len(signedContext)+signedHeader+len(g.Name)+ed25519.SignatureSize)
	msg = append(msg, signedContext...)
	msg = append(msg, signedVersion)
	msg = append(msg, s.id[:]...)
	msg = binary.BigEndian.AppendUint64(msg, g.Cluster)
	msg = binary.BigEndian.AppendUint64(msg, g.Token)
	msg = binary.BigEndian.AppendUint64(msg, g.Lease)
	msg = binary.BigEndian.AppendUint64(msg, uint64(g.IssuedAt.UnixMilli()))
	msg = binary.BigEndian.AppendUint16(msg, uint16(len(g.Name)))
	msg = append(msg, g.Name...)
	msg = append(msg, ed25519.Sign(s.key, msg)...)
	return base64.RawURLEncoding.EncodeToString(msg[len(signedContext):]), nil
}

// Verifier checks signed tokens against the public keys it was given: the
// cluster's current token key and the ones it replaced, so tokens signed
// before a rotation still verify. It keeps the last verified tokens in a
// bounded cache, so a holder's many writes pay for one signature check.
// Safe for concurrent use.
type Verifier struct {
	keys map[KeyID]ed25519.PublicKey

	mu    sync.Mutex
	cache map[string]Grant
}

// verifiedCacheSize bounds the Verifier's cache of verified tokens.
const verifiedCacheSize = 4096

// NewVerifier returns a Verifier that accepts tokens signed by any of keys.
func NewVerifier(keys ...ed25519.PublicKey) (*Verifier, error) {
	if len(keys) == 0 {
		return nil, errors.New("fencing: a Verifier needs at least one public key")
	}
	v := &Verifier{keys: map[KeyID]ed25519.PublicKey{}, cache: map[string]Grant{}}
	for i, k := range keys {
		if len(k) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("fencing: public key %d is %d bytes, not an Ed25519 key (%d)", i+1, len(k), ed25519.PublicKeySize)
		}
		v.keys[KeyIDOf(k)] = k
	}
	return v, nil
}

// ParseVerifier returns a Verifier for the PEM "PUBLIC KEY" blocks in
// data (what `fence certs create-token-key` writes to token-key.pub.pem;
// concatenate the files of the current and the old keys).
func ParseVerifier(data []byte) (*Verifier, error) {
	var keys []ed25519.PublicKey
	for n := 1; ; n++ {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("fencing: PEM block %d is a %q, not a PUBLIC KEY (give the token key's .pub.pem, never the private key)", n, b.Type)
		}
		k, err := x509.ParsePKIXPublicKey(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("fencing: PEM block %d: %w", n, err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("fencing: PEM block %d is a %T, not an Ed25519 public key", n, k)
		}
		keys = append(keys, pub)
	}
	if strings.TrimSpace(string(data)) != "" {
		return nil, errors.New("fencing: text after the last PEM block is not PEM")
	}
	if len(keys) == 0 {
		return nil, errors.New("fencing: no PUBLIC KEY block found")
	}
	return NewVerifier(keys...)
}

// LoadVerifier reads files of PEM public keys (see ParseVerifier).
func LoadVerifier(paths ...string) (*Verifier, error) {
	var all []byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("fencing: %w", err)
		}
		all = append(append(all, b...), '\n')
	}
	v, err := ParseVerifier(all)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, strings.Join(paths, ", "))
	}
	return v, nil
}

// Verify checks a signed token's signature and returns what it states.
// Any refusal matches ErrBadSignature.
func (v *Verifier) Verify(signed string) (Grant, error) {
	v.mu.Lock()
	g, ok := v.cache[signed]
	v.mu.Unlock()
	if ok {
		return g, nil
	}
	g, err := v.verify(signed)
	if err != nil {
		return Grant{}, &SignatureError{Reason: err.Error()}
	}
	v.mu.Lock()
	if len(v.cache) >= verifiedCacheSize {
		for k := range v.cache { // evict one, at random
			delete(v.cache, k)
			break
		}
	}
	v.cache[signed] = g
	v.mu.Unlock()
	return g, nil
}

func (v *Verifier) verify(signed string) (Grant, error) {
	if signed == "" {
		return Grant{}, errors.New("no signed token given")
	}
	if len(signed) > MaxSignedTokenLen {
		return Grant{}, fmt.Errorf("%d characters, more than a signed token has (%d)", len(signed), MaxSignedTokenLen)
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(signed)
	if err != nil || base64.RawURLEncoding.EncodeToString(raw) != signed {
		// Strict refuses stray trailing bits; the comparison also refuses
		// the line breaks the decoder skips: one grant, one text.
		return Grant{}, errors.New("not a signed token (not URL-safe base64 in its one canonical form)")
	}
	if len(raw) < signedHeader+ed25519.SignatureSize {
		return Grant{}, errors.New("too short for a signed token")
	}
	if raw[0] != signedVersion {
		return Grant{}, fmt.Errorf("version %d is not known here (this fencing package reads version %d)", raw[0], signedVersion)
	}
	var id KeyID
	copy(id[:], raw[1:9])
	n := int(binary.BigEndian.Uint16(raw[41:43]))
	if len(raw) != signedHeader+n+ed25519.SignatureSize {
		return Grant{}, errors.New("its length does not match its name's length (truncated or altered)")
	}
	key, ok := v.keys[id]
	if !ok {
		return Grant{}, fmt.Errorf("signed by key %s, which this verifier does not have (a key of another cluster, or a new key: add its .pub.pem)", id)
	}
	body := raw[:signedHeader+n]
	msg := make([]byte, 0, len(signedContext)+len(body))
	msg = append(append(msg, signedContext...), body...)
	if !ed25519.Verify(key, msg, raw[signedHeader+n:]) {
		return Grant{}, errors.New("the signature does not match (forged or altered)")
	}
	return Grant{
		KeyID:    id,
		Cluster:  binary.BigEndian.Uint64(raw[9:17]),
		Token:    binary.BigEndian.Uint64(raw[17:25]),
		Lease:    binary.BigEndian.Uint64(raw[25:33]),
		IssuedAt: time.UnixMilli(int64(binary.BigEndian.Uint64(raw[33:41]))),
		Name:     string(raw[signedHeader : signedHeader+n]),
	}, nil
}

// VerifyFor checks a signed token and that it was issued for the lock
// name, and returns its token. resource names the write in the error.
func (v *Verifier) VerifyFor(signed, name, resource string) (Token, error) {
	g, err := v.Verify(signed)
	if err != nil {
		err.(*SignatureError).Resource = resource
		return 0, err
	}
	if g.Name != name {
		return 0, &SignatureError{Resource: resource,
			Reason: fmt.Sprintf("it was issued for lock %q; writing here needs a grant of lock %q", g.Name, name)}
	}
	if g.Token == 0 {
		return 0, &SignatureError{Resource: resource, Reason: "it states token 0, which no grant has"}
	}
	return g.Token, nil
}

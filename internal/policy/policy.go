// Package policy decides who may do what to which locks. A policy file
// (YAML) maps identities — a client certificate's common name, or the name
// of a bearer token — to lock-name prefixes and rights:
//
//	identities:
//	  - name: billing-app          # a client certificate's common name
//	    prefixes: [billing/]       # the lock names it may use ("" is every name)
//	    rights: [acquire, read]
//	  - name: legacy-cron          # a client without a certificate:
//	    token_sha256: 9f86d08…     # the SHA-256 (hex) of its bearer token
//	    prefixes: [jobs/nightly]
//	    rights: [acquire]
//	  - name: ops
//	    prefixes: [""]
//	    rights: [acquire, read, admin]
//
// An identity the file does not name may do nothing. Parse lists every
// problem of a file at once. A Policy is immutable; the server swaps in a
// new one on reload.
package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/fencehq/fence/internal/fsm"
)

// Right is what an identity may do to the locks under its prefixes.
type Right uint8

// The rights.
const (
	// Acquire: create leases, take, renew and release locks, write the
	// fenced key-value store.
	Acquire Right = 1 << iota
	// Read: read locks and the key-value store.
	Read
	// Admin: force-release, membership, leadership transfer.
	Admin
)

var rightNames = map[string]Right{"acquire": Acquire, "read": Read, "admin": Admin}

func (r Right) String() string {
	for name, v := range rightNames {
		if r == v {
			return name
		}
	}
	return fmt.Sprintf("right(%d)", uint8(r))
}

// Policy is a parsed policy file.
type Policy struct {
	grants map[string][]grant  // by identity
	tokens map[[32]byte]string // SHA-256 of a bearer token → identity
}

type grant struct {
	prefix string
	rights Right
}

// file is the YAML of a policy file.
type file struct {
	Identities []entry `yaml:"identities"`
}

type entry struct {
	Name        string   `yaml:"name"`
	TokenSHA256 string   `yaml:"token_sha256"`
	Prefixes    []string `yaml:"prefixes"`
	Rights      []string `yaml:"rights"`
}

// maxIdentity bounds an identity's name like a lock's.
const maxIdentity = fsm.MaxNameLen

// Parse reads a policy file's contents. Its error lists every problem, each
// with the entry it is in.
func Parse(data []byte) (*Policy, error) {
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("policy: the file is empty: list the identities (see 'fence serve --help', --policy-file)")
		}
		return nil, fmt.Errorf("policy: %v", err)
	}
	if err := dec.Decode(new(any)); !errors.Is(err, io.EOF) {
		return nil, errors.New("policy: the file holds more than one YAML document (a '---' line?): put every identity in one")
	}
	p := &Policy{grants: map[string][]grant{}, tokens: map[[32]byte]string{}}
	var errs []error
	seen := map[string]bool{}
	bad := func(i int, e *entry, format string, args ...any) {
		who := fmt.Sprintf("identity %d", i+1)
		if e.Name != "" {
			who += fmt.Sprintf(" (%q)", e.Name)
		}
		errs = append(errs, fmt.Errorf("%s: %s", who, fmt.Sprintf(format, args...)))
	}
	if len(f.Identities) == 0 {
		errs = append(errs, errors.New("no identities: an empty policy would refuse every call"))
	}
	for i := range f.Identities {
		e := &f.Identities[i]
		switch {
		case e.Name == "":
			bad(i, e, "no name (a client certificate's common name, or a token's name)")
		case len(e.Name) > maxIdentity:
			bad(i, e, "name longer than %d bytes", maxIdentity)
		case seen[e.Name]:
			bad(i, e, "named twice: give one entry per identity")
		}
		if err := fsm.ValidName("identity", e.Name); e.Name != "" && err != nil {
			bad(i, e, "%v", err)
		}
		var rights Right
		for _, r := range e.Rights {
			v, ok := rightNames[strings.ToLower(strings.TrimSpace(r))]
			if !ok {
				bad(i, e, "unknown right %q (acquire, read or admin)", r)
			}
			rights |= v
		}
		if len(e.Rights) == 0 {
			bad(i, e, "no rights (acquire, read, admin)")
		}
		if len(e.Prefixes) == 0 {
			bad(i, e, `no prefixes (a lock-name prefix such as "billing/", or "" for every name)`)
		}
		var gs []grant
		for _, pre := range e.Prefixes {
			if pre != "" {
				if err := fsm.ValidName("prefix", pre); err != nil {
					bad(i, e, "%v", err)
					continue
				}
			}
			gs = append(gs, grant{prefix: pre, rights: rights})
		}
		if e.TokenSHA256 != "" {
			sum, err := hex.DecodeString(e.TokenSHA256)
			switch {
			case err != nil || len(sum) != sha256.Size:
				bad(i, e, "token_sha256 is not 64 hex digits (make it with 'fence policy hash-token')")
			case [32]byte(sum) == sha256.Sum256(nil):
				bad(i, e, "token_sha256 is the hash of an empty token (an empty token file?): anyone could send it")
			case p.tokens[[32]byte(sum)] != "":
				bad(i, e, "the same token as %q", p.tokens[[32]byte(sum)])
			default:
				p.tokens[[32]byte(sum)] = e.Name
			}
		}
		if e.Name != "" && !seen[e.Name] {
			seen[e.Name] = true
			p.grants[e.Name] = gs
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("policy: %w", errors.Join(errs...))
	}
	return p, nil
}

// Load reads and parses the policy file at path.
func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Allows reports whether identity has right on the lock (or key) name.
func (p *Policy) Allows(identity string, right Right, name string) bool {
	for _, g := range p.grants[identity] {
		if g.rights&right != 0 && strings.HasPrefix(name, g.prefix) {
			return true
		}
	}
	return false
}

// AllowsSome reports whether identity has right on some names: what a call
// that names no lock needs (creating a lease needs acquire somewhere).
func (p *Policy) AllowsSome(identity string, right Right) bool {
	for _, g := range p.grants[identity] {
		if g.rights&right != 0 {
			return true
		}
	}
	return false
}

// Prefixes lists the prefixes under which identity has right, for an error
// message that says what it may do instead.
func (p *Policy) Prefixes(identity string, right Right) []string {
	var out []string
	for _, g := range p.grants[identity] {
		if g.rights&right != 0 {
			out = append(out, g.prefix)
		}
	}
	return out
}

// TokenIdentity returns the identity whose bearer token is token (never
// for an empty one).
func (p *Policy) TokenIdentity(token string) (string, bool) {
	if token == "" {
		return "", false
	}
	name, ok := p.tokens[sha256.Sum256([]byte(token))]
	return name, ok
}

// HashToken is what a policy file records of a bearer token.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

package fencing

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"
)

// The cache of verified tokens stays bounded, however many tokens pass.
func TestVerifierCacheBounded(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s := NewSigner(priv)
	v, err := NewVerifier(pub)
	if err != nil {
		t.Fatal(err)
	}
	for i := range verifiedCacheSize + 100 {
		tok, _ := s.Sign(Grant{Name: "a", Token: Token(i + 1)})
		if _, err := v.Verify(tok); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(v.cache); n != verifiedCacheSize {
		t.Fatalf("the cache holds %d tokens, want %d", n, verifiedCacheSize)
	}
}

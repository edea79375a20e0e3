package policy_test

import (
	"testing"

	"github.com/fencehq/fence/internal/policy"
)

// FINDING: Parse accepts, as an identity's token_sha256, the SHA-256 of the
// empty string (e3b0c442…) — what `sha256sum` prints for an empty or
// missing-content token file, a common slip ('fence policy hash-token'
// refuses an empty token, but a hand-made hash is not checked). The server
// then hands that identity to ANY caller that sends an empty bearer:
// "authorization: " or "authorization: Bearer " (TokenIdentity("") matches;
// confirmed against a running server: CreateLease passes authorization).
// Fix: Parse refuses the hash of the empty token, and identify ignores (or
// refuses) an empty bearer token before looking it up.
func TestRedteamEmptyTokenHashIsAnIdentity(t *testing.T) {
	doc := "identities:\n  - name: cron\n    token_sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n    prefixes: [jobs/]\n    rights: [acquire]\n"
	p, err := policy.Parse([]byte(doc))
	if err != nil {
		return // refused: fixed
	}
	if id, ok := p.TokenIdentity(""); ok {
		t.Errorf("the empty bearer token identifies as %q: a policy naming the SHA-256 of the empty string lets anyone in", id)
	}
}

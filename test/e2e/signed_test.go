package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/pki"
)

// The quick start's grants carry signed tokens that package fencing
// verifies with the dev setup's public key: `fence lock` exports
// FENCE_SIGNED_TOKEN, `fence run` gives it to the command. A script that
// evals `fence lock` (which exports FENCE_TOKEN, the fencing token) can
// still use the CLI under a policy: FENCE_TOKEN is never sent as a bearer
// token.
func TestQuickStartSignedTokens(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	os.WriteFile(pol, []byte("identities:\n  - name: dev\n    prefixes: [\"\"]\n    rights: [acquire, read, admin]\n"), 0o600)
	s := startDevServer(t, "--policy-file", pol)
	v, err := fencing.LoadVerifier(filepath.Join(s.dir, "fence-data", "tls", pki.TokenPubKeyFile))
	if err != nil {
		t.Fatal(err)
	}

	code, out := s.fence(s.dir, nil, "lock", "totals/77", "--ttl", "1m")
	if code != 0 {
		t.Fatalf("fence lock: exit %d\n%s", code, out)
	}
	vars := env(out)
	token, _ := strconv.ParseUint(vars["FENCE_TOKEN"], 10, 64)
	got, err := v.VerifyFor(vars["FENCE_SIGNED_TOKEN"], "totals/77", "totals")
	if err != nil || got != token || token == 0 {
		t.Fatalf("FENCE_SIGNED_TOKEN %q: token %d, %v (FENCE_TOKEN %d)\n%s", vars["FENCE_SIGNED_TOKEN"], got, err, token, out)
	}
	if _, err := v.VerifyFor(vars["FENCE_SIGNED_TOKEN"], "totals/78", "totals"); !errors.Is(err, fencing.ErrBadSignature) {
		t.Fatalf("the grant of totals/77 verified for totals/78: %v", err)
	}
	var evaled []string // what `eval "$(fence lock …)"` leaves in the environment
	for k, v := range vars {
		evaled = append(evaled, k+"="+v)
	}
	if code, out := s.fence(s.dir, evaled, "unlock"); code != 0 {
		t.Fatalf("fence unlock after eval of fence lock, under a policy: exit %d\n%s", code, out)
	}

	code, out = s.fence(s.dir, nil, "run", "jobs/nightly", "--", "sh", "-c", `echo "$FENCE_TOKEN $FENCE_SIGNED_TOKEN"`)
	if code != 0 {
		t.Fatalf("fence run: exit %d\n%s", code, out)
	}
	line := strings.Fields(lastLine(out))
	if len(line) != 2 {
		t.Fatalf("fence run's command saw %q", lastLine(out))
	}
	token, _ = strconv.ParseUint(line[0], 10, 64)
	if got, err := v.VerifyFor(line[1], "jobs/nightly", "jobs"); err != nil || got != token {
		t.Fatalf("fence run's FENCE_SIGNED_TOKEN: token %d, %v (FENCE_TOKEN %d)", got, err, token)
	}
}

// env parses `fence lock`'s export lines.
func env(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "="); ok && strings.HasPrefix(line, "export ") {
			m[k] = strings.Trim(v, "'")
		}
	}
	return m
}

func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

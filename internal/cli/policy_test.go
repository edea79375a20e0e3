package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencehq/fence/internal/policy"
)

func runIn(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestPolicyCheckAndHashToken(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte("identities:\n  - {name: ops, prefixes: [\"\"], rights: [admin]}\n"), 0o600)
	os.WriteFile(bad, []byte("identities:\n  - {name: ops, prefixes: [\"\"], rights: [root]}\n  - {prefixes: [x], rights: [read]}\n"), 0o600)
	if code, out, errOut := runIn(t, "", "policy", "check", good); code != 0 || !strings.Contains(out, "ok") {
		t.Errorf("check of a good file: %d %q %q", code, out, errOut)
	}
	code, _, errOut := runIn(t, "", "policy", "check", bad)
	if code != ExitError || !strings.Contains(errOut, `unknown right "root"`) || !strings.Contains(errOut, "no name") {
		t.Errorf("check of a bad file: %d %q (want both problems)", code, errOut)
	}
	if code, out, _ := runIn(t, "s3cret\n", "policy", "hash-token"); code != 0 || strings.TrimSpace(out) != policy.HashToken("s3cret") {
		t.Errorf("hash-token: %d %q", code, out)
	}
	if code, _, _ := runIn(t, "", "policy", "hash-token"); code != ExitUsage {
		t.Errorf("hash-token of nothing: exit %d, want %d", code, ExitUsage)
	}
}

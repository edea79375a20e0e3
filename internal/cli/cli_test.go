package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/server"
)

func startServer(t *testing.T) string { return locktest.Start(t).GRPCAddr() }

// fence runs the CLI in-process against the plaintext server at addr and
// returns its exit code and output.
func fence(t *testing.T, addr string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return fenceArgs(t, append([]string{"--insecure", "--server", addr}, args...)...)
}

// fenceArgs runs the CLI in-process with exactly args.
func fenceArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// env parses `export K=V` lines.
func env(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		m[k] = strings.Trim(v, "'")
	}
	return m
}

func TestLockStatusLsUnlock(t *testing.T) {
	addr := startServer(t)
	code, out, errOut := fence(t, addr, "lock", "jobs/it's", "--ttl", "1m", "--owner", "script-1")
	if code != 0 {
		t.Fatalf("lock: %d %s", code, errOut)
	}
	vars := env(out)
	if vars["FENCE_TOKEN"] != "1" || len(vars["FENCE_LEASE"]) != 32 || vars["FENCE_TTL"] != "1m0s" || !strings.Contains(out, `'jobs/it'\''s'`) {
		t.Fatalf("lock output:\n%s", out)
	}
	if code, _, errOut := fence(t, addr, "lock", "jobs/it's", "--wait", "0"); code != ExitNotAcquired || !strings.Contains(errOut, "held by lease #1") {
		t.Fatalf("second lock: %d %s", code, errOut)
	}
	code, out, _ = fence(t, addr, "status", "jobs/it's", "--json")
	var st lockJSON
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || !st.Held || st.HolderOwner != "script-1" || st.Token != 1 || st.TTLLeftSeconds <= 50 {
		t.Fatalf("status: %d %s", code, out)
	}
	code, out, _ = fence(t, addr, "ls")
	if code != 0 || !strings.Contains(out, "LOCK") || !strings.Contains(out, "#1 script-1") {
		t.Fatalf("ls:\n%s", out)
	}
	if code, _, errOut := fence(t, addr, "unlock", "--lease", vars["FENCE_LEASE"]); code != 0 {
		t.Fatalf("unlock: %d %s", code, errOut)
	}
	if code, _, _ := fence(t, addr, "unlock", "--lease", vars["FENCE_LEASE"]); code != ExitNotHeld {
		t.Fatalf("second unlock: %d, want %d", code, ExitNotHeld)
	}
	code, out, _ = fence(t, addr, "ls", "--json")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("ls after unlock: %s", out)
	}
}

func TestReleaseForce(t *testing.T) {
	addr := startServer(t)
	fence(t, addr, "lock", "stuck", "--owner", "host-7")
	if code, _, errOut := fence(t, addr, "release", "stuck"); code != ExitUsage || !strings.Contains(errOut, "--force") {
		t.Fatalf("release without --force: %d %s", code, errOut)
	}
	code, out, errOut := fence(t, addr, "release", "--force", "stuck", "--reason", "INC-1")
	if code != 0 || !strings.Contains(out, "released stuck (token 1) from lease #1 (host-7)") {
		t.Fatalf("release --force: %d %s %s", code, out, errOut)
	}
	if code, out, _ := fence(t, addr, "status", "stuck"); code != 0 || !strings.Contains(out, "stuck: free") {
		t.Fatalf("status after force-release: %s", out)
	}
}

func TestRunPassesTokenAndExitCode(t *testing.T) {
	addr := startServer(t)
	code, out, errOut := fence(t, addr, "run", "job", "--ttl", "3s", "--", "sh", "-c", `echo "$FENCE_LOCK $FENCE_TOKEN $FENCE_TTL"; exit 7`)
	if code != 7 || strings.TrimSpace(out) != "job 1 3s" {
		t.Fatalf("run: code %d out %q err %q", code, out, errOut)
	}
	// The lock was released afterwards: the next run gets it at once.
	if code, out, _ := fence(t, addr, "run", "job", "--wait", "0", "--", "sh", "-c", `echo $FENCE_TOKEN`); code != 0 || strings.TrimSpace(out) != "2" {
		t.Fatalf("second run: %d %q", code, out)
	}
}

func TestAdminToken(t *testing.T) {
	srv := locktest.Start(t, func(c *server.Config) { c.AdminToken = "s3cret" })
	addr := srv.GRPCAddr()
	t.Setenv("FENCE_ADMIN_TOKEN", "")
	fence(t, addr, "lock", "stuck")
	if code, _, errOut := fence(t, addr, "release", "--force", "stuck"); code != ExitError || !strings.Contains(errOut, "admin token") {
		t.Fatalf("force-release without the token: %d %s", code, errOut)
	}
	t.Setenv("FENCE_ADMIN_TOKEN", "s3cret")
	if code, out, errOut := fence(t, addr, "release", "--force", "stuck"); code != 0 || !strings.Contains(out, "released stuck") {
		t.Fatalf("force-release with the token: %d %s %s", code, out, errOut)
	}
}

// Package systemd holds fence.service and the fence.env it reads, and tests
// them: systemd's own checks of the unit, and fence's of the flags.
package systemd

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencehq/fence/internal/cli"
)

// TestUnit runs 'systemd-analyze verify' and 'systemd-analyze security
// --offline' on fence.service. Both work without systemd running as init.
// It skips where systemd-analyze is missing (apt-get install systemd)
// unless FENCE_REQUIRE_SYSTEMD=1 (as in CI).
func TestUnit(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("FENCE_REQUIRE_SYSTEMD") != "" {
			t.Fatal("FENCE_REQUIRE_SYSTEMD is set but systemd-analyze is missing (apt-get install systemd)")
		}
		t.Skip("systemd-analyze is missing (apt-get install systemd)")
	}
	unit, err := os.ReadFile("fence.service")
	if err != nil {
		t.Fatal(err)
	}
	// verify checks that the programs of ExecStart= and ExecReload= exist:
	// point them at a stand-in, as they need not exist on this machine.
	dir := t.TempDir()
	stub := filepath.Join(dir, "stub")
	if err := os.WriteFile(stub, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	text := string(unit)
	for _, prog := range []string{"/usr/local/bin/fence ", "/bin/kill "} {
		if !strings.Contains(text, prog) {
			t.Fatalf("fence.service runs no %q; update this test", prog)
		}
		text = strings.ReplaceAll(text, prog, stub+" ")
	}
	path := filepath.Join(dir, "fence.service")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	// verify exits 0 on an unknown key or a value it cannot parse (it
	// ignores them with a warning): any output fails the test.
	if out, err := exec.Command(analyze, "verify", path).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify fence.service: %v\n%s", err, out)
	}
	// The exposure level of the hardening (0 best, 10 worst; 1.2 when this
	// was written) must stay at most 1.5.
	if out, err := exec.Command(analyze, "security", "--offline=yes", "--threshold=15", path).CombinedOutput(); err != nil {
		t.Errorf("systemd-analyze security: exposure above 1.5 (%v):\n%s", err, out)
	}
}

// TestEnvFileFlags: every FENCE_FLAGS in fence.env, the live one and the
// commented-out example, is made of flags 'fence serve' accepts.
func TestEnvFileFlags(t *testing.T) {
	f, err := os.Open("fence.env")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var values []string // each FENCE_FLAGS value, continuation lines joined
	continued := false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := strings.TrimPrefix(sc.Text(), "#")
		if value, ok := strings.CutPrefix(line, "FENCE_FLAGS="); ok {
			values = append(values, "")
			line, continued = value, true
		}
		if !continued {
			continue
		}
		line, continued = strings.CutSuffix(line, `\`)
		values[len(values)-1] += " " + line
	}
	if len(values) != 2 {
		t.Fatalf("fence.env has %d FENCE_FLAGS (%q), want the live one and the cluster example", len(values), values)
	}
	for _, v := range values {
		serve, _, err := cli.NewRoot().Find([]string{"serve"})
		if err != nil {
			t.Fatal(err)
		}
		if err := serve.ParseFlags(strings.Fields(v)); err != nil {
			t.Errorf("fence serve%s: %v", v, err)
		} else if args := serve.Flags().Args(); len(args) > 0 {
			t.Errorf("fence serve%s: stray arguments %q", v, args)
		}
	}
}

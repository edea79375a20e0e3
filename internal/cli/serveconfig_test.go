package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// printed runs fence serve --print-config with args and returns each
// setting's printed line (value and source) by name.
func printed(t *testing.T, args ...string) map[string]string {
	t.Helper()
	code, out, errOut := fenceArgs(t, append([]string{"serve", "--print-config"}, args...)...)
	if code != 0 {
		t.Fatalf("serve --print-config %v: %d %s", args, code, errOut)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(l, ": ")
		lines[k] = v
	}
	return lines
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fence.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Precedence: a flag beats $FENCE_<FLAG>, which beats the config file,
// which beats the default; --print-config says which gave each value.
func TestServeConfigPrecedence(t *testing.T) {
	path := writeConfig(t, "min-ttl: 2s\nmax-ttl: 2h\nlock-delay: 0\ntick: 50ms\njoin: [127.0.0.1:1, 127.0.0.1:2]\n")
	t.Setenv("FENCE_MAX_TTL", "3h")
	t.Setenv("FENCE_LOCK_DELAY", "1s")
	t.Setenv("FENCE_CONFIG", path)
	got := printed(t, "--lock-delay", "2s", "--insecure")
	for name, want := range map[string]string{
		"lock-delay": "2s  # flag",
		"max-ttl":    "3h0m0s  # env FENCE_MAX_TTL",
		"min-ttl":    "2s  # file " + path,
		"tick":       "50ms  # file " + path,
		"join":       "127.0.0.1:1,127.0.0.1:2  # file " + path,
		"heartbeat":  "100ms  # default",
		"insecure":   "true  # flag",
	} {
		if got[name] != want {
			t.Errorf("%s: %q, want %q", name, got[name], want)
		}
	}
	if _, ok := got["server"]; ok {
		t.Error("--print-config lists a client flag (--server), which serve does not use")
	}
}

// What --print-config prints is a config file that gives the same settings.
func TestPrintConfigReadsBack(t *testing.T) {
	first := printed(t, "--grpc-addr", "127.0.0.1:7390", "--bootstrap", "node1=127.0.0.1:7302,n2=127.0.0.1:7312", "--insecure", "--pprof", "--log-format", "json")
	var file strings.Builder
	for k, v := range first {
		value, _, _ := strings.Cut(v, "  # ")
		file.WriteString(k + ": " + value + "\n")
	}
	path := writeConfig(t, file.String())
	again := printed(t, "--config", path)
	for k, v := range first {
		value, _, _ := strings.Cut(v, "  # ")
		if got, _, _ := strings.Cut(again[k], "  # "); got != value {
			t.Errorf("%s: %q read back as %q", k, value, got)
		}
	}
}

// Every problem of every source is listed at once, as a usage error, and
// a value that does not parse leaves the default in place (so the checks
// after it do not report a zero nobody set).
func TestServeConfigListsEveryProblem(t *testing.T) {
	path := writeConfig(t, "grpc-adr: 127.0.0.1:7300\nmin-ttl: soon\ntick: 5s\ntls: {ca: x}\n")
	t.Setenv("FENCE_MAX_TTL", "forever")
	code, _, errOut := fenceArgs(t, "serve", "--config", path, "--raft-addr", "0.0.0.0:7302", "--log-format", "xml")
	if code != ExitUsage {
		t.Fatalf("exit %d, want %d: %s", code, ExitUsage, errOut)
	}
	for _, want := range []string{
		`"grpc-adr" is not a setting`,
		`"tls.ca" is not a setting`,
		`min-ttl: invalid argument "soon"`,
		`$FENCE_MAX_TTL="forever"`,
		`--log-format "xml"`,
		"--advertise-raft-addr",
		"tick interval 5s is outside",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("the error does not list %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut, "0s…") {
		t.Errorf("a bad value left a zero behind for the checks:\n%s", errOut)
	}
	if code, _, errOut := fenceArgs(t, "serve", "--config", filepath.Join(t.TempDir(), "missing.yaml")); code != ExitUsage || !strings.Contains(errOut, "no such file") {
		t.Errorf("a missing config file: %d %s", code, errOut)
	}
}

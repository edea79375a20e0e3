package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadmeGatewayExample runs README's HTTP/JSON gateway block as a
// newcomer would (bash, curl, jq), against the dev node it starts, on free
// ports instead of 7300-7303, and checks what it prints.
func TestReadmeGatewayExample(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("README's gateway example needs %s: %v", tool, err)
		}
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)<!-- gateway-example[^>]*-->\n```sh\n(.*?)```").FindSubmatch(readme)
	if block == nil {
		t.Fatal("README has no gateway-example block")
	}
	grpc, metrics, raft, gw := freePort(t), freePort(t), freePort(t), freePort(t)
	script := strings.NewReplacer(
		"go build -o fence ./cmd/fence && ./fence serve ", fenceBinary(t)+" serve --grpc-addr "+grpc+" --metrics-addr "+metrics+" --raft-addr "+raft+" ",
		"127.0.0.1:7303", gw, "127.0.0.1:7301", metrics,
	).Replace(string(block[1]))
	if strings.Contains(script, ":730") {
		t.Fatalf("a fixed port is left in the example:\n%s", script)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-c", script)
	cmd.Dir = t.TempDir()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the server it starts goes with it
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if err != nil {
		t.Fatalf("the example failed: %v\n%s", err, out)
	}
	// protojson may put a space after a key's colon or a comma; the checks
	// read the output without them.
	compact := regexp.MustCompile(`,\s+"`).ReplaceAllString(regexp.MustCompile(`"\s*:\s+`).ReplaceAllString(string(out), `":`), `,"`)
	for _, want := range []string{
		`"name":"jobs/nightly","token":"1","lease_number":"1"`,
		`"holder_lease_number":"1","holder_owner":"curl","token":"1"`,
		`"seq":"1","ok":true,"ttl":"60s","held_tokens":["1"]`,
		`"name":"jobs/other","token":"2"`,
		`"message":"invalid: lock name is empty","status":"INVALID_ARGUMENT"`,
		`{"released":["jobs/other"]}`,
	} {
		if !strings.Contains(compact, want) {
			t.Errorf("the example's output lacks %s:\n%s", want, out)
		}
	}
}

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunOncePer: fence run --once-per records a run whose command exits 0;
// inside the window the next one exits 75 saying when, by whom and with
// which token it ran. A failed run records nothing; without --once-per the
// record does not matter.
func TestRunOncePer(t *testing.T) {
	addr := startServer(t)
	if code, _, errOut := fence(t, addr, "run", "jobs/nightly", "--once-per", "1h", "--owner", "host-a", "--", "sh", "-c", "exit 3"); code != 3 {
		t.Fatalf("failing run: %d %s", code, errOut)
	}
	code, out, errOut := fence(t, addr, "run", "jobs/nightly", "--once-per", "1h", "--owner", "host-b", "--", "sh", "-c", "echo $FENCE_TOKEN")
	if code != 0 || strings.TrimSpace(out) != "2" {
		t.Fatalf("run after a failed one: %d %q %s", code, out, errOut)
	}
	code, out, errOut = fence(t, addr, "run", "jobs/nightly", "--once-per", "1h", "--owner", "host-c", "--wait", "0", "--", "echo", "ran again")
	if code != ExitNotAcquired || out != "" {
		t.Fatalf("run inside the window: %d %q %s", code, out, errOut)
	}
	for _, want := range []string{`"jobs/nightly" already ran inside its once-per window: ran at `, `by lease #2 (owner "host-b"), token 2`} {
		if !strings.Contains(errOut, want) {
			t.Fatalf("message %q lacks %q", errOut, want)
		}
	}
	if code, out, _ := fence(t, addr, "run", "jobs/nightly", "--", "echo", "plain"); code != 0 || strings.TrimSpace(out) != "plain" {
		t.Fatalf("run without --once-per: %d %q", code, out)
	}
}

// TestRunOncePerWaiter: a host that waits while another runs the job exits
// 75 once that run succeeds, without running the command.
func TestRunOncePerWaiter(t *testing.T) {
	addr := startServer(t)
	dir := t.TempDir()
	goFile, ranFile := filepath.Join(dir, "go"), filepath.Join(dir, "ran")
	first := make(chan int, 1)
	go func() {
		code, _, _ := fence(t, addr, "run", "jobs/nightly", "--once-per", "1h", "--owner", "host-a", "--",
			"sh", "-c", `while [ ! -e "$0" ]; do sleep 0.01; done`, goFile)
		first <- code
	}()
	waiters := func() bool {
		_, out, _ := fence(t, addr, "status", "jobs/nightly")
		return strings.Contains(out, "host-a") && strings.Contains(out, "1 waiting")
	}
	type outcome struct {
		code   int
		errOut string
	}
	second := make(chan outcome, 1)
	go func() {
		for { // once host-a holds the lock
			if _, out, _ := fence(t, addr, "status", "jobs/nightly"); strings.Contains(out, "host-a") {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		code, _, errOut := fence(t, addr, "run", "jobs/nightly", "--once-per", "1h", "--owner", "host-b", "--", "touch", ranFile)
		second <- outcome{code, errOut}
	}()
	for !waiters() {
		time.Sleep(5 * time.Millisecond)
	}
	if err := os.WriteFile(goFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := <-first; code != 0 {
		t.Fatalf("host-a's run: %d", code)
	}
	got := <-second
	if got.code != ExitNotAcquired || !strings.Contains(got.errOut, `owner "host-a"), token 1`) {
		t.Fatalf("host-b: exit %d, %s", got.code, got.errOut)
	}
	if _, err := os.Stat(ranFile); err == nil {
		t.Fatal("host-b ran the command")
	}
}

package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fencehq/fence/internal/locktest"
)

// background runs the CLI until stop; stop returns its exit code.
func background(t *testing.T, addr string, args ...string) (out *locktest.LogBuffer, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out = &locktest.LogBuffer{}
	var errb locktest.LogBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, append([]string{"--insecure", "--server", addr}, args...), strings.NewReader(""), out, &errb)
	}()
	return out, func() int {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Logf("stderr: %s", errb.String())
			}
			return code
		case <-time.After(10 * time.Second):
			t.Fatal("the command did not end within 10s of its interrupt")
			return -1
		}
	}
}

// waitFor waits until out has n lines.
func waitFor(t *testing.T, out *locktest.LogBuffer, n int) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if out.String() != "" && len(lines) >= n {
			return lines
		}
		if time.Now().After(deadline) {
			t.Fatalf("want %d lines, got:\n%s", n, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWatchPrintsChanges(t *testing.T) {
	addr := startServer(t)
	out, stop := background(t, addr, "watch", "jobs/", "--from", "1") // from the start: whenever it connects
	code, lockOut, errOut := fence(t, addr, "lock", "jobs/a", "--ttl", "1m", "--owner", "script-1")
	if code != 0 {
		t.Fatalf("lock: %d %s", code, errOut)
	}
	if code, _, errOut := fence(t, addr, "unlock", "--lease", env(lockOut)["FENCE_LEASE"]); code != 0 {
		t.Fatalf("unlock: %d %s", code, errOut)
	}
	lines := waitFor(t, out, 2)
	if code := stop(); code != 0 {
		t.Fatalf("watch exit %d after an interrupt, want 0", code)
	}
	if !strings.HasSuffix(lines[0], "jobs/a: granted to lease #1 (script-1), token 1") ||
		!strings.HasSuffix(lines[1], "jobs/a: token 1 of lease #1 (script-1) ended: revoked") {
		t.Fatalf("watch printed:\n%s", strings.Join(lines, "\n"))
	}
}

// TestLsWatch: the list, then each change after it, as JSON lines.
func TestLsWatch(t *testing.T) {
	addr := startServer(t)
	if code, _, errOut := fence(t, addr, "lock", "a", "--ttl", "1m"); code != 0 {
		t.Fatalf("lock: %d %s", code, errOut)
	}
	out, stop := background(t, addr, "ls", "--watch", "--json")
	// The list is an indented JSON array; wait for it, then make a change.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "]") {
		if time.Now().After(deadline) {
			t.Fatalf("no list: %s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code, _, errOut := fence(t, addr, "lock", "b", "--ttl", "1m"); code != 0 {
		t.Fatalf("lock: %d %s", code, errOut)
	}
	for !strings.Contains(out.String(), `"name":"b"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no event for b: %s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code := stop(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	list, events, _ := strings.Cut(out.String(), "]\n")
	var locks []lockJSON
	if err := json.Unmarshal([]byte(list+"]"), &locks); err != nil || len(locks) != 1 || locks[0].Name != "a" || locks[0].Index == 0 {
		t.Fatalf("list %v (%v) from:\n%s", locks, err, out.String())
	}
	var e eventJSON
	if err := json.Unmarshal([]byte(strings.TrimSpace(events)), &e); err != nil || e.Type != "granted" || e.Name != "b" || e.Token != 2 || e.Index <= locks[0].Index {
		t.Fatalf("event %+v (%v) from %q", e, err, events)
	}
}

func TestWatchRefusesBadInput(t *testing.T) {
	addr := startServer(t)
	for _, args := range [][]string{{"watch", ""}, {"watch", "a\x00b"}, {"watch"}, {"watch", "a", "--from", "-1"}} {
		if code, _, errOut := fence(t, addr, args...); code == 0 || errOut == "" {
			t.Errorf("%q: exit %d, stderr %q: want a refusal", args, code, errOut)
		}
	}
}

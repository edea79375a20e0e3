package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// holding starts fence run NAME args… --owner owner -- CMD, where CMD
// prints its FENCE_SLOT and FENCE_TOKEN and runs until finish is called,
// and returns once fence status shows owner holding NAME. finish returns
// fence run's exit code and output.
func holding(t *testing.T, addr, name, owner string, args ...string) (finish func() (int, string)) {
	goFile := filepath.Join(t.TempDir(), "go")
	type result struct {
		code int
		out  string
	}
	done := make(chan result, 1)
	argv := append(append([]string{"run", name, "--owner", owner}, args...), "--",
		"sh", "-c", `echo "slot=$FENCE_SLOT token=$FENCE_TOKEN"; while [ ! -e "$0" ]; do sleep 0.01; done`, goFile)
	go func() {
		code, out, errOut := fence(t, addr, argv...)
		done <- result{code, out + errOut}
	}()
	for {
		if _, out, _ := fence(t, addr, "status", name); strings.Contains(out, owner) {
			break
		}
	}
	return func() (int, string) {
		if err := os.WriteFile(goFile, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		r := <-done
		return r.code, r.out
	}
}

// TestRunPermits: fence run --permits N holds a permit while CMD runs,
// CMD gets FENCE_SLOT; fence status lists every permit; another N, or a
// plain run of the name, exits 1 naming both counts (a configuration
// error: waiting would not help); bad flags are usage errors (exit 2).
func TestRunPermits(t *testing.T) {
	addr := startServer(t)
	finish := holding(t, addr, "exports", "host-a", "--permits", "2")
	code, out, errOut := fence(t, addr, "run", "exports", "--permits", "2", "--owner", "host-b", "--wait", "0", "--", "sh", "-c", "echo slot=$FENCE_SLOT")
	if code != 0 || strings.TrimSpace(out) != "slot=1" || !strings.Contains(errOut, `acquired slot 1 of "exports" with token 2`) {
		t.Fatalf("second permit: %d %q %s", code, out, errOut)
	}
	_, status, _ := fence(t, addr, "status", "exports")
	if !strings.Contains(status, "exports: semaphore of 2 permits, 1 taken, 0 waiting") || !strings.Contains(status, "slot 0: lease #1 (host-a), token 1") {
		t.Fatalf("status:\n%s", status)
	}
	_, js, _ := fence(t, addr, "status", "exports", "--json")
	var st lockJSON
	if err := json.Unmarshal([]byte(js), &st); err != nil || st.Permits != 2 || len(st.Grants) != 1 || st.Grants[0].Slot != 0 || st.Grants[0].HolderOwner != "host-a" {
		t.Fatalf("status --json: %v %s", err, js)
	}
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--permits", "3"}, 1, `lock "exports" is a semaphore of 2 permits, but this call asked for a semaphore of 3 permits`},
		{nil, 1, "but this call asked for a lock of one permit (a mutex or read-write lock)"},
		{[]string{"--shared"}, 1, "is a semaphore of 2 permits"},
		{[]string{"--permits", "0"}, ExitUsage, "--permits 0 is outside 1…65536"},
		{[]string{"--permits", "2", "--shared"}, ExitUsage, "a semaphore (--permits) has no readers"},
		// --once-per runs a job once per window; N permits or readers would
		// each run it at once.
		{[]string{"--permits", "2", "--once-per", "1h"}, ExitUsage, "--once-per runs CMD once per window"},
		{[]string{"--shared", "--once-per", "1h"}, ExitUsage, "--once-per runs CMD once per window"},
	} {
		args := append(append([]string{"run", "exports", "--wait", "0"}, tc.args...), "--", "echo", "ran")
		code, out, errOut := fence(t, addr, args...)
		if code != tc.code || out != "" || !strings.Contains(errOut, tc.msg) {
			t.Errorf("%v: %d %q %q, want %d with %q", tc.args, code, out, errOut, tc.code, tc.msg)
		}
	}
	if code, got := finish(); code != 0 || !strings.Contains(got, "slot=0 token=1") {
		t.Fatalf("first permit: %d %q", code, got)
	}
}

// TestRunShared: readers run together (a second --shared runs while the
// first holds), a writer (plain run) waits for them and is refused with
// --wait 0, and fence status lists the readers.
func TestRunShared(t *testing.T) {
	addr := startServer(t)
	finish := holding(t, addr, "catalog", "reader-a", "--shared")
	code, out, errOut := fence(t, addr, "run", "catalog", "--shared", "--owner", "reader-b", "--wait", "0", "--", "echo", "read")
	if code != 0 || strings.TrimSpace(out) != "read" || !strings.Contains(errOut, `acquired a shared grant of "catalog" with token 2`) {
		t.Fatalf("second reader: %d %q %s", code, out, errOut)
	}
	if code, _, errOut := fence(t, addr, "run", "catalog", "--wait", "0", "--", "echo", "write"); code != ExitNotAcquired || !strings.Contains(errOut, `owner "reader-a"`) {
		t.Fatalf("writer beside a reader: %d %s", code, errOut)
	}
	if _, status, _ := fence(t, addr, "status", "catalog"); !strings.Contains(status, "catalog: read-write lock, 1 readers") || !strings.Contains(status, "reader: lease #1 (reader-a), token 1") {
		t.Fatalf("status:\n%s", status)
	}
	if code, out := finish(); code != 0 || !strings.Contains(out, "slot=0 token=1") {
		t.Fatalf("first reader: %d %q", code, out)
	}
	if code, out, _ := fence(t, addr, "run", "catalog", "--", "sh", "-c", "echo $FENCE_TOKEN"); code != 0 || strings.TrimSpace(out) != "3" {
		t.Fatalf("writer after the readers: %d %q", code, out)
	}
}

// TestWatchShowsSlots: fence watch says which permit a grant is (past slot
// 0) and which grants are readers', in text and in JSON.
func TestWatchShowsSlots(t *testing.T) {
	addr := startServer(t)
	// --from 1: from the start, whenever each watch connects (without it,
	// a watch that connects after the first grant misses it).
	text, stopText := background(t, addr, "watch", "pool", "--from", "1")
	js, stopJSON := background(t, addr, "watch", "--json", "rw", "--from", "1")
	finish := holding(t, addr, "pool", "host-a", "--permits", "2")
	if code, _, errOut := fence(t, addr, "run", "pool", "--permits", "2", "--owner", "host-b", "--", "true"); code != 0 {
		t.Fatalf("second permit: %d %s", code, errOut)
	}
	finish()
	if code, _, errOut := fence(t, addr, "run", "rw", "--shared", "--owner", "host-c", "--", "true"); code != 0 {
		t.Fatalf("reader: %d %s", code, errOut)
	}
	lines := waitFor(t, text, 4) // two grants, two releases
	if !strings.Contains(strings.Join(lines, "\n"), `pool: granted to lease #2 (host-b), token 2 (slot 1)`) {
		t.Fatalf("watch:\n%s", text.String())
	}
	var granted eventJSON
	if err := json.Unmarshal([]byte(waitFor(t, js, 1)[0]), &granted); err != nil || granted.Type != "granted" || !granted.Shared || granted.Token != 3 {
		t.Fatalf("watch --json: %v %s", err, js.String())
	}
	stopText()
	stopJSON()
}

// TestReleaseForcePermit: release --force of a semaphore with two permits
// held asks which (naming the tokens) and changes nothing; --token ends
// that permit alone (its holder is told), the other runs on.
func TestReleaseForcePermit(t *testing.T) {
	addr := startServer(t)
	finishA := holding(t, addr, "exports", "host-a", "--permits", "2")
	finishB := holding(t, addr, "exports", "host-b", "--permits", "2")
	code, _, errOut := fence(t, addr, "release", "--force", "exports")
	if code == 0 || !strings.Contains(errOut, `lock "exports" has 2 grants (tokens 1, 2); name the one to end by its token`) {
		t.Fatalf("release --force of two permits: %d %s", code, errOut)
	}
	code, out, errOut := fence(t, addr, "release", "--force", "exports", "--token", "2")
	if code != 0 || !strings.Contains(out, "released exports (token 2) from lease #2 (host-b)") {
		t.Fatalf("release --force --token 2: %d %q %s", code, out, errOut)
	}
	// host-b learns at its next renewal; its command, finishing first, finds
	// its grant ended as it releases.
	if _, out := finishB(); !strings.Contains(out, `lock force-released by an admin: lock "exports" (token 2)`) {
		t.Fatalf("host-b's run: %q", out)
	}
	if code, out := finishA(); code != 0 {
		t.Fatalf("host-a's run: %d %q", code, out)
	}
}

package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fenceCmd builds a `fence` CLI process talking to node n.
func fenceCmd(t *testing.T, n *node, args ...string) *exec.Cmd {
	return exec.Command(fenceBinary(t), append(append([]string{"--server", n.grpc}, cliTLS(t)...), args...)...)
}

type jobRun struct {
	start, end int64
	token      uint64
}

// TestFenceRunNeverOverlaps starts four `fence run` processes at once on one
// lock; each job appends its start and end time (ns) and its token to a log.
// The jobs must run one after another, with increasing tokens.
func TestFenceRunNeverOverlaps(t *testing.T) {
	n := newNode(t, "--lock-delay", "0")
	n.start()
	log := filepath.Join(t.TempDir(), "jobs.log")
	job := `echo start $(date +%s%N) $FENCE_TOKEN >> "$LOG"; sleep 0.3; echo end $(date +%s%N) $FENCE_TOKEN >> "$LOG"`
	const runs = 4
	var wg sync.WaitGroup
	for i := 0; i < runs; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := fenceCmd(t, n, "run", "jobs/nightly", "--ttl", "3s", "--wait", "30s", "--", "sh", "-c", job)
			cmd.Env = append(os.Environ(), "LOG="+log)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("fence run %d: %v\n%s", i, err, out)
			}
		}()
	}
	wg.Wait()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	byToken := map[uint64]*jobRun{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var what string
		var ns int64
		var tok uint64
		if _, err := fmt.Sscanf(line, "%s %d %d", &what, &ns, &tok); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if byToken[tok] == nil {
			byToken[tok] = &jobRun{token: tok}
		}
		if what == "start" {
			byToken[tok].start = ns
		} else {
			byToken[tok].end = ns
		}
	}
	if len(byToken) != runs {
		t.Fatalf("%d distinct tokens in %d runs:\n%s", len(byToken), runs, b)
	}
	var jobs []*jobRun
	for _, j := range byToken {
		jobs = append(jobs, j)
	}
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].start < jobs[j].start })
	for i := 1; i < len(jobs); i++ {
		prev, cur := jobs[i-1], jobs[i]
		if cur.start < prev.end {
			t.Errorf("job with token %d started %v before job %d ended", cur.token, time.Duration(prev.end-cur.start), prev.token)
		}
		if cur.token <= prev.token {
			t.Errorf("token %d ran after token %d", cur.token, prev.token)
		}
	}
	t.Logf("%d runs, tokens in start order: %v", runs, func() (ts []uint64) {
		for _, j := range jobs {
			ts = append(ts, j.token)
		}
		return
	}())
}

var acquiredRE = regexp.MustCompile(`acquired "[^"]+" with token (\d+)`)

// waitAcquired reads a `fence run` stderr until it reports its grant.
func waitAcquired(t *testing.T, lines *bufio.Scanner) uint64 {
	t.Helper()
	for lines.Scan() {
		if m := acquiredRE.FindStringSubmatch(lines.Text()); m != nil {
			tok, _ := strconv.ParseUint(m[1], 10, 64)
			return tok
		}
	}
	t.Fatal("fence run ended without acquiring")
	return 0
}

// TestFenceRunKillsChildAfterPause SIGSTOPs a `fence run` for longer than its
// TTL. Meanwhile a second `fence run` gets the lock with a larger token. On
// SIGCONT the first one must kill its command at once and exit 76.
func TestFenceRunKillsChildAfterPause(t *testing.T) {
	n := newNode(t, "--lock-delay", "0", "--min-ttl", "500ms")
	n.start()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")

	first := fenceCmd(t, n, "run", "paused", "--ttl", "1s", "--", "sh", "-c", `echo $$ > "$PIDFILE"; exec sleep 60`)
	first.Env = append(os.Environ(), "PIDFILE="+pidFile)
	stderr, _ := first.StderrPipe()
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { syscall.Kill(first.Process.Pid, syscall.SIGKILL); first.Wait() }()
	firstToken := waitAcquired(t, bufio.NewScanner(stderr))
	var childPid int
	for deadline := time.Now().Add(10 * time.Second); childPid == 0; time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(pidFile); err == nil {
			childPid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if time.Now().After(deadline) {
			t.Fatal("child never started")
		}
	}
	defer syscall.Kill(childPid, syscall.SIGKILL)

	if err := syscall.Kill(first.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	second := fenceCmd(t, n, "run", "paused", "--ttl", "1s", "--wait", "20s", "--", "sh", "-c", "sleep 0.2")
	stderr2, _ := second.StderrPipe()
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	secondToken := waitAcquired(t, bufio.NewScanner(stderr2)) // only after the paused lease expired
	if secondToken <= firstToken {
		t.Fatalf("second holder token %d, paused holder had %d", secondToken, firstToken)
	}
	if err := syscall.Kill(first.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	err := first.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 76 {
		t.Fatalf("paused fence run exited with %v, want code 76 (lease lost)", err)
	}
	if err := syscall.Kill(childPid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the child (pid %d) is still alive after its lease was lost: %v", childPid, err)
	}
	if err := second.Wait(); err != nil {
		t.Fatalf("second fence run: %v", err)
	}
}

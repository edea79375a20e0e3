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
	rest       string // what the job logged after its token (its slot, its mode)
}

// readJobLog reads the log the jobs of a test appended to, a line
// "start|end NS TOKEN [REST]" as each began and ended, and returns the runs
// by start time, one per token.
func readJobLog(t *testing.T, log string) []*jobRun {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	byToken := map[uint64]*jobRun{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		var ns int64
		var tok uint64
		if len(f) < 3 {
			t.Fatalf("log line %q", line)
		}
		if _, err := fmt.Sscanf(f[1]+" "+f[2], "%d %d", &ns, &tok); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if byToken[tok] == nil {
			byToken[tok] = &jobRun{token: tok, rest: strings.Join(f[3:], " ")}
		}
		if f[0] == "start" {
			byToken[tok].start = ns
		} else {
			byToken[tok].end = ns
		}
	}
	var jobs []*jobRun
	for _, j := range byToken {
		if j.start == 0 || j.end == 0 {
			t.Fatalf("job with token %d did not log both its start and its end:\n%s", j.token, b)
		}
		jobs = append(jobs, j)
	}
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].start < jobs[j].start })
	return jobs
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
	jobs := readJobLog(t, log)
	if len(jobs) != runs {
		t.Fatalf("%d distinct tokens in %d runs", len(jobs), runs)
	}
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
	childPid := readPid(t, pidFile)
	defer syscall.Kill(childPid, syscall.SIGKILL)

	if err := syscall.Kill(first.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The second holder's own TTL is long: only the paused one's must run
	// out, and a 1 s lease can be lost on a loaded CI machine (renewals
	// slower than TTL/3 + grace), which is not what this test is about.
	second := fenceCmd(t, n, "run", "paused", "--ttl", "10s", "--wait", "20s", "--", "sh", "-c", "sleep 0.2")
	stderr2, _ := second.StderrPipe()
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	lines2 := bufio.NewScanner(stderr2)
	secondToken := waitAcquired(t, lines2) // only after the paused lease expired
	rest2 := keepLines(lines2)
	if secondToken <= firstToken {
		t.Fatalf("second holder token %d, paused holder had %d", secondToken, firstToken)
	}
	resumeKills(t, first, childPid)
	if err := second.Wait(); err != nil {
		t.Fatalf("second fence run: %v\n%s", err, rest2())
	}
}

// keepLines reads the rest of a process's output in the background (so its
// pipe never fills) and returns a function that gives what was read once the
// process has exited.
func keepLines(lines *bufio.Scanner) func() string {
	var b strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		for lines.Scan() {
			b.WriteString(lines.Text() + "\n")
		}
	}()
	return func() string {
		select {
		case <-done:
			return b.String()
		case <-time.After(5 * time.Second):
			return "(output still open)"
		}
	}
}

// readPid waits up to 10 s for a command to write its pid to pidFile.
func readPid(t *testing.T, pidFile string) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid != 0 {
				return pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the command never started")
		}
	}
}

// resumeKills sends SIGCONT to a paused fence run or elect whose lease
// expired meanwhile: it must kill its command (childPid) at once and exit
// 76 (lease lost).
func resumeKills(t *testing.T, paused *exec.Cmd, childPid int) {
	t.Helper()
	if err := syscall.Kill(paused.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	err := paused.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 76 {
		t.Fatalf("the paused process exited with %v, want code 76 (lease lost)", err)
	}
	if err := syscall.Kill(childPid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("its command (pid %d) is still alive after its lease was lost: %v", childPid, err)
	}
}

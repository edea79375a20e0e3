package e2e

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// clusterCmd builds a `fence` CLI process talking to every member of c.
func clusterCmd(t *testing.T, c *cluster, args ...string) *exec.Cmd {
	return exec.Command(fenceBinary(t), append(append([]string{"--server", strings.Join(c.addrs(), ",")}, cliTLS(t)...), args...)...)
}

// electCmd builds a `fence elect` CLI process talking to every member of c.
func electCmd(t *testing.T, c *cluster, args ...string) *exec.Cmd {
	return clusterCmd(t, c, append([]string{"elect"}, args...)...)
}

var electedRE = regexp.MustCompile(`elected leader of "[^"]+" with token (\d+)`)

// waitElected reads a `fence elect` stderr until it reports its term.
func waitElected(t *testing.T, stderr io.Reader) uint64 {
	t.Helper()
	lines := bufio.NewScanner(stderr)
	for lines.Scan() {
		if m := electedRE.FindStringSubmatch(lines.Text()); m != nil {
			tok, _ := strconv.ParseUint(m[1], 10, 64)
			go io.Copy(io.Discard, stderr) // keep the pipe drained
			return tok
		}
	}
	t.Fatal("fence elect ended without being elected")
	return 0
}

type observedLeader struct {
	Value string `json:"value"`
	Token uint64 `json:"token"`
}

// TestElectPausedLeaderIsReplaced: two `fence elect` processes on a 3-member
// cluster, an observer process following them. The leader is SIGSTOPped past
// its TTL: the other is elected with a larger token, and on SIGCONT the
// paused one kills its command at once and exits 76. Then the raft leader is
// killed and a third candidate is elected: the observer, whose watch moves
// to another member, reports the three leaders in token order, each once.
func TestElectPausedLeaderIsReplaced(t *testing.T) {
	c := newCluster(t, 3, "--lock-delay", "0", "--min-ttl", "500ms")
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")

	observer := electCmd(t, c, "svc", "--observe", "--json")
	obsOut, _ := observer.StdoutPipe()
	observer.Stderr = os.Stderr
	if err := observer.Start(); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(observer.Process.Pid, syscall.SIGKILL)
	observed := make(chan observedLeader, 16)
	go func() {
		lines := bufio.NewScanner(obsOut)
		for lines.Scan() {
			var l observedLeader
			if err := json.Unmarshal(lines.Bytes(), &l); err != nil {
				t.Errorf("observer printed %q: %v", lines.Text(), err)
			}
			observed <- l
		}
		close(observed)
	}()
	nextObserved := func(want string) observedLeader {
		t.Helper()
		select {
		case l, ok := <-observed:
			if !ok || l.Value != want {
				t.Fatalf("observer: got %+v (open %v), want the leader %q", l, ok, want)
			}
			return l
		case <-time.After(20 * time.Second):
			t.Fatalf("observer: no leader within 20s, want %q", want)
		}
		return observedLeader{}
	}

	first := electCmd(t, c, "svc", "--value", "first", "--ttl", "1s", "--", "sh", "-c", `echo $$ > "$PIDFILE"; exec sleep 60`)
	first.Env = append(os.Environ(), "PIDFILE="+pidFile)
	stderr1, _ := first.StderrPipe()
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { syscall.Kill(first.Process.Pid, syscall.SIGKILL); first.Wait() }()
	firstToken := waitElected(t, stderr1)
	childPid := readPid(t, pidFile)
	defer syscall.Kill(childPid, syscall.SIGKILL)
	if l := nextObserved("first"); l.Token != firstToken {
		t.Fatalf("observer: first leader's token %d, it was elected with %d", l.Token, firstToken)
	}

	if err := syscall.Kill(first.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	second := electCmd(t, c, "svc", "--value", "second", "--ttl", "10s", "--", "sh", "-c", "sleep 1")
	stderr2, _ := second.StderrPipe()
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { syscall.Kill(second.Process.Pid, syscall.SIGKILL); second.Wait() }()
	secondToken := waitElected(t, stderr2) // only after the paused leader's lease expired
	if secondToken <= firstToken {
		t.Fatalf("second leader's token %d, the paused one had %d", secondToken, firstToken)
	}
	if l := nextObserved("second"); l.Token != secondToken {
		t.Fatalf("observer: second leader's token %d, it was elected with %d", l.Token, secondToken)
	}
	resumeKills(t, first, childPid)
	if err := second.Wait(); err != nil {
		t.Fatalf("second fence elect: %v", err)
	}

	c.leader().kill()
	c.leader() // a new raft leader: a 1s lease would not outlive the election
	third := electCmd(t, c, "svc", "--value", "third", "--ttl", "5s", "--", "true")
	if out, err := third.CombinedOutput(); err != nil {
		t.Fatalf("third fence elect: %v\n%s", err, out)
	}
	if l := nextObserved("third"); l.Token <= secondToken {
		t.Fatalf("observer: third leader's token %d is not above the second's %d", l.Token, secondToken)
	}
	// Interrupted, the observer ends cleanly, having printed nothing more
	// (no leader twice, none from before).
	if err := observer.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for l := range observed {
		t.Errorf("observer printed another leader: %+v", l)
	}
	if err := observer.Wait(); err != nil {
		t.Fatalf("observer after SIGTERM: %v, want exit 0", err)
	}
}

// TestInterruptedWaiterLeavesTheLine: a `fence elect` still waiting for
// its turn, or a `fence run` waiting for its lock, is interrupted (SIGINT,
// as ^C). It must leave cleanly, exit 130: its lease revoked, so its place
// in the line is gone the moment it exits — not held for its TTL, when the
// holder's release would hand the lock to a waiter that is no longer there.
func TestInterruptedWaiterLeavesTheLine(t *testing.T) {
	for _, tt := range []struct {
		name           string
		holder, waiter []string
		won            func(*testing.T, io.Reader) uint64
	}{
		{"elect", []string{"elect", "svc", "--value", "leader", "--ttl", "1m", "--", "sleep", "60"},
			[]string{"elect", "svc", "--value", "candidate", "--ttl", "1m", "--", "true"}, waitElected},
		{"run", []string{"run", "svc", "--ttl", "1m", "--", "sleep", "60"},
			[]string{"run", "svc", "--ttl", "1m", "--wait", "1m", "--", "true"},
			func(t *testing.T, r io.Reader) uint64 { return waitAcquired(t, bufio.NewScanner(r)) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t, 1, "--lock-delay", "0")
			cl := c.dial()
			ctx := timeout(t, 60*time.Second)

			holder := clusterCmd(t, c, tt.holder...)
			stderr1, _ := holder.StderrPipe()
			if err := holder.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { syscall.Kill(holder.Process.Pid, syscall.SIGKILL); holder.Wait() }()
			tt.won(t, stderr1)
			go io.Copy(io.Discard, stderr1)

			waiter := clusterCmd(t, c, tt.waiter...)
			var waitErr strings.Builder
			waiter.Stderr = &waitErr
			if err := waiter.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { syscall.Kill(waiter.Process.Pid, syscall.SIGKILL) }()
			for {
				info, err := cl.Status(ctx, "svc")
				if err != nil {
					t.Fatal(err)
				}
				if info.Waiters == 1 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := waiter.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			err := waiter.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 130 {
				t.Errorf("interrupted waiter: %v (stderr %q), want exit code 130", err, waitErr.String())
			}
			info, err := cl.Status(ctx, "svc")
			if err != nil {
				t.Fatal(err)
			}
			if info.Waiters != 0 {
				t.Fatalf("after the interrupted waiter exited, svc still has %d waiter(s)", info.Waiters)
			}
			// One lease is left, the holder's: the waiter's was revoked as it
			// exited, not left to expire (a hand-off in that window would give
			// the lock to a process that is gone, for a TTL and a lock-delay).
			if n := activeLeases(t, c.nodes[0].metrics); n != 1 {
				t.Fatalf("after the interrupted waiter exited, %d live leases, want 1 (the holder's)", n)
			}
		})
	}
}

// activeLeases reads the fence_active_leases gauge of the member whose
// metrics listen at addr.
func activeLeases(t *testing.T, addr string) int {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: caPool(), ServerName: hostOf(addr)}}}
	resp, err := hc.Get("https://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		if v, ok := strings.CutPrefix(lines.Text(), "fence_active_leases "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(n)
		}
	}
	t.Fatal("no fence_active_leases in the metrics")
	return 0
}

package cli

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/clock/clocktest"
)

// fakeLease ends at deadline on a fake clock. Its Done never closes: it
// models the moment after a resume when the client's Go timers (which run on
// CLOCK_MONOTONIC) have not fired yet, so only fence run's own checks can
// notice. Each Err call is reported on checked.
type fakeLease struct {
	clk      *clocktest.Fake
	deadline time.Time
	jeopardy error
	checked  chan struct{}
}

func (l *fakeLease) Done() <-chan struct{} { return nil }
func (l *fakeLease) Deadline() time.Time   { return l.deadline }
func (l *fakeLease) Jeopardy() error       { return l.jeopardy }
func (l *fakeLease) Release(context.Context) error {
	return nil
}
func (l *fakeLease) ReleaseRan(context.Context) error {
	return nil
}
func (l *fakeLease) Err() error {
	select {
	case l.checked <- struct{}{}:
	default:
	}
	if !l.clk.Now().Before(l.deadline) {
		return client.ErrExpired
	}
	return nil
}

type sent struct {
	sig  syscall.Signal
	left time.Duration // lease time left on the fake clock when sent
}

// startWatch runs a long sleep in its own process group under a watch on
// lease; signals are recorded and then delivered for real.
func startWatch(t *testing.T, lease *fakeLease, grace time.Duration) (signals <-chan sent, result <-chan error) {
	t.Helper()
	child := exec.Command("sleep", "60")
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-child.Process.Pid, syscall.SIGKILL) })
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	sigs := make(chan sent, 8)
	w := &watch{clk: lease.clk, lease: lease, name: "job", prog: "sleep", grace: grace,
		signalGroup: func(sig syscall.Signal) {
			sigs <- sent{sig, lease.deadline.Sub(lease.clk.Now())}
			_ = syscall.Kill(-child.Process.Pid, sig)
		},
		exited: exited, sigs: make(chan os.Signal), logf: t.Logf}
	res := make(chan error, 1)
	go func() { res <- w.run(context.Background()) }()
	return sigs, res
}

// TestRunKillsChildAfterSuspend: the host sleeps past the lease deadline;
// on resume fence run kills the command at its next check.
func TestRunKillsChildAfterSuspend(t *testing.T) {
	clk := clocktest.New()
	lease := &fakeLease{clk: clk, deadline: clk.Now().Add(9 * time.Second), checked: make(chan struct{}, 1)}
	signals, result := startWatch(t, lease, 3*time.Second)
	clk.BlockUntilArmed(1) // the watch's check ticker
	clk.Suspend(time.Minute)
	err := <-result // no time bound: the test's own deadline catches a hang
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != ExitLeaseLost || !errors.Is(err, client.ErrExpired) {
		t.Fatalf("watch after a modeled suspend: %v, want exit %d wrapping ErrExpired", err, ExitLeaseLost)
	}
	if s := <-signals; s.sig != syscall.SIGKILL {
		t.Fatalf("first signal %v, want SIGKILL", s.sig)
	}
}

// TestRunTermsAtGraceOnTheLeaseClock: while renewals fail, SIGTERM goes out
// when grace is left before the deadline as the lease's clock counts it —
// not earlier, and not on another clock.
func TestRunTermsAtGraceOnTheLeaseClock(t *testing.T) {
	clk := clocktest.New()
	const grace = 3 * time.Second
	lease := &fakeLease{clk: clk, deadline: clk.Now().Add(10 * time.Second), jeopardy: errors.New("renewals failing"),
		checked: make(chan struct{}, 1)}
	signals, result := startWatch(t, lease, grace)
	clk.BlockUntilArmed(1) // the watch's check ticker
	var first sent
	for got := false; !got; {
		select { // drop a stale report
		case <-lease.checked:
		default:
		}
		clk.Advance(500 * time.Millisecond)
		select { // the watch checked the lease at the new time, or signalled
		case <-lease.checked:
		case first = <-signals:
			got = true
		}
	}
	if first.sig != syscall.SIGTERM || first.left > grace || first.left <= 0 {
		t.Fatalf("first signal %v with %v left, want SIGTERM with at most %v (and some) left", first.sig, first.left, grace)
	}
	var ee *exitError
	if err := <-result; !errors.As(err, &ee) || ee.code != ExitLeaseLost {
		t.Fatalf("watch: %v, want exit %d", err, ExitLeaseLost)
	}
}

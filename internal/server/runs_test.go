package server

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
)

// acquireOnce is acquire with a once-per window.
func (n *testNode) acquireOnce(lease []byte, name string, wait bool, window time.Duration) (*api.AcquireResponse, error) {
	return n.cli.Acquire(ctx(n.t), &api.AcquireRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: lease, Name: name, Wait: wait,
		LockDelay: durationpb.New(0), OncePer: durationpb.New(window)})
}

func (n *testNode) release(lease []byte, name string, recordRun bool) error {
	_, err := n.cli.Release(ctx(n.t), &api.ReleaseRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: lease, Name: name, RecordRun: recordRun})
	return err
}

// ranDetail returns the RanRecently detail of err, or nil.
func ranDetail(err error) *api.RanRecently {
	for _, d := range status.Convert(err).Details() {
		if r, ok := d.(*api.RanRecently); ok {
			return r
		}
	}
	return nil
}

// advance moves the fake clock in tick steps until the cluster's clock
// has moved by d, each tick committed before the next step.
func (n *testNode) advance(t *testing.T, d time.Duration) {
	t.Helper()
	step := DefaultConfig().TickInterval
	for end := n.logical() + d; n.logical() < end; {
		want := n.logical() + step
		n.clock.Advance(step)
		eventually(t, "tick logged", func() bool { return n.logical() >= want })
	}
}

// TestOncePerOverTheWire: a run recorded by a release with record_run
// refuses an Acquire with once_per inside the window with
// FAILED_PRECONDITION and a RanRecently detail saying when (the leader's
// wall clock), by whom and with which token; the window ends on the
// cluster's clock; a failed run (a plain release) records nothing.
func TestOncePerOverTheWire(t *testing.T) {
	n := startNode(t, nil)
	a, b := n.lease(time.Hour, "host-a"), n.lease(time.Hour, "host-b")
	const window = time.Second
	g, err := n.acquireOnce(a, "jobs/nightly", false, window)
	if err != nil {
		t.Fatal(err)
	}
	finished := n.clock.Now()
	if err := n.release(a, "jobs/nightly", true); err != nil {
		t.Fatal(err)
	}
	_, err = n.acquireOnce(b, "jobs/nightly", false, window)
	d := ranDetail(err)
	if code(err) != codes.FailedPrecondition || d == nil {
		t.Fatalf("got %v, want FailedPrecondition with RanRecently", err)
	}
	if d.Name != "jobs/nightly" || d.Token != g.Token || d.LeaseNumber != 1 || d.Owner != "host-a" ||
		!d.FinishedAt.AsTime().Equal(finished) || d.Window.AsDuration() != window || d.Ago.AsDuration() != 0 {
		t.Fatalf("detail %v; want token %d, lease #1, host-a, finished at %v, window 1s, ago 0s", d, g.Token, finished)
	}
	msg := status.Convert(err).Message()
	for _, want := range []string{"ran at " + finished.UTC().Format(time.RFC3339), `by lease #1 (owner "host-a")`, "token 1"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("message %q lacks %q", msg, want)
		}
	}
	// A waiting Acquire is refused the same way, at once.
	if _, err := n.acquireOnce(b, "jobs/nightly", true, window); ranDetail(err) == nil {
		t.Fatalf("waiting acquire: %v, want RanRecently", err)
	}
	// Without once_per, the record does not matter.
	if _, err := n.acquire(b, "jobs/nightly", false); err != nil {
		t.Fatal(err)
	}
	if err := n.release(b, "jobs/nightly", false); err != nil {
		t.Fatal(err)
	}
	// The window passes on the cluster's clock: b runs, fails (a plain
	// release), and a runs again.
	n.advance(t, window)
	if _, err := n.acquireOnce(b, "jobs/nightly", false, window); err != nil {
		t.Fatalf("after the window: %v", err)
	}
	if err := n.release(b, "jobs/nightly", false); err != nil {
		t.Fatal(err)
	}
	if _, err := n.acquireOnce(a, "jobs/nightly", false, window); err != nil {
		t.Fatalf("after a failed run: %v", err)
	}
}

// TestOncePerWaiterRefusedAtItsTurn: a host waiting with once_per while
// another runs the job is answered RanRecently when that run is recorded,
// and does not get the lock.
func TestOncePerWaiterRefusedAtItsTurn(t *testing.T) {
	n := startNode(t, nil)
	a, b := n.lease(time.Hour, "host-a"), n.lease(time.Hour, "host-b")
	if _, err := n.acquireOnce(a, "jobs/nightly", false, time.Hour); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := n.acquireOnce(b, "jobs/nightly", true, time.Hour); done <- err }()
	eventually(t, "b waits", func() bool { return n.getLock("jobs/nightly").Waiters == 1 })
	if err := n.release(a, "jobs/nightly", true); err != nil {
		t.Fatal(err)
	}
	err := <-done
	if d := ranDetail(err); code(err) != codes.FailedPrecondition || d == nil || d.Owner != "host-a" || d.Token != 1 {
		t.Fatalf("waiter got %v (detail %v), want FailedPrecondition with host-a's run, token 1", err, d)
	}
	if l := n.getLock("jobs/nightly"); l.HolderLeaseNumber != 0 || l.Waiters != 0 {
		t.Fatalf("lock after the run: %v", l)
	}
}

// TestOncePerSurvivesRestart: a recorded run (a version-4 log entry, and a
// version-5 snapshot) is still there after a restart from the log alone and
// from a snapshot, with the same details.
func TestOncePerSurvivesRestart(t *testing.T) {
	logAndSnapshot(t, func(t *testing.T, snap bool) {
		n := startNode(t, nil)
		a := n.lease(time.Hour, "host-a")
		if _, err := n.acquireOnce(a, "jobs/nightly", false, time.Hour); err != nil {
			t.Fatal(err)
		}
		finished := n.clock.Now()
		if err := n.release(a, "jobs/nightly", true); err != nil {
			t.Fatal(err)
		}
		if snap {
			if err := n.srv.Snapshot(); err != nil {
				t.Fatal(err)
			}
		}
		before := n.state()
		if before[0] != 5 {
			t.Fatalf("snapshot version %d, want 5 (a recorded run)", before[0])
		}
		n.restart()
		if after := n.state(); after != before {
			t.Fatal("state after restart differs")
		}
		_, err := n.acquireOnce(n.lease(time.Hour, "host-b"), "jobs/nightly", false, time.Hour)
		if d := ranDetail(err); d == nil || d.Token != 1 || d.Owner != "host-a" || !d.FinishedAt.AsTime().Equal(finished) {
			t.Fatalf("after restart: %v (detail %v)", err, d)
		}
	})
}

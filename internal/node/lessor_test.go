package node

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/fencehq/fence/internal/clock/clocktest"
	"github.com/fencehq/fence/internal/fsm"
)

func applyAll(t *testing.T, s *fsm.State, cmds ...fsm.Command) {
	t.Helper()
	for i := range cmds {
		if r := s.Apply(&cmds[i]); r.Code != fsm.OK && r.Code != fsm.Queued {
			t.Fatalf("%v: %v %s", cmds[i].Kind, r.Code, r.Reason)
		}
	}
}

func tick(d time.Duration) fsm.Command { return fsm.Command{Kind: fsm.KindTick, Elapsed: d} }

func newTestLessor(c *clocktest.Fake) *lessor {
	noop := func(_ context.Context, cmds []fsm.Command) []proposalResult { return make([]proposalResult, len(cmds)) }
	return newLessor(c, 100*time.Millisecond, noop, discard)
}

// TestTakeoverDeadlines: a new leader credits each lease with the time logged
// since its last renewal, minus the slack, never more.
func TestTakeoverDeadlines(t *testing.T) {
	s := fsm.New()
	l1, l2, l3 := fsm.LeaseID{1}, fsm.LeaseID{2}, fsm.LeaseID{3}
	applyAll(t, s,
		fsm.Command{Kind: fsm.KindCreateLease, RequestID: fsm.RequestID{1}, Lease: l1, TTL: 10 * time.Second},
		fsm.Command{Kind: fsm.KindCreateLease, RequestID: fsm.RequestID{2}, Lease: l2, TTL: 10 * time.Second},
		fsm.Command{Kind: fsm.KindCreateLease, RequestID: fsm.RequestID{3}, Lease: l3, TTL: time.Second},
		fsm.Command{Kind: fsm.KindAcquire, RequestID: fsm.RequestID{4}, Lease: l1, Seq: 1, Ack: 1, Name: "d", LockDelay: 5 * time.Second},
		tick(3*time.Second),
		fsm.Command{Kind: fsm.KindRenew, Lease: l2},
		tick(2*time.Second),
		fsm.Command{Kind: fsm.KindExpire, Lease: l1}, // lock "d" enters its 5s lock-delay at logical 5s
		tick(time.Second),
	)
	c := clocktest.New()
	ls := newTestLessor(c)
	ls.activate(s)
	now := c.Now()
	// The slack is two capped ticks of 2 × 100 ms: 400 ms. Literals, so that
	// a wrong slack (0: a new leader could expire leases early) fails here.
	for _, tt := range []struct {
		id   fsm.LeaseID
		want time.Duration
	}{
		{l2, 7400 * time.Millisecond}, // TTL 10 s, renewed 3 s (logged) ago, + 400 ms slack
		{l3, 0},                       // 6 s logged against a 1 s TTL: due now
	} {
		d, ok := ls.deadline(tt.id)
		if !ok || d.Sub(now) != tt.want {
			t.Errorf("lease %v: deadline in %v, want %v", tt.id, d.Sub(now), tt.want)
		}
	}
	if _, ok := ls.deadline(l1); ok {
		t.Error("expired lease tracked")
	}
	if got, want := ls.delays["d"].at.Sub(now), 4400*time.Millisecond; got != want { // 5 s delay, 1 s logged, + 400 ms slack
		t.Errorf("lock-delay ends in %v, want %v", got, want)
	}
}

// TestDueCommands: the leader proposes a capped tick, an expire with the
// renewal count it judged, and nothing for a lease renewed meanwhile.
func TestDueCommands(t *testing.T) {
	s := fsm.New()
	a, b := fsm.LeaseID{1}, fsm.LeaseID{2}
	applyAll(t, s,
		fsm.Command{Kind: fsm.KindCreateLease, RequestID: fsm.RequestID{1}, Lease: a, TTL: time.Second},
		fsm.Command{Kind: fsm.KindCreateLease, RequestID: fsm.RequestID{2}, Lease: b, TTL: time.Second},
		fsm.Command{Kind: fsm.KindRenew, Lease: a})
	c := clocktest.New()
	ls := newTestLessor(c)
	ls.activate(s)
	c.Advance(900 * time.Millisecond)
	ls.applied([]fsm.Result{{Events: []fsm.Event{{Kind: fsm.LeaseRenewed, Lease: b, TTL: time.Second, Renewals: 1}}}}) // b renewed at 0.9s
	c.Advance(200 * time.Millisecond)                                                                                  // 1.1s: a is due, b is not
	tk, cmds := ls.due(true)
	if tk == nil || tk.Elapsed != 200*time.Millisecond { // capped at 2 ticks
		t.Fatalf("want a capped tick of 200ms, got %+v", tk)
	}
	if len(cmds) != 1 || cmds[0].Kind != fsm.KindExpire || cmds[0].Lease != a || cmds[0].Renewals != 1 {
		t.Fatalf("want one expire of a with 1 renewal, got %+v", cmds)
	}
	c.Advance(50 * time.Millisecond)
	if tk, cmds := ls.due(true); tk == nil || tk.Elapsed != 50*time.Millisecond || len(cmds) != 0 {
		t.Fatalf("before the retry is due: %+v %+v", tk, cmds)
	}
	c.Advance(100 * time.Millisecond)
	if _, cmds := ls.due(false); len(cmds) != 0 {
		t.Fatalf("duties while the last ones are in flight: %+v", cmds)
	}
	if _, cmds := ls.due(true); len(cmds) != 1 || cmds[0].Lease != a {
		t.Fatalf("the expire is not retried after a tick: %+v", cmds)
	}
	ls.deactivate()
	if tk, cmds := ls.due(true); tk != nil || cmds != nil {
		t.Fatalf("a node that is not leading proposed %+v %+v", tk, cmds)
	}
}

// TestSuspendedLeaderExpires: the lessor's deadlines are on the clock that
// counts a host suspend (CLOCK_BOOTTIME for the real clock): a leader whose
// host slept through a lease's deadline expires it at its first tick after
// resuming, without waiting a TTL more on a clock that stood still.
func TestSuspendedLeaderExpires(t *testing.T) {
	s := fsm.New()
	a := fsm.LeaseID{1}
	applyAll(t, s, fsm.Command{Kind: fsm.KindCreateLease, RequestID: fsm.RequestID{1}, Lease: a, TTL: 10 * time.Second})
	c := clocktest.New()
	ls := newTestLessor(c)
	ls.activate(s)
	c.Advance(time.Second)
	if _, cmds := ls.due(true); len(cmds) != 0 {
		t.Fatalf("expired before its deadline: %+v", cmds)
	}
	c.Suspend(time.Minute)
	if _, cmds := ls.due(true); len(cmds) != 1 || cmds[0].Kind != fsm.KindExpire || cmds[0].Lease != a {
		t.Fatalf("after a suspend past the deadline: %+v, want the expire", cmds)
	}
}

// TestSlowDutiesDoNotSlowTheClock: an expiry storm whose commits stall
// (a slow disk, a loaded leader) must not hold the logical clock back.
// Before, a tick waited for its tick's Expire proposals (up to 10 ticks + 1 s),
// so the logical clock advanced 200 ms per such wait and property (c) of
// docs/design.md grew with commit latency. It also proposes the storm as
// one batch, not one goroutine per lease.
func TestSlowDutiesDoNotSlowTheClock(t *testing.T) {
	s := fsm.New()
	const storm = 5000
	for i := range storm {
		var id fsm.LeaseID
		binary.LittleEndian.PutUint64(id[:], uint64(i)+1)
		applyAll(t, s, fsm.Command{Kind: fsm.KindCreateLease, RequestID: fsm.RequestID(id), Lease: id, TTL: time.Second})
	}
	c := clocktest.New()
	release := make(chan struct{}) // the duties' commit, held back until the test lets it go
	var (
		ticks   = make(chan time.Duration, 100)
		batches = make(chan int, 10)
	)
	propose := func(ctx context.Context, cmds []fsm.Command) []proposalResult {
		if cmds[0].Kind == fsm.KindTick {
			ticks <- cmds[0].Elapsed
			return make([]proposalResult, len(cmds))
		}
		batches <- len(cmds)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return make([]proposalResult, len(cmds))
	}
	ls := newLessor(c, 100*time.Millisecond, propose, discard)
	ls.activate(s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.Advance(time.Second) // every lease is due
	var logged time.Duration
	for range 20 { // 2 s of ticks while the storm's commit stalls
		ls.step(ctx)
		logged += <-ticks
		c.Advance(100 * time.Millisecond)
	}
	close(release)
	if got := <-batches; got != storm {
		t.Fatalf("the storm went to raft as a batch of %d, want all %d at once", got, storm)
	}
	if len(batches) != 0 {
		t.Fatalf("%d more duty batches while the first was in flight", len(batches))
	}
	// 20 ticks 100 ms apart, the first 200 ms after the 1 s advance: 2.1 s logged.
	if logged != 2100*time.Millisecond {
		t.Fatalf("logical clock advanced %v over 20 ticks (2.1 s) while the duties stalled", logged)
	}
}

// BenchmarkLessorActivate measures a new leader's takeover of 1,000,000
// live leases (the lessor builds a deadline for each while the state is
// locked). Run it alone:
//
//	go test ./internal/server -run XXX -bench LessorActivate -benchtime 3x
func BenchmarkLessorActivate(b *testing.B) {
	s := fsm.New()
	for j := range 1_000_000 {
		var lid fsm.LeaseID
		binary.LittleEndian.PutUint64(lid[:], uint64(j)+1)
		binary.LittleEndian.PutUint64(lid[8:], uint64(j)*0x9e3779b97f4a7c15)
		c := fsm.Command{Kind: fsm.KindCreateLease, RequestID: fsm.RequestID(lid), Lease: lid, TTL: 30 * time.Second}
		if r := s.Apply(&c); r.Code != fsm.OK {
			b.Fatal(r.Code, r.Reason)
		}
	}
	ls := newTestLessor(clocktest.New())
	b.ResetTimer()
	for range b.N {
		ls.activate(s)
	}
	b.StopTimer()
	if len(ls.leases) != 1_000_000 || len(ls.expiry) != 1_000_000 {
		b.Fatalf("tracked %d leases, %d deadlines", len(ls.leases), len(ls.expiry))
	}
}

package server

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
	noop := func(context.Context, fsm.Command) (fsm.Result, error) { return fsm.Result{}, nil }
	return newLessor(c, 100*time.Millisecond, noop, testLogger())
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
		fsm.Command{Kind: fsm.KindAcquire, RequestID: fsm.RequestID{4}, Lease: l1, Seq: 1, Name: "d", LockDelay: 5 * time.Second},
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
	ls.event(&fsm.Event{Kind: fsm.LeaseRenewed, Lease: b, TTL: time.Second, Renewals: 1}) // b renewed at 0.9s
	c.Advance(200 * time.Millisecond)                                                     // 1.1s: a is due, b is not
	cmds := ls.due()
	if len(cmds) != 2 || cmds[0].Kind != fsm.KindTick || cmds[0].Elapsed != 200*time.Millisecond { // capped at 2 ticks
		t.Fatalf("want a capped tick then one expire, got %+v", cmds)
	}
	if e := cmds[1]; e.Kind != fsm.KindExpire || e.Lease != a || e.Renewals != 1 {
		t.Fatalf("expire: %+v", e)
	}
	c.Advance(50 * time.Millisecond)
	if cmds := ls.due(); len(cmds) != 1 || cmds[0].Kind != fsm.KindTick || cmds[0].Elapsed != 50*time.Millisecond {
		t.Fatalf("before the retry is due: %+v", cmds)
	}
	ls.deactivate()
	if cmds := ls.due(); cmds != nil {
		t.Fatalf("a node that is not leading proposed %+v", cmds)
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

package node

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
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
	return newLessor(c, 100*time.Millisecond, noop, nil, discard)
}

// takeOver activates ls on s and runs its takeover build to the end, as
// the builder does when no entry applies meanwhile.
func takeOver(ls *lessor, s *fsm.State) {
	ls.activate(s)
	for ls.buildSome(s, buildChunk) {
	}
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
	takeOver(ls, s)
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
	if got, want := ls.delays[delayKey{"d", 1}].Sub(now), 4400*time.Millisecond; got != want { // 5 s delay, 1 s logged, + 400 ms slack
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
	takeOver(ls, s)
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
	takeOver(ls, s)
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
	ls := newLessor(c, 100*time.Millisecond, propose, nil, discard)
	takeOver(ls, s)
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
// live leases up to the moment it serves (activate: it lists the leases
// for the background build; before the lazy takeover it built every
// deadline here, with the state locked). Run it alone:
//
//	go test ./internal/node -run XXX -bench LessorActivate -benchtime 3x -count 3
func BenchmarkLessorActivate(b *testing.B) {
	s := millionish(b, 1_000_000)
	ls := newTestLessor(clocktest.New())
	b.ResetTimer()
	for range b.N {
		ls.activate(s)
	}
	b.StopTimer()
	if ls.build == nil || len(ls.build.ids) != 1_000_000 {
		b.Fatal("the takeover build does not list the million leases")
	}
}

// BenchmarkLessorBuild measures the whole takeover of 1,000,000 live
// leases: activate, then the background build, chunk by chunk, to the end
// (the work that used to delay the new leader's first grant). It reports
// the heap the lessor keeps after the build (lessor-MiB: live heap after a
// collection, above the state's) and how long a full collection takes
// with the lessor's tables live (gc-ms: the mark work they add).
//
//	go test ./internal/node -run XXX -bench LessorBuild -benchtime 3x -count 3
func BenchmarkLessorBuild(b *testing.B) {
	s := millionish(b, 1_000_000)
	ls := newTestLessor(clocktest.New())
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for range b.N {
		takeOver(ls, s)
	}
	b.StopTimer()
	if len(ls.leases) != 1_000_000 || len(ls.expiry) != 1_000_000 {
		b.Fatalf("tracked %d leases, %d deadlines", len(ls.leases), len(ls.expiry))
	}
	runtime.GC()
	t0 := time.Now()
	runtime.GC()
	gc := time.Since(t0)
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "lessor-MiB")
	b.ReportMetric(float64(gc.Microseconds())/1000, "gc-ms")
	runtime.KeepAlive(s)
	runtime.KeepAlive(ls)
}

// TestTakeoverSemaphoreDelays: a new leader schedules the end of every
// permit's lock-delay, each by its own token (one per lock would leave a
// permit delayed for ever).
func TestTakeoverSemaphoreDelays(t *testing.T) {
	s := fsm.New()
	l1, l2 := fsm.LeaseID{1}, fsm.LeaseID{2}
	applyAll(t, s,
		fsm.Command{Kind: fsm.KindCreateLease, RequestID: fsm.RequestID{1}, Lease: l1, TTL: time.Second},
		fsm.Command{Kind: fsm.KindCreateLease, RequestID: fsm.RequestID{2}, Lease: l2, TTL: time.Second},
		fsm.Command{Kind: fsm.KindAcquire, RequestID: fsm.RequestID{3}, Lease: l1, Seq: 1, Ack: 1, Name: "s", Permits: 2, LockDelay: 5 * time.Second},
		fsm.Command{Kind: fsm.KindAcquire, RequestID: fsm.RequestID{4}, Lease: l2, Seq: 1, Ack: 1, Name: "s", Permits: 2, LockDelay: 3 * time.Second},
		fsm.Command{Kind: fsm.KindExpire, Lease: l1},
		fsm.Command{Kind: fsm.KindExpire, Lease: l2},
	)
	c := clocktest.New()
	ls := newTestLessor(c)
	takeOver(ls, s)
	now := c.Now()
	if got := ls.delays[delayKey{"s", 1}].Sub(now); got != 5*time.Second {
		t.Errorf("permit of token 1: delay ends in %v, want 5s", got)
	}
	if got := ls.delays[delayKey{"s", 2}].Sub(now); got != 3*time.Second {
		t.Errorf("permit of token 2: delay ends in %v, want 3s", got)
	}
}

// TestDueGrantNextPerPermit: each delayed grant gets its own GrantNext
// when its delay is over, in (lock, token) order, so every replica's log
// reads the same; a delay not yet over waits.
func TestDueGrantNextPerPermit(t *testing.T) {
	c := clocktest.New()
	ls := newTestLessor(c)
	ls.activate(fsm.New())
	ls.applied([]fsm.Result{{Events: []fsm.Event{
		{Kind: fsm.DelayStarted, Name: "s", Delay: time.Second, Token: 9},
		{Kind: fsm.DelayStarted, Name: "s", Delay: time.Second, Token: 4},
		{Kind: fsm.DelayStarted, Name: "r", Delay: time.Second, Token: 7},
		{Kind: fsm.DelayStarted, Name: "s", Delay: 3 * time.Second, Token: 5},
	}}})
	c.Advance(time.Second)
	_, cmds := ls.due(true)
	var got []string
	for _, cmd := range cmds {
		got = append(got, fmt.Sprintf("%v %s %d", cmd.Kind, cmd.Name, cmd.Token))
	}
	if want := []string{"grant-next r 7", "grant-next s 4", "grant-next s 9"}; !slices.Equal(got, want) {
		t.Fatalf("due: %v, want %v", got, want)
	}
	if len(ls.delays) != 1 {
		t.Fatalf("delays left: %v, want s's token 5 only", ls.delays)
	}
}

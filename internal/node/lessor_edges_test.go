package node

import (
	"go.uber.org/goleak"

	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencehq/fence/internal/clock/clocktest"
	"github.com/fencehq/fence/internal/fsm"
)

// The lessor's edges on the fake clock, with literal expectations: a lease
// is expired exactly at its deadline and not a nanosecond before, a renewal
// never moves a deadline earlier, a lock-delay ends exactly when it says,
// and the clock is ticked only when something needs it.

func oneLease(t *testing.T, ttl time.Duration) (*fsm.State, fsm.LeaseID) {
	t.Helper()
	s := fsm.New()
	a := fsm.LeaseID{1}
	applyAll(t, s, fsm.Command{Kind: fsm.KindCreateLease, RequestID: fsm.RequestID{1}, Lease: a, TTL: ttl})
	return s, a
}

// TestLessorExpiresExactlyAtDeadline: a lease with a 1 s TTL, not renewed, is
// expired by the tick at 1 s (with its renewal count), not by one at 1 s − 1 ns.
func TestLessorExpiresExactlyAtDeadline(t *testing.T) {
	s, a := oneLease(t, time.Second)
	c := clocktest.New()
	ls := newTestLessor(c)
	takeOver(ls, s)
	start := c.Now()
	if d, ok := ls.deadline(a); !ok || d.Sub(start) != time.Second {
		t.Fatalf("deadline %v after takeover, want 1s", d.Sub(start))
	}
	c.Advance(time.Second - time.Nanosecond)
	if _, cmds := ls.due(true); len(cmds) != 0 {
		t.Fatalf("1ns before the deadline: %+v", cmds)
	}
	c.Advance(time.Nanosecond)
	if _, cmds := ls.due(true); len(cmds) != 1 || cmds[0].Kind != fsm.KindExpire || cmds[0].Lease != a || cmds[0].Renewals != 0 {
		t.Fatalf("at the deadline: %+v, want the expire of the lease", cmds)
	}
	// Not committed yet: looked at again one tick (100 ms) later, not sooner.
	c.Advance(100*time.Millisecond - time.Nanosecond)
	if _, cmds := ls.due(true); len(cmds) != 0 {
		t.Fatalf("retried before a tick passed: %+v", cmds)
	}
	c.Advance(time.Nanosecond)
	if _, cmds := ls.due(true); len(cmds) != 1 || cmds[0].Lease != a {
		t.Fatalf("not retried after a tick: %+v", cmds)
	}
	// The expire committed: the lease is gone and nothing is proposed for it.
	ls.applied([]fsm.Result{{Events: []fsm.Event{{Kind: fsm.LeaseEnded, Lease: a}}}})
	if _, ok := ls.deadline(a); ok {
		t.Fatal("ended lease still tracked")
	}
	c.Advance(time.Second)
	if tk, cmds := ls.due(true); tk != nil || len(cmds) != 0 {
		t.Fatalf("after the lease ended: tick %+v, duties %+v", tk, cmds)
	}
}

// TestLessorRenewalNeverShortensDeadline: a renewal applied with a shorter TTL
// than the time already promised leaves the deadline where it was; a
// renewal that promises more moves it, and the expire carries the count.
func TestLessorRenewalNeverShortensDeadline(t *testing.T) {
	s, a := oneLease(t, 10*time.Second)
	c := clocktest.New()
	ls := newTestLessor(c)
	takeOver(ls, s)
	start := c.Now()
	c.Advance(time.Second)
	ls.applied([]fsm.Result{{Events: []fsm.Event{{Kind: fsm.LeaseRenewed, Lease: a, TTL: 2 * time.Second, Renewals: 1}}}})
	if d, _ := ls.deadline(a); d.Sub(start) != 10*time.Second {
		t.Fatalf("a 2s renewal at 1s moved the deadline to %v, want it kept at 10s", d.Sub(start))
	}
	c.Advance(time.Second)
	ls.applied([]fsm.Result{{Events: []fsm.Event{{Kind: fsm.LeaseRenewed, Lease: a, TTL: 10 * time.Second, Renewals: 2}}}})
	if d, _ := ls.deadline(a); d.Sub(start) != 12*time.Second {
		t.Fatalf("a 10s renewal at 2s: deadline %v, want 12s", d.Sub(start))
	}
	c.Advance(10 * time.Second) // 12 s
	if _, cmds := ls.due(true); len(cmds) != 1 || cmds[0].Renewals != 2 {
		t.Fatalf("at 12s: %+v, want an expire judged at 2 renewals", cmds)
	}
}

// TestLessorTracksNewLease: a lease started while leading is tracked from the
// time its creation applied, for its TTL.
func TestLessorTracksNewLease(t *testing.T) {
	c := clocktest.New()
	ls := newTestLessor(c)
	ls.activate(fsm.New())
	c.Advance(time.Second)
	b := fsm.LeaseID{2}
	ls.applied([]fsm.Result{{}, {Events: []fsm.Event{{Kind: fsm.Granted}, {Kind: fsm.LeaseStarted, Lease: b, TTL: 3 * time.Second}}}})
	if d, ok := ls.deadline(b); !ok || !d.Equal(c.Now().Add(3*time.Second)) {
		t.Fatalf("new lease: deadline %v (tracked %v), want 3s from now", d.Sub(c.Now()), ok)
	}
	ls.deactivate()
	ls.applied([]fsm.Result{{Events: []fsm.Event{{Kind: fsm.LeaseStarted, Lease: fsm.LeaseID{3}, TTL: 3 * time.Second}}}})
	if _, ok := ls.deadline(fsm.LeaseID{3}); ok {
		t.Fatal("a node that is not leading tracks leases")
	}
}

// TestLessorLockDelayEndsExactly: a lock-delay of 5 s that began at t ends with a
// GrantNext (carrying the grant's token) at t + 5 s, not a nanosecond before.
func TestLessorLockDelayEndsExactly(t *testing.T) {
	c := clocktest.New()
	ls := newTestLessor(c)
	ls.activate(fsm.New())
	ls.applied([]fsm.Result{{Events: []fsm.Event{{Kind: fsm.DelayStarted, Name: "d", Delay: 5 * time.Second, Token: 7}}}})
	c.Advance(5*time.Second - time.Nanosecond)
	if _, cmds := ls.due(true); len(cmds) != 0 {
		t.Fatalf("1ns before the delay ends: %+v", cmds)
	}
	c.Advance(time.Nanosecond)
	_, cmds := ls.due(true)
	if len(cmds) != 1 || cmds[0].Kind != fsm.KindGrantNext || cmds[0].Name != "d" || cmds[0].Token != 7 {
		t.Fatalf("when the delay ends: %+v, want GrantNext d token 7", cmds)
	}
	if _, cmds := ls.due(true); len(cmds) != 0 {
		t.Fatalf("GrantNext proposed twice: %+v", cmds)
	}
}

// TestLessorTicksOnlyWhenNeeded: with no lease and no lock-delay there is nothing
// to time, so no tick; with one, a tick logs the time since the last one,
// and no time passed means no tick.
func TestLessorTicksOnlyWhenNeeded(t *testing.T) {
	c := clocktest.New()
	ls := newTestLessor(c)
	ls.activate(fsm.New())
	c.Advance(50 * time.Millisecond)
	if tk, _ := ls.due(true); tk != nil {
		t.Fatalf("tick with nothing to time: %+v", tk)
	}
	ls.applied([]fsm.Result{{Events: []fsm.Event{{Kind: fsm.DelayStarted, Name: "d", Delay: time.Minute, Token: 1}}}})
	c.Advance(30 * time.Millisecond)
	if tk, _ := ls.due(true); tk == nil || tk.Kind != fsm.KindTick || tk.Elapsed != 30*time.Millisecond {
		t.Fatalf("tick with a lock-delay: %+v, want 30ms", tk)
	}
	if tk, _ := ls.due(true); tk != nil {
		t.Fatalf("tick with no time passed: %+v", tk)
	}
	s, _ := oneLease(t, time.Minute)
	takeOver(ls, s)
	c.Advance(70 * time.Millisecond)
	if tk, _ := ls.due(false); tk == nil || tk.Elapsed != 70*time.Millisecond {
		t.Fatalf("tick with a lease: %+v, want 70ms", tk)
	}
}

// TestLessorRetriesFailedGrantNext: a GrantNext that does not commit is proposed
// again at the next tick (else the lock would stay in its delay); an
// Expire that does not commit comes back from due, not from perform.
func TestLessorRetriesFailedGrantNext(t *testing.T) {
	c := clocktest.New()
	fail := errors.New("not committed")
	var proposed [][]fsm.Command
	propose := func(_ context.Context, cmds []fsm.Command) []proposalResult {
		proposed = append(proposed, cmds)
		out := make([]proposalResult, len(cmds))
		for i := range out {
			out[i].err = fail
		}
		return out
	}
	ls := newLessor(c, 100*time.Millisecond, propose, nil, discard)
	ls.activate(fsm.New())
	ls.perform(context.Background(), []fsm.Command{
		{Kind: fsm.KindGrantNext, Name: "d", Token: 3},
		{Kind: fsm.KindExpire, Lease: fsm.LeaseID{1}},
	})
	_, cmds := ls.due(true)
	if len(cmds) != 1 || cmds[0].Kind != fsm.KindGrantNext || cmds[0].Name != "d" || cmds[0].Token != 3 {
		t.Fatalf("after a failed GrantNext: %+v, want it again", cmds)
	}
	// A newer lock-delay of the same lock began meanwhile (another permit
	// of a semaphore, or a later grant): the failed GrantNext of the older
	// grant is retried beside it and does not replace it.
	ls.applied([]fsm.Result{{Events: []fsm.Event{{Kind: fsm.DelayStarted, Name: "d", Delay: time.Minute, Token: 5}}}})
	ls.perform(context.Background(), []fsm.Command{{Kind: fsm.KindGrantNext, Name: "d", Token: 3}})
	if at, ok := ls.delays[delayKey{"d", 5}]; !ok || at.Sub(c.Now()) != time.Minute || len(ls.delays) != 2 {
		t.Fatalf("delays of d after a GrantNext of token 3 failed: %+v, want token 5 in 1m and token 3 again", ls.delays)
	}
	if at := ls.delays[delayKey{"d", 3}]; at != c.Now() {
		t.Fatalf("the failed GrantNext of token 3 is retried at %v, want now", at)
	}
	ls.deactivate()
	ls.perform(context.Background(), []fsm.Command{{Kind: fsm.KindGrantNext, Name: "e", Token: 4}})
	if len(ls.delays) != 0 {
		t.Fatalf("a node that is not leading keeps delays: %+v", ls.delays)
	}
	if len(proposed) != 3 {
		t.Fatalf("%d proposals, want 3", len(proposed))
	}
}

// TestLessorDutiesGetTimeToCommit: a batch of duties may take up to ten
// ticks plus a second (2 s at a 100 ms tick) to commit before it is given up
// and retried; a bound of zero would fail every Expire before raft saw it,
// and no unrenewed lease would ever end. The bound is real time (raft's), so
// the test reads the context's deadline rather than waiting for it.
func TestLessorDutiesGetTimeToCommit(t *testing.T) {
	var left time.Duration
	propose := func(ctx context.Context, cmds []fsm.Command) []proposalResult {
		if dl, ok := ctx.Deadline(); ok {
			left = time.Until(dl)
		}
		return make([]proposalResult, len(cmds))
	}
	ls := newLessor(clocktest.New(), 100*time.Millisecond, propose, nil, discard)
	ls.perform(context.Background(), []fsm.Command{{Kind: fsm.KindExpire, Lease: fsm.LeaseID{1}}})
	if left <= time.Second || left > 2*time.Second {
		t.Fatalf("duties may take %v to commit, want 2s (10 ticks + 1s)", left)
	}
}

// lines is a slog handler that keeps each record's message.
type lines struct {
	mu  sync.Mutex
	msg []string
}

func (h *lines) Enabled(context.Context, slog.Level) bool { return true }
func (h *lines) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.msg = append(h.msg, r.Message)
	h.mu.Unlock()
	return nil
}
func (h *lines) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *lines) WithGroup(string) slog.Handler      { return h }

func (h *lines) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.msg {
		if m == msg {
			n++
		}
	}
	return n
}

// TestLessorLogsBounded: an expiry storm logs one line per lease for the
// first 100 and then one count, not a line per lease; 100 expiries log 100
// lines and no count. A tick that does not commit logs a warning; one that
// commits logs nothing.
func TestLessorLogsBounded(t *testing.T) {
	for _, tc := range []struct{ expires, lines, counts int }{{100, 100, 0}, {101, 100, 1}} {
		h := &lines{}
		ok := func(_ context.Context, cmds []fsm.Command) []proposalResult { return make([]proposalResult, len(cmds)) }
		ls := newLessor(clocktest.New(), 100*time.Millisecond, ok, nil, slog.New(h))
		cmds := make([]fsm.Command, tc.expires)
		for i := range cmds {
			cmds[i] = fsm.Command{Kind: fsm.KindExpire, Lease: fsm.LeaseID{byte(i), 1}}
		}
		ls.perform(context.Background(), cmds)
		if got, counts := h.count("lease expired"), h.count("leases expired"); got != tc.lines || counts != tc.counts {
			t.Errorf("%d expiries logged %d lines and %d counts, want %d and %d", tc.expires, got, counts, tc.lines, tc.counts)
		}
	}
	h := &lines{}
	fail := errors.New("not committed")
	var failTick atomic.Bool
	propose := func(_ context.Context, cmds []fsm.Command) []proposalResult {
		out := make([]proposalResult, len(cmds))
		if failTick.Load() {
			out[0].err = fail
		}
		return out
	}
	c := clocktest.New()
	s, _ := oneLease(t, time.Minute)
	ls := newLessor(c, 100*time.Millisecond, propose, nil, slog.New(h))
	takeOver(ls, s)
	c.Advance(100 * time.Millisecond)
	ls.step(context.Background())
	if n := h.count("tick not committed"); n != 0 {
		t.Fatalf("a committed tick logged %d warnings", n)
	}
	failTick.Store(true)
	c.Advance(100 * time.Millisecond)
	ls.step(context.Background())
	if n := h.count("tick not committed"); n != 1 {
		t.Fatalf("a tick that did not commit logged %d warnings, want 1", n)
	}
}

// TestLessorIdleTickStartsNothing: a tick with no duties due starts no
// goroutine and leaves the duties slot free, tick after tick (a duties
// goroutine for an empty batch would give back a slot it never took, and
// block forever).
func TestLessorIdleTickStartsNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ls := newTestLessor(clocktest.New())
	ls.activate(fsm.New())
	for range 5 {
		ls.step(t.Context())
		if len(ls.duties) != 0 {
			t.Fatalf("the duties slot is held after a tick with nothing due")
		}
	}
}

// TestLessorDelayEnd: the end a read shows for a lock-delay is the time the
// leader proposes GrantNext, for that grant's token only, and nothing once
// it has been proposed or while not leading.
func TestLessorDelayEnd(t *testing.T) {
	c := clocktest.New()
	ls := newTestLessor(c)
	ls.activate(fsm.New())
	start := c.Now()
	ls.applied([]fsm.Result{{Events: []fsm.Event{{Kind: fsm.DelayStarted, Name: "d", Delay: 5 * time.Second, Token: 7}}}})
	c.Advance(2 * time.Second)
	if at, ok := ls.delayEnd("d", 7); !ok || at.Sub(start) != 5*time.Second {
		t.Fatalf("delayEnd(d, 7) = %v after start (tracked %v), want 5s", at.Sub(start), ok)
	}
	if _, ok := ls.delayEnd("d", 6); ok {
		t.Fatal("delayEnd reports the delay of another grant's token")
	}
	if _, ok := ls.delayEnd("e", 7); ok {
		t.Fatal("delayEnd reports a lock that is not delayed")
	}
	c.Advance(3 * time.Second)
	if _, cmds := ls.due(true); len(cmds) != 1 {
		t.Fatalf("at 5s: %+v, want one GrantNext", cmds)
	}
	if _, ok := ls.delayEnd("d", 7); ok {
		t.Fatal("delayEnd after GrantNext was proposed")
	}
	ls.applied([]fsm.Result{{Events: []fsm.Event{{Kind: fsm.DelayStarted, Name: "d", Delay: 5 * time.Second, Token: 8}}}})
	ls.deactivate()
	if _, ok := ls.delayEnd("d", 8); ok {
		t.Fatal("a node that is not leading reports a delay's end")
	}
}

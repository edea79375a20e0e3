package hold

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencehq/fence/internal/clock"
	"github.com/fencehq/fence/internal/clock/clocktest"
)

// noAlarm is a fake clock whose AfterFunc timers never fire: the deadline
// timer of a process that has just resumed from a pause and not yet run
// it. What the Keeper then knows, it knows by looking at the clock itself.
type noAlarm struct{ *clocktest.Fake }

func (noAlarm) AfterFunc(time.Duration, func()) clock.Timer { return silent{} }

type silent struct{}

func (silent) C() <-chan time.Time      { return nil }
func (silent) Stop() bool               { return false }
func (silent) Reset(time.Duration) bool { return false }

type answer struct {
	ok  bool
	err error
}

var (
	errExpired = errors.New("test: expired")
	errLost    = errors.New("test: lost")
	errDown    = errors.New("test: store unreachable")
)

// startKeeper keeps a lease of TTL 30s, margin 3s (deadline 27s after
// now); each renewal reports on calls and returns what answers sends.
func startKeeper(t *testing.T, clk clock.Clock, sent time.Time) (k *Keeper, calls chan struct{}, answers chan answer) {
	calls, answers = make(chan struct{}, 16), make(chan answer, 16)
	k = Start(KeeperConfig{Clock: clk, TTL: 30 * time.Second, Margin: 3 * time.Second, Sent: sent,
		Renew: func(ctx context.Context) (bool, error) {
			calls <- struct{}{}
			a := <-answers
			return a.ok, a.err
		},
		Lost:    func(string) error { return errLost },
		Expired: func(error) error { return errExpired },
	})
	t.Cleanup(func() {
		k.End(errors.New("test over"))
		close(answers)
	})
	return k, calls, answers
}

// TestKeeperErrLooksAtTheClock: with the deadline timer not run (a process
// just resumed), Err still reports the expiry on its first call, and Done
// closes with it.
func TestKeeperErrLooksAtTheClock(t *testing.T) {
	fake := clocktest.New()
	k, _, answers := startKeeper(t, noAlarm{fake}, fake.Now())
	answers <- answer{err: errDown}
	fake.Suspend(27 * time.Second) // the whole lease, paused
	if err := k.Err(); !errors.Is(err, errExpired) {
		t.Fatalf("Err at the deadline, its timer not run: %v, want the expiry", err)
	}
	<-k.Done()
}

// TestKeeperLateAnswerDoesNotRevive: a renewal sent at 10s whose answer
// arrives after the deadline (27s) must not move the deadline to 10s + 27s:
// by then the lease had ended on this side.
func TestKeeperLateAnswerDoesNotRevive(t *testing.T) {
	fake := clocktest.New()
	start := fake.Now()
	k, calls, answers := startKeeper(t, noAlarm{fake}, start)
	fake.Advance(10 * time.Second) // the first renewal is sent
	<-calls
	fake.Advance(18 * time.Second) // its answer takes 18s: now 28s
	answers <- answer{ok: true}
	for len(calls) == 0 { // the second renewal shows the first was handled
		fake.Advance(0)
		time.Sleep(time.Millisecond)
	}
	answers <- answer{err: errDown}
	if d := k.Deadline().Sub(start); d != 27*time.Second {
		t.Fatalf("deadline %v after the start, want 27s: a late answer moved it", d)
	}
	if err := k.Err(); !errors.Is(err, errExpired) {
		t.Fatalf("Err after a late answer: %v, want the expiry", err)
	}
}

package hold

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencehq/fence/internal/clock"
)

// KeeperConfig describes one held lease to a Keeper.
type KeeperConfig struct {
	Clock  clock.Clock   // the holder's clock (clock.Real: CLOCK_BOOTTIME)
	TTL    time.Duration // the lease's TTL at the store
	Margin time.Duration // from Margin
	// Sent is the moment (on Clock) the request that took the lease was
	// sent: the first deadline is Sent + TTL − Margin.
	Sent time.Time
	// Renew makes one renewal attempt. ok=false with a nil error means the
	// store no longer holds the lease for this holder (it expired there, or
	// passed to another holder): the lease ends at once with Lost(). An
	// error is a failed attempt (jeopardy; retried until the deadline).
	Renew func(ctx context.Context) (ok bool, err error)
	// Release makes the one release attempt; ok=false with a nil error
	// means the store no longer held the lease for this holder.
	Release func(ctx context.Context) (ok bool, err error)
	// Lost is the error the lease ends with when a renewal or the release
	// (at says which: "renewal", "release") finds it gone.
	Lost func(at string) error
	// Unanswered is the error the lease ends with when the release failed
	// with err: nothing renews the lease any more; it expires in the store
	// within the TTL.
	Unanswered func(err error) error
	// Released is the error of a released lease (the package's ErrReleased).
	Released error
	// What names the lock in a failed release's error (`redislock: "x"`).
	What string
	// Expired is the error the lease ends with at its deadline; failing is
	// the last renewal error, nil if renewals were not failing.
	Expired func(failing error) error
}

// Keeper is the holder's side of one lease in a store that expires it on
// its own (Redis, Postgres): it renews every TTL/3 after the last success
// (every min(TTL/3, 250ms) while failing, each attempt given at most TTL/3
// of real time), and trusts the lease until its local deadline: the moment
// the last successful renewal was sent, plus the TTL, minus the margin, on
// the Keeper's clock. At that deadline it ends whether or not the store
// answered. It is safe for concurrent use.
type Keeper struct {
	cfg KeeperConfig

	mu       sync.Mutex
	deadline time.Time   // guarded by mu
	failing  error       // guarded by mu; the last renewal error, nil while renewals succeed
	err      error       // guarded by mu; why the lease ended, nil while it holds
	timer    clock.Timer // fires at deadline
	stop     context.CancelFunc
	done     chan struct{} // closed when err is set
}

// Start starts keeping the lease cfg describes: its renewal loop and its
// deadline timer run until End.
func Start(cfg KeeperConfig) *Keeper {
	k := &Keeper{cfg: cfg, deadline: cfg.Sent.Add(cfg.TTL - cfg.Margin), done: make(chan struct{})}
	loop, stop := context.WithCancel(context.Background())
	k.stop = stop
	clk := cfg.Clock
	wake := clk.NewTimer(clock.Until(clk, cfg.Sent.Add(cfg.TTL/3))) // armed before the loop runs: a test may move the clock at once
	k.mu.Lock()
	k.timer = clk.AfterFunc(clock.Until(clk, k.deadline), k.check)
	k.mu.Unlock()
	go k.renew(loop, wake)
	return k
}

// Done is closed when the lease has ended (see Err for why).
func (k *Keeper) Done() <-chan struct{} { return k.done }

// Err returns nil while the lease holds, else why it ended. It compares the
// deadline with the clock itself, so after a pause it reports the expiry
// at once, before any timer has run.
func (k *Keeper) Err() error {
	k.check()
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

// Jeopardy returns the last renewal error while renewals are failing but
// the deadline has not passed yet, and nil otherwise.
func (k *Keeper) Jeopardy() error {
	if k.Err() != nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.failing
}

// Deadline returns the local deadline: a reading of the Keeper's clock.
func (k *Keeper) Deadline() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.deadline
}

// Release stops renewing, makes the release attempt and ends the lease. It
// returns nil if the lease was released (also by an earlier Release). If
// the lease had already ended, the attempt is still made (so the next
// holder need not wait for the TTL) and the lease's error is returned. If
// the store no longer held the lease, the lease ends with Lost("release")
// and that is returned; if the attempt failed, the lease ends with
// Unanswered and the attempt's error is returned.
func (k *Keeper) Release(ctx context.Context) error {
	if err := k.Err(); errors.Is(err, k.cfg.Released) {
		return nil
	}
	k.stop() // no renewal after this point
	ok, err := k.cfg.Release(ctx)
	if ended := k.Err(); ended != nil {
		return ended
	}
	switch {
	case err != nil:
		k.End(k.cfg.Unanswered(err))
		return fmt.Errorf("%s: release: %w", k.cfg.What, err)
	case !ok:
		k.End(k.cfg.Lost("release"))
		return k.Err()
	}
	k.End(k.cfg.Released)
	return nil
}

// End ends the lease for good with err (the first reason wins) and stops
// its loop and timer.
func (k *Keeper) End(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err != nil {
		return
	}
	k.err = err
	k.timer.Stop()
	k.stop()
	close(k.done)
}

// check ends the lease if its deadline has passed.
func (k *Keeper) check() {
	k.mu.Lock()
	if k.err != nil || k.cfg.Clock.Now().Before(k.deadline) {
		k.mu.Unlock()
		return
	}
	failing := k.failing
	k.mu.Unlock()
	k.End(k.cfg.Expired(failing))
}

// renewed moves the deadline after a renewal sent at sent succeeded, unless
// the deadline passed while it was in flight.
func (k *Keeper) renewed(sent time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err != nil || !k.cfg.Clock.Now().Before(k.deadline) {
		return // too late: the lease ends at its deadline all the same
	}
	if d := sent.Add(k.cfg.TTL - k.cfg.Margin); d.After(k.deadline) {
		k.deadline = d
		k.timer.Reset(clock.Until(k.cfg.Clock, d))
	}
	k.failing = nil
}

func (k *Keeper) renewFailed(err error) {
	k.mu.Lock()
	k.failing = err
	k.mu.Unlock()
}

// renew runs until the lease ends or StopRenewing.
func (k *Keeper) renew(ctx context.Context, wake clock.Timer) {
	clk := k.cfg.Clock
	interval := k.cfg.TTL / 3
	retryEvery := min(interval, 250*time.Millisecond)
	defer wake.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake.C():
		}
		wake.Reset(retryEvery) // unless the renewal below succeeds
		sent := clk.Now()
		rctx, cancel := context.WithTimeout(ctx, interval)
		ok, err := k.cfg.Renew(rctx)
		cancel()
		switch {
		case ctx.Err() != nil: // released or ended meanwhile
			return
		case err != nil:
			k.renewFailed(err)
		case !ok:
			k.End(k.cfg.Lost("renewal"))
			return
		default:
			wake.Reset(clock.Until(clk, sent.Add(interval))) // first: a test that sees the new deadline may move the clock
			k.renewed(sent)
		}
	}
}

package hold

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/fencehq/fence/internal/clock"
)

// FirstPoll is the wait after the first failed attempt of a polling Lock.
const FirstPoll = 10 * time.Millisecond

// Backoff spaces the attempts of a Lock that polls a store with no queue:
// waits start at FirstPoll (or max, if smaller) and double up to max, each
// drawn at random from its upper half (jitter, so waiters do not poll in
// step). Not safe for concurrent use: one per Lock call.
type Backoff struct {
	delay, max time.Duration
}

// NewBackoff returns a Backoff whose waits grow to max (> 0).
func NewBackoff(max time.Duration) *Backoff { return &Backoff{delay: min(FirstPoll, max), max: max} }

// Wait waits the next interval on the real clock, or until ctx ends (then
// it returns ctx.Err()).
func (b *Backoff) Wait(ctx context.Context) error {
	err := clock.Sleep(ctx, clock.Real{}, b.delay/2+mrand.N(b.delay/2+1))
	b.delay = min(2*b.delay, b.max)
	return err
}

// Releasable is a held lease as Do sees it.
type Releasable interface {
	Lease
	Release(ctx context.Context) error
}

// Do runs fn under l (just taken) and releases it afterwards: fn gets a
// context that ends with the lease (Context). If the lease ended while fn
// ran and fn failed, the error wraps both the lease's reason and fn's
// error (what names the lock, e.g. `redislock: "jobs/x"`); else fn's error,
// or else the release's. The release gets 5 seconds of its own, also when
// ctx has ended. If fn panics, Do releases the lease and panics on.
func Do(ctx context.Context, l Releasable, what string, fn func(ctx context.Context) error) error {
	release := func() error {
		relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return l.Release(relCtx)
	}
	panicked := true
	defer func() {
		if panicked { // unwinding: a lease left held would be renewed for the life of the process
			release()
		}
	}()
	fnErr := fn(Context(ctx, l))
	panicked = false
	lost := l.Err() // before Release: why the lease ended, if it did
	relErr := release()
	switch {
	case fnErr != nil && lost != nil && !errors.Is(fnErr, lost):
		return fmt.Errorf("%s: the lock ended while fn ran: %w (fn returned: %w)", what, lost, fnErr)
	case fnErr != nil:
		return fnErr
	}
	return relErr
}

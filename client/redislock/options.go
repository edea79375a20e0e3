package redislock

import (
	"fmt"
	"time"

	"github.com/fencehq/fence/internal/clock"
	"github.com/fencehq/fence/internal/hold"
)

// Option configures a Locker (New) or one lock (Lock, TryLock, Do).
type Option func(*options)

type options struct {
	ttl     time.Duration
	margin  time.Duration // 0: ttl/10
	pollMax time.Duration
	clock   clock.Clock // lease timing: deadlines, renewals; tests inject a fake
}

func defaults() options {
	return options{ttl: 30 * time.Second, pollMax: time.Second, clock: clock.Real{}}
}

func (o *options) apply(opts []Option) {
	for _, f := range opts {
		f(o)
	}
}

// check validates o for a lock of name and returns the lease's safety margin.
func (o *options) check(name string) (time.Duration, error) {
	switch {
	case name == "":
		return 0, fmt.Errorf("%w: empty lock name", ErrInvalid)
	case o.ttl < time.Millisecond || o.ttl%time.Millisecond != 0:
		return 0, fmt.Errorf("%w: TTL %v must be a positive whole number of milliseconds (Redis's PX)", ErrInvalid, o.ttl)
	case o.pollMax <= 0:
		return 0, fmt.Errorf("%w: poll interval %v must be positive", ErrInvalid, o.pollMax)
	}
	m, err := hold.Margin(o.ttl, o.margin)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return m, nil
}

// WithTTL sets the key's TTL (default 30s; whole milliseconds). The holder
// renews every TTL/3; after a crash the lock stays taken for up to one TTL.
func WithTTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// WithSafetyMargin sets how long before the key's earliest possible expiry
// the holder stops trusting its lease (default TTL/10; never less than
// TTL × 1000 ppm + 10ms, the rule of fence's client). A margin as long as
// the TTL is refused with ErrInvalid.
func WithSafetyMargin(d time.Duration) Option { return func(o *options) { o.margin = d } }

// WithPoll sets the longest wait between two attempts of a waiting Lock
// (default 1s). Attempts start 10ms apart and double up to it, each wait
// drawn at random from its upper half (jitter, so waiters do not poll in
// step).
func WithPoll(max time.Duration) Option { return func(o *options) { o.pollMax = max } }

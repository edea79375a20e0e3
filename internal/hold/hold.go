// Package hold is what a lease holder needs on its own side, shared by
// fence's client, client/redislock and client/pglease: the safety margin
// rule and a context that ends with the lease; and, for the two leases kept
// in a store that expires them on its own (Redis, Postgres), the renewal
// loop and local deadline (Keeper), polling (Backoff) and Do. Standard
// library (and internal/clock) only: the public packages import it.
package hold

import (
	"context"
	"fmt"
	"time"
)

// Safety margin bounds. The margin is how much earlier than the server the
// holder stops trusting a lease. It must cover the difference in rate between
// the holder's clock and the server's over one TTL: NTP keeps a disciplined
// clock within 500 ppm of true rate (its maximum frequency tolerance; RFC
// 5905), and the two clocks may err in opposite directions, so 2 × 500 ppm =
// 1000 ppm of the TTL. On top of that comes a fixed floor for the time between
// the deadline passing and the holder's code noticing (timer latency).
const (
	DriftPPM    = 1000                  // parts per million of the TTL: two clocks at NTP's 500 ppm each
	MarginFloor = 10 * time.Millisecond // added to the drift bound
)

// MinMargin is the smallest margin a holder uses for ttl.
func MinMargin(ttl time.Duration) time.Duration {
	return ttl/1_000_000*DriftPPM + MarginFloor
}

// Margin returns the margin of a lease with ttl: m, or TTL/10 if m is 0,
// raised to MinMargin. A negative m, or a margin that leaves no time (≥ the
// TTL), is an error (callers wrap it in their ErrInvalid).
func Margin(ttl, m time.Duration) (time.Duration, error) {
	if m < 0 {
		return 0, fmt.Errorf("safety margin %v is negative", m)
	}
	if m == 0 {
		m = ttl / 10
	}
	m = max(m, MinMargin(ttl))
	if m >= ttl {
		return 0, fmt.Errorf("safety margin %v must be shorter than the TTL %v", m, ttl)
	}
	return m, nil
}

// Lease is what Context watches: Done closes when the lease ends, and Err
// says why (nil while it holds), checking its deadline itself.
type Lease interface {
	Done() <-chan struct{}
	Err() error
}

// Context returns a context that ends when parent ends or l ends; then
// context.Cause returns l.Err() (or the parent's cause). Its Err checks l.Err
// synchronously, so a process that was paused sees the expiry on its first
// check, before any timer has run.
func Context(parent context.Context, l Lease) context.Context {
	inner, cancel := context.WithCancelCause(parent)
	c := &leaseContext{Context: inner, l: l, cancel: cancel}
	if c.Err() != nil { // already over: done from birth
		return c
	}
	go func() {
		select {
		case <-l.Done():
			cancel(l.Err())
		case <-inner.Done():
		}
	}()
	return c
}

// leaseContext is done when its parent or its lease is. Err checks the lease
// synchronously, so a paused process sees the expiry on its first check.
type leaseContext struct {
	context.Context // a WithCancelCause child of the parent: Done, Value, Cause
	l               Lease
	cancel          context.CancelCauseFunc
}

func (c *leaseContext) Err() error {
	if err := c.l.Err(); err != nil {
		c.cancel(err)
	}
	return c.Context.Err()
}

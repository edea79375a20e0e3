package redislock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/fencehq/fence/internal/hold"
)

// Lease is one held Redis lock, renewed in the background every TTL/3 until
// it is released or can no longer be trusted. It is safe for concurrent use.
//
// It has no fencing token: it cannot protect data from a second holder (see
// the package doc). Stop when Done closes; check Err before anything costly.
type Lease struct {
	name string
	keep *hold.Keeper // renewals (compare-and-PEXPIRE), the deadline, the release (compare-and-DEL)
}

// newLease starts a lease whose SET was sent at sent: its deadline is
// sent + TTL − margin.
func newLease(rdb Client, o options, name, value string, margin time.Duration, sent time.Time) *Lease {
	l := &Lease{name: name}
	ttlMillis := strconv.FormatInt(o.ttl.Milliseconds(), 10)
	l.keep = hold.Start(hold.KeeperConfig{
		Clock: o.clock, TTL: o.ttl, Margin: margin, Sent: sent,
		Renew: func(ctx context.Context) (bool, error) {
			res, err := renewScript.Run(ctx, rdb, []string{name}, value, ttlMillis).Int()
			return res == 1, err
		},
		Release: func(ctx context.Context) (bool, error) {
			res, err := releaseScript.Run(ctx, rdb, []string{name}, value).Int()
			return res == 1, err
		},
		Lost: func(at string) error { return fmt.Errorf("%w: %w: %q, found on %s", ErrExpired, ErrLost, name, at) },
		Unanswered: func(err error) error {
			return fmt.Errorf("%w: release of %q failed (%v); the key is no longer renewed and expires within the TTL (%v)", ErrExpired, name, err, o.ttl)
		},
		Released: ErrReleased,
		What:     fmt.Sprintf("redislock: %q", name),
		Expired: func(failing error) error {
			if failing != nil {
				return fmt.Errorf("%w: no renewal of %q succeeded within the TTL (%v); last renewal error: %v", ErrExpired, name, o.ttl, failing)
			}
			return fmt.Errorf("%w: no renewal of %q succeeded within the TTL (%v)", ErrExpired, name, o.ttl)
		},
	})
	return l
}

// Name returns the lock's name: its Redis key.
func (l *Lease) Name() string { return l.name }

// Done is closed when the lease can no longer be trusted or was released
// (see Err for why).
func (l *Lease) Done() <-chan struct{} { return l.keep.Done() }

// Err returns nil while the lease holds, else why it ended: ErrReleased, or
// ErrExpired (possibly with ErrLost). It compares the local deadline with
// the clock itself, so after a pause it reports the expiry at once, before
// any timer has run.
func (l *Lease) Err() error { return l.keep.Err() }

// Jeopardy returns the last renewal error while renewals are failing but the
// deadline has not passed yet, and nil otherwise.
func (l *Lease) Jeopardy() error { return l.keep.Jeopardy() }

// Deadline returns the local time until which the lease is trusted unless
// renewed (it moves forward with each renewal): when the last successful
// renewal was sent, plus the TTL, minus the safety margin. It is a reading
// of a clock on CLOCK_BOOTTIME: compare it with nothing from time.Now. Use
// Err or Done to decide; Deadline is for display.
func (l *Lease) Deadline() time.Time { return l.keep.Deadline() }

// Context returns a context that is cancelled the moment the lease ends;
// context.Cause returns why (Err's error).
func (l *Lease) Context() context.Context { return hold.Context(context.Background(), l) }

// Release deletes the key if it still holds this holder's value (compare
// and delete, one script: never another holder's lock) and ends the lease.
// It returns nil if the lock was released (also by an earlier Release). If
// the lease had already ended, it still deletes the key if it is still ours
// (so the next holder need not wait for the TTL) and returns the lease's
// error. If the key no longer held our value, the error matches ErrExpired
// and ErrLost: the lock was lost while held. If Redis did not answer, the
// lease ends here anyway, nothing renews the key, and it expires within the
// TTL.
func (l *Lease) Release(ctx context.Context) error { return l.keep.Release(ctx) }

package pglease

import (
	"context"
	"time"

	"github.com/fencehq/fence/internal/hold"
)

// Lease is one held lock, renewed in the background every TTL/3 until it is
// released or can no longer be trusted. It is safe for concurrent use.
//
// A Lease can end at any moment without the holder doing anything (a pause,
// a network cut), so: pass Token to every write and let the storage refuse
// a stale one (fencing.Table); stop when Done closes; check Err before
// anything irreversible.
type Lease struct {
	name  string
	token uint64
	keep  *hold.Keeper // renewals, the deadline, the release
}

func newLease(db DB, st *statements, o options, name, holder string, token uint64, margin time.Duration, sent time.Time) *Lease {
	return &Lease{name: name, token: token, keep: keep(db, st, o, name, holder, margin, sent)}
}

// Name returns the lock's name.
func (l *Lease) Name() string { return l.name }

// Token returns the fencing token of this grant: larger than the token of
// every earlier grant of this lock (drawn from the table's sequence after
// the lock's row is locked). Tokens are unique across all the table's
// locks, but grants of different locks may commit in another order than
// their tokens were drawn. Tokens have gaps.
func (l *Lease) Token() uint64 { return l.token }

// Done is closed when the lease can no longer be trusted or was released
// (see Err for why).
func (l *Lease) Done() <-chan struct{} { return l.keep.Done() }

// Err returns nil while the lease holds, else why it ended: ErrReleased, or
// ErrExpired (possibly with ErrLost). It compares the local deadline with
// the clock itself, so after a pause it reports the expiry at once, before
// any timer has run.
func (l *Lease) Err() error { return l.keep.Err() }

// Jeopardy returns the last renewal error while renewals are failing but the
// deadline has not passed yet, and nil otherwise. The lease still holds;
// consider pausing work that would be costly to abandon.
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

// Release frees the lock if this holder still holds it (one UPDATE that
// checks the holder's secret: never another holder's lock) and ends the
// lease. It returns nil if the lock was released (also by an earlier
// Release). If the lease had already ended, it still frees the lock if it
// is still ours (so the next holder need not wait for the TTL) and returns
// the lease's error. If the row no longer held this holder, the error
// matches ErrExpired and ErrLost: the lock was lost while held. If the
// database did not answer, the lease ends here anyway, nothing renews it,
// and it expires within the TTL.
func (l *Lease) Release(ctx context.Context) error { return l.keep.Release(ctx) }

package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Lease is a granted lock: the right to act as its only holder until Done
// closes. It is safe for concurrent use.
//
// A Lease can end at any moment without the holder doing anything (a pause,
// a network cut), so: pass Token to every write and let the storage refuse a
// stale one (package fencing); stop when Done closes; check Err before
// anything irreversible.
type Lease struct {
	s       *session
	name    string
	token   uint64
	signed  string
	unclaim func()

	mu       sync.Mutex
	released bool  // guarded by mu
	revoked  error // guarded by mu; why an admin ended this grant alone
	done     chan struct{}
	once     sync.Once
}

func newLease(s *session, name string, token uint64, signed string, unclaim func()) *Lease {
	l := &Lease{s: s, name: name, token: token, signed: signed, unclaim: unclaim, done: make(chan struct{})}
	s.track(l) // the session finishes it when it ends
	return l
}

func (l *Lease) finish() {
	l.once.Do(func() {
		l.s.untrack(l)
		close(l.done)
		l.unclaim()
	})
}

// revoke ends this grant alone (an admin force-released it); the session
// and its other grants live on.
func (l *Lease) revoke(err error) {
	l.mu.Lock()
	if l.revoked == nil && !l.released {
		l.revoked = err
	}
	l.mu.Unlock()
	l.finish()
}

// Name returns the lock's name.
func (l *Lease) Name() string { return l.name }

// Token returns the fencing token of this grant. It is larger than the token
// of every earlier grant of this lock.
func (l *Lease) Token() uint64 { return l.token }

// SignedToken returns the server's signed statement of this grant (lock
// name, token, lease number, cluster, issue time), for storage that checks
// it offline with fencing.Verifier (Table.UpdateSigned, the Middleware's
// Fence-Token header, Ledger.OnceSigned): it proves the token was issued,
// for this lock. Empty if the server has no token key (fence serve
// --token-key; the dev setup has one).
func (l *Lease) SignedToken() string { return l.signed }

// LeaseNumber returns the public number of the server lease (session) that holds the lock.
func (l *Lease) LeaseNumber() uint64 { return l.s.number }

// Done is closed when the lease can no longer be trusted (see Err for why).
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err returns nil while the lease is valid, else why it ended: ErrReleased,
// ErrClosed, or ErrExpired (possibly with ErrLostContact). It compares the
// local deadline with the clock itself, so after a pause it reports the
// expiry at once, before any timer has run.
func (l *Lease) Err() error {
	if err := l.s.endErr(); err != nil {
		l.finish()
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.revoked != nil {
		return l.revoked
	}
	if l.released {
		return ErrReleased
	}
	return nil
}

// Jeopardy returns the last renewal error while renewals are failing but the
// deadline has not passed yet, and nil otherwise. The lease is still valid;
// consider pausing work that would be costly to abandon.
func (l *Lease) Jeopardy() error {
	if l.Err() != nil {
		return nil
	}
	return l.s.jeopardy()
}

// Deadline returns the local time until which the lease is valid unless
// renewed (it moves forward with each renewal). It is a reading of the
// client's clock, which counts on CLOCK_BOOTTIME: time.Until(Deadline())
// measures on Go's monotonic clock instead and overstates the time left by
// however long the host was suspended since the process started. Use Err or
// Done to decide; Deadline is for display.
func (l *Lease) Deadline() time.Time {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.s.deadline
}

// Context returns a context that is cancelled the moment the lease ends;
// context.Cause returns why (Lease.Err's error). Its Err checks the deadline
// itself, like Lease.Err.
func (l *Lease) Context() context.Context { return l.contextFrom(context.Background()) }

// Release gives the lock up; the next waiter gets it at once. It returns nil
// if the lock was released (also by an earlier Release), or the lease's
// error if it had already ended (then the lock was lost while held: the work
// was only safe if fenced).
//
// If the server's answer does not arrive before ctx ends, Release keeps
// asking (the same request) for a few more seconds; if it still cannot tell,
// it gives up the lease's whole session so the server ends it, and returns
// an error matching ErrExpired and ErrIndeterminate. Either way the lease is
// over when Release returns, and the next Lock of the name does not wait.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	if released {
		return nil
	}
	if err := l.Err(); err != nil {
		return err
	}
	c := l.s.c
	req := l.s.releaseRequest(l.name)
	call := func(ctx context.Context) error { return l.s.release(ctx, req) }
	err := c.retry(ctx, call)
	if outcomeUnknown(err) {
		err = c.settle(l.s, call) // same request, fresh context
	}
	if !outcomeUnknown(err) {
		l.s.calls.answered(req.Seq)
	}
	switch status.Code(err) {
	case codes.NotFound: // the whole lease ended (it expired, or was revoked)
		l.s.end(fmt.Errorf("%w: the server no longer had lease #%d", ErrExpired, l.s.number))
		return l.Err()
	case codes.ResourceExhausted: // refused, not executed (and never will be): the lease still holds the lock
		return fmt.Errorf("fence: release %q: too many calls of lease #%d in flight; the lock is still held, release it again later: %w", l.name, l.s.number, err)
	case codes.FailedPrecondition: // this grant alone ended: an admin force-released it
		l.revoke(fmt.Errorf("%w: lock %q (token %d) was no longer held by lease #%d when released", ErrRevoked, l.name, l.token, l.s.number))
		return l.Err()
	}
	if err != nil {
		// Not confirmed: the lock may still be held. Give up the session so
		// the server ends it; this lease (and its session's others) end now.
		c.abandon(l.s, fmt.Sprintf("release of %q", l.name), err)
		l.finish()
		return fmt.Errorf("fence: release %q: %w", l.name, l.Err())
	}
	l.mu.Lock()
	l.released = true
	l.mu.Unlock()
	l.finish()
	return nil
}

// contextFrom returns a context that ends when parent ends or the lease ends;
// then context.Cause returns the lease's error (or the parent's cause).
func (l *Lease) contextFrom(parent context.Context) context.Context {
	inner, cancel := context.WithCancelCause(parent)
	c := &leaseContext{Context: inner, l: l, cancel: cancel}
	if c.Err() != nil { // already over: done from birth
		return c
	}
	go func() {
		select {
		case <-l.done:
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
	l               *Lease
	cancel          context.CancelCauseFunc
}

func (c *leaseContext) Err() error {
	if err := c.l.Err(); err != nil {
		c.cancel(err)
	}
	return c.Context.Err()
}

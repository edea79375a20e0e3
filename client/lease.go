package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/clock"
	"github.com/fencehq/fence/internal/hold"
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
	unclaim func()       // idempotent; frees the session's local claim on name
	granted func(uint64) // records a grant's token in that claim (for LockedError.Local)
	o       *options     // what the grant was asked with: Relock asks the same
	slot    int          // the permit of a semaphore (0 otherwise)
	shared  bool         // a reader's grant of a read-write lock
	handed  atomic.Bool  // Relock took over the local claim: finish leaves it

	mu        sync.Mutex
	released  bool  // guarded by mu
	releasing int   // guarded by mu; Release calls under way (Relock refuses meanwhile, the local claim stays)
	revoked   error // guarded by mu; why an admin ended this grant alone
	done      chan struct{}
	once      sync.Once
}

// newLease is the grant resp of name to session s; granted records its
// token with the Client's local claim on name, which unclaim frees.
func newLease(s *session, name string, resp *api.AcquireResponse, unclaim func(), granted func(uint64), o *options) *Lease {
	granted(resp.Token)
	l := &Lease{s: s, name: name, token: resp.Token, signed: resp.SignedToken, slot: int(resp.Slot), shared: resp.Shared,
		unclaim: unclaim, granted: granted, o: o, done: make(chan struct{})}
	s.track(l) // the session finishes it when it ends
	return l
}

func (l *Lease) finish() {
	l.once.Do(func() {
		l.s.untrack(l)
		close(l.done)
		l.letGo()
	})
}

// letGo frees the session's local claim on the name once this Lease has
// ended and no Release of it is on its way: a Release names the lock, not
// the grant, so one that arrived after another caller of the session took
// the name would end that caller's grant. (A Relock hands the claim on.)
// Both finish and a returning Release call it; unclaim is idempotent.
func (l *Lease) letGo() {
	l.mu.Lock()
	busy := l.releasing > 0
	l.mu.Unlock()
	select {
	case <-l.done:
		if !busy && !l.handed.Load() {
			l.unclaim()
		}
	default:
	}
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

// Slot returns the grant's permit of a semaphore, 0…n−1: the lowest free
// when it was granted, so storage can keep a fenced row per slot (key
// "name/slot"). It is 0 for a mutex and for a read-write lock.
func (l *Lease) Slot() int { return l.slot }

// Shared reports whether the grant is a reader's of a read-write lock
// (RWLock.RLock).
func (l *Lease) Shared() bool { return l.shared }

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
// Until it returns, the Client's other callers of the name wait for it
// (TryLock: a local LockedError), even if the Lease ended meanwhile (an
// admin force-released the grant): a Release names the lock, not the
// grant, so one that arrived after another caller took the name would end
// that caller's grant.
func (l *Lease) Release(ctx context.Context) error { return l.release(ctx, false) }

// ReleaseRan is Release for a lock taken WithOncePer whose run succeeded: it
// records the run (this grant's token, the holder, the cluster's clock now)
// in the same step as the release, so nobody taking the lock WithOncePer
// runs the job again inside the window. It records nothing if the lease
// had already ended (then it returns the lease's error, like Release), or
// if the lock was taken without WithOncePer. Call Release instead when the
// run failed: the next host then runs it.
func (l *Lease) ReleaseRan(ctx context.Context) error { return l.release(ctx, true) }

func (l *Lease) release(ctx context.Context, ran bool) (err error) {
	ctx, span := l.s.c.opts.startSpan(ctx, spanRelease, func() []attribute.KeyValue { return append(leaseAttrs(l), attrLock.String(l.name)) })
	defer func() { endSpan(span, err) }()
	l.mu.Lock()
	released := l.released
	if !released {
		// A Release names the lock, not the grant: sent after a Relock of
		// this Lease was granted, it would end the new grant. Relock
		// refuses while a Release is under way.
		l.releasing++
	}
	l.mu.Unlock()
	if released {
		return nil
	}
	defer func() {
		l.mu.Lock()
		l.releasing--
		l.mu.Unlock()
		l.letGo() // if the Lease ended meanwhile (or now), its claim is free at last
	}()
	if err := l.Err(); err != nil {
		return err
	}
	c := l.s.c
	req := l.s.releaseRequest(l.name)
	req.RecordRun = ran
	call := func(ctx context.Context) error { return l.s.release(ctx, req) }
	err = c.retry(ctx, call)
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
func (l *Lease) contextFrom(parent context.Context) context.Context { return hold.Context(parent, l) }

// Relock releases this grant and asks for the lock again, in one step (one
// log entry on the server) instead of a Release and then a Lock: the
// callers already waiting are granted first, in that same step, and this
// one joins the back of the queue (FIFO: a holder that loops never starves
// them); with nobody waiting it is granted again at once. It blocks like
// Lock until granted or ctx ends (a wait the server withdraws, when the
// call's connection drops, is taken up again with a new call, as Lock
// does), and returns the new grant, asked with the
// options this Lease was taken with (lock-delay, a semaphore's permits, a
// reader's grant). Its token is larger than this one's: a fresh grant is a
// fresh token, never the old one, so storage sees the new holder as new.
//
// This Lease ends when Relock is called (Done closes, Err returns
// ErrReleased), before the request is sent: the server may end the grant
// as soon as the request arrives. If Relock returns an error, the old grant
// is over too and no new one is held: ErrExpired if the session ended,
// ErrRevoked if the grant had already ended (an admin force-released it;
// nothing was released or queued), an error that says so if the relock
// was granted but that new grant ended before the answer arrived,
// the context's error if ctx ended while waiting (the wait is withdrawn, a
// grant that won the race is given back). Two errors leave this Lease as it
// was: ErrReleased (it had ended already, or a Release of it is under way
// in another goroutine: a Release names the lock, not the grant, so one
// that arrived after the relock would end the new grant), and ErrInvalid
// for a lease taken WithOncePer, which cannot relock (its run is recorded
// by ReleaseRan).
func (l *Lease) Relock(ctx context.Context) (nl *Lease, err error) {
	s, c := l.s, l.s.c
	ctx, span := c.opts.startSpan(ctx, spanRelock, func() []attribute.KeyValue { return append(leaseAttrs(l), attrLock.String(l.name)) })
	defer func() { endSpan(span, err) }()
	if l.o.oncePer != 0 {
		return nil, fmt.Errorf("fence: relock %q: %w: a lock taken WithOncePer is released with ReleaseRan or Release, then taken again", l.name, ErrInvalid)
	}
	if err := l.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	if l.released || l.releasing > 0 {
		l.mu.Unlock()
		return nil, ErrReleased
	}
	l.released = true
	l.mu.Unlock()
	l.handed.Store(true) // the local claim on name passes to the new grant, or is freed below
	l.finish()

	start := l.o.clock.Now()
	req := acquireRequest(s.id, s.calls.begin(), l.name, true, l.o)
	req.ReleaseToken = l.token
	if l.o.waiting != nil {
		l.o.waiting(s.number)
	}
	var resp *api.AcquireResponse
	for {
		if resp, err = c.sendAcquire(ctx, s, req); err == nil {
			break
		}
		st, _ := status.FromError(err)
		if st.Code() != codes.Aborted || hasLockHeld(st) || ctx.Err() != nil {
			break
		}
		// The server withdrew the call from the queue (its handler ended:
		// a dropped connection, a server that stopped). The relock had
		// released the grant when it queued, so what is left is a Lock:
		// wait again with a new call, as Lock does.
		req = acquireRequest(s.id, s.calls.begin(), l.name, true, l.o)
	}
	c.opts.observer.AcquireWait(clock.Since(l.o.clock, start), err == nil)
	if err == nil {
		return newLease(s, l.name, resp, l.unclaim, l.granted, l.o), nil
	}
	switch {
	case outcomeUnknown(err):
		c.settleAcquire(s, req) // gives back a grant it made, or gives up the session
	case status.Code(err) == codes.ResourceExhausted && req.ReleaseToken != 0:
		c.giveBack(s, l.name) // refused before acting: the old grant is still held, and nobody will use it
	}
	l.unclaim()
	switch st, _ := status.FromError(err); {
	case st.Code() == codes.NotFound:
		s.end(fmt.Errorf("%w: the server no longer had lease #%d", ErrExpired, s.number))
		return nil, fmt.Errorf("fence: relock %q: %w", l.name, s.endErr())
	case st.Code() == codes.FailedPrecondition && grantEnded(st) != 0: // not ErrRevoked: the old grant was released, by this relock
		return nil, fmt.Errorf("fence: relock %q: it released token %d and was granted token %d, which has ended since (force-released by an admin) before the answer arrived: %w", l.name, l.token, grantEnded(st), err)
	case st.Code() == codes.FailedPrecondition && req.ReleaseToken != 0:
		return nil, fmt.Errorf("fence: relock %q: %w: lock %q (token %d) was no longer held by lease #%d: %w", l.name, ErrRevoked, l.name, l.token, s.number, err)
	case st.Code() == codes.FailedPrecondition && permitsError(l.name, st) != nil: // the Lock after a withdrawn relock
		return nil, permitsError(l.name, st)
	}
	return nil, fmt.Errorf("fence: relock %q: %w", l.name, err)
}

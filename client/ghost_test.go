package client_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/client"
)

// loseFirstAcquireReply lets the first Acquire reach the server (it is
// granted) and then hides the reply until the caller's deadline, as a
// network that drops the answer would. With failGetLock, GetLock fails too,
// as during a failover.
func loseFirstAcquireReply(failGetLock bool) grpc.DialOption {
	var once sync.Once
	return grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		switch method {
		case api.FenceService_Acquire_FullMethodName:
			lose := false
			once.Do(func() { lose = true })
			if lose {
				if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
					return err
				}
				<-ctx.Done()
				return status.FromContextError(ctx.Err()).Err()
			}
		case api.FenceService_GetLock_FullMethodName:
			if failGetLock {
				return status.Error(codes.Unavailable, "injected: failover")
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
}

// TestTryLockLostReplyLeavesNoGhost: TryLock's grant is made but its reply
// is lost at the caller's deadline. The client must settle the outcome (and
// give the grant back), not leave its session holding the lock forever.
func TestTryLockLostReplyLeavesNoGhost(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr, client.WithDialOptions(client.UnaryOnly(), loseFirstAcquireReply(false)))
	if l, err := c.TryLock(ctxT(t, 300*time.Millisecond), "x"); err == nil {
		t.Fatalf("TryLock succeeded (token %d) although its reply was lost", l.Token())
	}
	if _, err := dial(t, ts.addr).TryLock(ctxT(t, 5*time.Second), "x"); err != nil {
		t.Fatalf("after the lost TryLock, the lock is not free: %v", err)
	}
}

// TestLockLostReplyDuringFailoverLeavesNoGhost: the same for Lock with a
// deadline while GetLock fails (a failover): one GetLock is no undo.
func TestLockLostReplyDuringFailoverLeavesNoGhost(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr, client.WithDialOptions(client.UnaryOnly(), loseFirstAcquireReply(true)))
	if l, err := c.Lock(ctxT(t, 300*time.Millisecond), "x"); err == nil {
		t.Fatalf("Lock succeeded (token %d) although its reply was lost", l.Token())
	}
	if _, err := dial(t, ts.addr).TryLock(ctxT(t, 5*time.Second), "x"); err != nil {
		t.Fatalf("after the lost Lock, the lock is not free: %v", err)
	}
}

// failRelease fails Release calls with UNAVAILABLE while fail says so.
func failRelease(fail func() bool) grpc.DialOption {
	return grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == api.FenceService_Release_FullMethodName && fail() {
			return status.Error(codes.Unavailable, "injected: release lost")
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
}

// TestReleaseFailingWithinCallerDeadlineIsSettled: Release cannot reach the
// server before the caller's deadline, but can right after. The client
// settles it (same request) and reports the lock released; the next Lock of
// the name in this process does not wait for a dead local holder.
func TestReleaseFailingWithinCallerDeadlineIsSettled(t *testing.T) {
	ts := startServer(t)
	relCtx := ctxT(t, 300*time.Millisecond)
	c := dial(t, ts.addr, client.WithDialOptions(client.UnaryOnly(), failRelease(func() bool { return relCtx.Err() == nil })))
	l, err := c.Lock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(relCtx); err != nil {
		t.Fatalf("Release settled after the caller's deadline: %v, want nil", err)
	}
	if !errors.Is(l.Err(), client.ErrReleased) {
		t.Fatalf("Err after the settled release: %v", l.Err())
	}
	if _, err := dial(t, ts.addr).TryLock(ctxT(t, 5*time.Second), "x"); err != nil {
		t.Fatalf("lock not free after the settled release: %v", err)
	}
}

// TestReleaseNeverConfirmedEndsSession: Release never reaches the server.
// The lease must not report itself valid, the session is given up (revoked
// or left to expire), and the next Lock of the name in this process gets
// the lock instead of blocking on the old local holder.
func TestReleaseNeverConfirmedEndsSession(t *testing.T) {
	ts := startServer(t)
	var failing atomic.Bool
	failing.Store(true)
	c := dial(t, ts.addr, client.WithTTL(2*time.Second), client.WithDialOptions(client.UnaryOnly(), failRelease(failing.Load)), client.WithSettleFor(300*time.Millisecond))
	l, err := c.Lock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctxT(t, 200*time.Millisecond)); err == nil {
		t.Fatal("Release that never reached the server returned nil")
	}
	if err := l.Err(); err == nil {
		t.Fatal("a lease whose release failed still reports itself valid")
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done not closed after the failed release")
	}
	failing.Store(false)
	l2, err := c.Lock(ctxT(t, 10*time.Second), "x")
	if err != nil {
		t.Fatalf("next Lock of the name after the failed release: %v", err)
	}
	if l2.Token() <= l.Token() || l2.LeaseNumber() == l.LeaseNumber() {
		t.Fatalf("next grant: token %d lease #%d after token %d lease #%d", l2.Token(), l2.LeaseNumber(), l.Token(), l.LeaseNumber())
	}
}

// TestLockTimeoutUnderContentionKeepsSession: a Lock that times out while
// another client holds the lock is settled (the server cancelled the wait)
// without giving up the session: the caller's other lease lives on, and the
// lock is granted to the next caller once free.
func TestLockTimeoutUnderContentionKeepsSession(t *testing.T) {
	ts := startServer(t)
	holder := dial(t, ts.addr)
	held, err := holder.Lock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, ts.addr)
	other, err := c.Lock(ctxT(t, 5*time.Second), "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lock(ctxT(t, 300*time.Millisecond), "x"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock of a held lock at its deadline: %v, want DeadlineExceeded", err)
	}
	if err := other.Err(); err != nil {
		t.Fatalf("the session was given up after a settled timeout: %v", err)
	}
	if err := held.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	l, err := dial(t, ts.addr).TryLock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatalf("after the holder released, the lock is not free (a ghost wait was granted?): %v", err)
	}
	if l.Token() != held.Token()+2 {
		t.Fatalf("token %d, want %d (grants: x, a, then this)", l.Token(), held.Token()+2)
	}
}

// TestLockDetachedLostReplyLeavesNoGhost: LockDetached's grant reply is lost
// at the caller's deadline and the first Revoke of its lease fails (a
// failover); the lease must still be revoked, not left holding the lock for
// its whole TTL.
func TestLockDetachedLostReplyLeavesNoGhost(t *testing.T) {
	ts := startServer(t)
	var revokes atomic.Int32
	failFirstRevoke := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == api.FenceService_Revoke_FullMethodName && revokes.Add(1) == 1 {
			return status.Error(codes.Unavailable, "injected: failover")
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	c := dial(t, ts.addr, client.WithDialOptions(client.UnaryOnly(), loseFirstAcquireReply(false), failFirstRevoke))
	if d, err := c.LockDetached(ctxT(t, 300*time.Millisecond), "x", time.Hour, false); err == nil {
		t.Fatalf("LockDetached succeeded (token %d) although its reply was lost", d.Token)
	}
	if _, err := dial(t, ts.addr).TryLock(ctxT(t, 5*time.Second), "x"); err != nil {
		t.Fatalf("after the lost LockDetached, the lock is not free: %v", err)
	}
}

// TestGiveBackRefusedEndsSession: a TryLock's grant is made but its reply is
// lost; the client settles it (granted after all) and gives the grant back,
// but the server refuses that Release with a definitive error other than
// "lease gone" or "grant gone". The grant would then stay held by a session
// that keeps renewing, with no caller: the client must give up the session,
// so the server ends it and the next waiter gets the lock.
func TestGiveBackRefusedEndsSession(t *testing.T) {
	ts := startServer(t)
	refuseRelease := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == api.FenceService_Release_FullMethodName {
			return status.Error(codes.ResourceExhausted, "injected: release refused")
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	c := dial(t, ts.addr, client.WithTTL(time.Minute), client.WithDialOptions(client.UnaryOnly(), loseFirstAcquireReply(false), refuseRelease))
	if l, err := c.TryLock(ctxT(t, 300*time.Millisecond), "x"); err == nil {
		t.Fatalf("TryLock succeeded (token %d) although its reply was lost", l.Token())
	}
	// Well inside the holder's 1-minute TTL: only giving up the session frees it.
	l, err := dial(t, ts.addr).Lock(ctxT(t, 10*time.Second), "x")
	if err != nil {
		t.Fatalf("the grant given back in vain still holds the lock: %v", err)
	}
	if l.Token() != 2 {
		t.Fatalf("next grant has token %d, want 2 (the lost grant had 1)", l.Token())
	}
}

// TestReleaseSettledAfterSeveralAttempts: Release cannot reach the server
// for 1.5 s, longer than one settle attempt (1 s) but inside the settle
// bound (5 s). The client keeps settling while the session lives, and the
// release succeeds; it does not give up the session after one attempt.
func TestReleaseSettledAfterSeveralAttempts(t *testing.T) {
	ts := startServer(t)
	var until atomic.Int64 // unix nanos until which releases fail; 0 before Release
	c := dial(t, ts.addr, client.WithDialOptions(client.UnaryOnly(), failRelease(func() bool { return time.Now().UnixNano() < until.Load() })))
	l, err := c.Lock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Lock(ctxT(t, 5*time.Second), "y")
	if err != nil {
		t.Fatal(err)
	}
	until.Store(time.Now().Add(1500 * time.Millisecond).UnixNano())
	if err := l.Release(ctxT(t, 200*time.Millisecond)); err != nil {
		t.Fatalf("Release unreachable for 1.5s: %v, want it settled", err)
	}
	if err := other.Err(); err != nil {
		t.Fatalf("the session was given up: %v", err)
	}
}

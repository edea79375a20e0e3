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
	"github.com/fencehq/fence/internal/clock/clocktest"
	"github.com/fencehq/fence/internal/locktest"
)

// TestLockDetached: a detached lock is granted under a lease of its own,
// with the first token and the TTL asked for; a second TryLock-style
// attempt on the held lock fails with a *LockedError naming the holder.
func TestLockDetached(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr)
	d, err := c.LockDetached(ctxT(t, 5*time.Second), "job", 7*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "job" || d.Token != 1 || d.LeaseNumber != 1 || d.TTL != 7*time.Second || len(d.Secret) != 32 {
		t.Fatalf("detached grant %+v, want job, token 1, lease #1, 7s, a 16-byte secret", d)
	}
	_, err = c.LockDetached(ctxT(t, 5*time.Second), "job", 7*time.Second, false)
	var held *client.LockedError
	if !errors.Is(err, client.ErrLocked) || !errors.As(err, &held) || held.HolderLease != 1 || held.Token != 1 {
		t.Fatalf("second detached lock of a held name: %v, want a LockedError naming lease #1 token 1", err)
	}
}

// recorder is an Observer that keeps what it was told.
type recorder struct {
	mu      sync.Mutex
	waits   []bool
	renewed []bool
}

func (r *recorder) RenewalSent(ok bool) {
	r.mu.Lock()
	r.renewed = append(r.renewed, ok)
	r.mu.Unlock()
}
func (r *recorder) LeaseLost(error) {}
func (r *recorder) AcquireWait(_ time.Duration, granted bool) {
	r.mu.Lock()
	r.waits = append(r.waits, granted)
	r.mu.Unlock()
}

// TestObserverAcquireWait: the observer hears each Lock/TryLock with whether
// it was granted.
func TestObserverAcquireWait(t *testing.T) {
	ts := startServer(t)
	rec := &recorder{}
	c := dial(t, ts.addr, client.WithObserver(rec))
	if _, err := c.TryLock(ctxT(t, 5*time.Second), "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, ts.addr, client.WithObserver(rec)).TryLock(ctxT(t, 5*time.Second), "x"); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("TryLock of a held lock: %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.waits) != 2 || !rec.waits[0] || rec.waits[1] {
		t.Fatalf("AcquireWait granted flags %v, want [true false]", rec.waits)
	}
}

// TestServerCancelledCallRetried: a call the server ended with CANCELLED
// (it was shutting down, say) while the caller's context is alive is sent
// again, and succeeds; the lease is the first grant, not a settled ghost.
func TestServerCancelledCallRetried(t *testing.T) {
	ts := startServer(t)
	var cancelled atomic.Int32
	once := grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == api.FenceService_Acquire_FullMethodName && cancelled.Add(1) == 1 {
			return status.Error(codes.Canceled, "injected: the server cancelled the call")
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	c := dial(t, ts.addr, client.WithDialOptions(once, client.UnaryOnly()))
	l, err := c.TryLock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatalf("TryLock after one server-side CANCELLED: %v", err)
	}
	if l.Token() != 1 || cancelled.Load() != 2 {
		t.Fatalf("token %d after %d Acquire attempts, want token 1 after 2", l.Token(), cancelled.Load())
	}
}

// TestCloseReportsUnrevokedLease: Close with the server gone cannot revoke
// the lease and says so; with the server up it revokes and returns nil.
func TestCloseReportsUnrevokedLease(t *testing.T) {
	ts := startServer(t)
	up := dial(t, ts.addr)
	if _, err := up.TryLock(ctxT(t, 5*time.Second), "a"); err != nil {
		t.Fatal(err)
	}
	if err := up.Close(); err != nil {
		t.Fatalf("Close with the server up: %v", err)
	}
	down := dial(t, ts.addr)
	if _, err := down.TryLock(ctxT(t, 5*time.Second), "b"); err != nil {
		t.Fatal(err)
	}
	ts.stop()
	if err := down.Close(); err == nil {
		t.Fatal("Close with the server gone returned nil, as if the lease were revoked")
	}
}

// TestCloseAfterServerExpiry: the server expired the lease (its fake clock
// stood still, so the client never renewed nor noticed); Close finds it gone
// (NOT_FOUND), which is what it wanted, and returns nil.
func TestCloseAfterServerExpiry(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr, client.WithClock(clocktest.New()), client.WithTTL(200*time.Millisecond))
	if _, err := c.TryLock(ctxT(t, 5*time.Second), "x"); err != nil {
		t.Fatal(err)
	}
	watcher := dial(t, ts.addr)
	waitFor(func() bool { // the server's real-time expiry; no bound: the test deadline catches a hang
		info, err := watcher.Status(ctxT(t, 5*time.Second), "x")
		return err == nil && !info.Held()
	})
	if err := c.Close(); err != nil {
		t.Fatalf("Close of a lease the server had ended: %v, want nil", err)
	}
}

// TestAdminToken: a server that requires an admin token accepts
// ForceRelease from a client that has it and refuses one that has not.
func TestAdminToken(t *testing.T) {
	cfg := locktest.Config(t.TempDir())
	cfg.MinTTL, cfg.TickInterval, cfg.DefaultLockDelay, cfg.AdminToken = 200*time.Millisecond, 20*time.Millisecond, 0, "s3cret"
	ts := &testServer{t: t, cfg: cfg}
	ts.start()
	t.Cleanup(ts.stop)
	addr := ts.srv.GRPCAddr()
	if _, err := dial(t, addr).TryLock(ctxT(t, 5*time.Second), "x"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := dial(t, addr).ForceRelease(ctxT(t, 5*time.Second), "x", "test"); err == nil {
		t.Fatal("ForceRelease without the admin token was accepted")
	}
	if _, released, err := dial(t, addr, client.WithAdminToken("s3cret")).ForceRelease(ctxT(t, 5*time.Second), "x", "test"); err != nil || len(released) != 1 {
		t.Fatalf("ForceRelease with the admin token: %v %v", released, err)
	}
}

// TestUnlockDetached: unlock names the lock it released; a second unlock of
// the same lease releases nothing and says so with ErrNotHeld, not ErrExpired.
func TestUnlockDetached(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr)
	d, err := c.LockDetached(ctxT(t, 5*time.Second), "job", 7*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	if released, err := c.UnlockDetached(ctxT(t, 5*time.Second), d.Secret); err != nil || len(released) != 1 || released[0] != "job" {
		t.Fatalf("unlock: %v %v, want [job]", released, err)
	}
	if released, err := c.UnlockDetached(ctxT(t, 5*time.Second), d.Secret); !errors.Is(err, client.ErrNotHeld) || errors.Is(err, client.ErrExpired) || released != nil {
		t.Fatalf("second unlock: %v %v, want ErrNotHeld (and not ErrExpired)", released, err)
	}
	if _, err := c.UnlockDetached(ctxT(t, 5*time.Second), "zz"); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("unlock of a non-secret: %v, want ErrInvalid", err)
	}
}

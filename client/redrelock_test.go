package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/client"
)

// holdReleases is a unary interceptor that, while armed, stops each
// Release RPC just before it is sent: it reports the arrival on arrived and
// waits for proceed to close.
type holdReleases struct {
	armed   atomic.Bool
	arrived chan struct{}
	proceed chan struct{}
}

func newHoldReleases() *holdReleases {
	return &holdReleases{arrived: make(chan struct{}, 1), proceed: make(chan struct{})}
}

func (h *holdReleases) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if strings.HasSuffix(method, "/Release") && h.armed.Load() {
		h.arrived <- struct{}{}
		<-h.proceed
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// TestRelockRacesRelease: a Release of a Lease and a Relock of the same
// Lease, called together. The server's Release names the lock, not the
// token, so a Release sent after the Relock was granted would end the NEW
// grant, while the Relock's caller holds a Lease that reports itself valid
// and another client is granted the lock. Whatever the interleaving, a
// Lease the client reports valid must be held on the server. Here the
// Release has passed its checks and is about to be sent when Relock is
// called: Relock refuses (ErrReleased: the Lease is being released), and
// the Release frees the lock.
func TestRelockRacesRelease(t *testing.T) {
	ts := startServer(t)
	h := newHoldReleases()
	a := dial(t, ts.addr, client.WithDialOptions(client.UnaryOnly(), grpc.WithChainUnaryInterceptor(h.intercept)))
	admin := dial(t, ts.addr)
	l, err := a.Lock(ctxT(t, 5*time.Second), "loop")
	if err != nil {
		t.Fatal(err)
	}
	h.armed.Store(true)
	released := make(chan error, 1)
	go func() { released <- l.Release(ctxT(t, 5*time.Second)) }()
	<-h.arrived // the Release is on its way
	nl, rerr := l.Relock(ctxT(t, 5*time.Second))
	h.armed.Store(false)
	close(h.proceed)
	if err := <-released; err != nil {
		t.Fatalf("release: %v", err)
	}
	st, err := admin.Status(ctxT(t, 5*time.Second), "loop")
	if err != nil {
		t.Fatal(err)
	}
	if nl != nil && nl.Err() == nil {
		if len(st.Grants) != 1 || st.Grants[0].Token != nl.Token() {
			t.Fatalf("the relocked Lease (token %d) reports itself valid, but the server has %+v: the Release ended the new grant", nl.Token(), st)
		}
		return
	}
	if !errors.Is(rerr, client.ErrReleased) {
		t.Fatalf("relock during a release: %v, want ErrReleased", rerr)
	}
	if st.Held() || st.Waiters != 0 {
		t.Fatalf("after the release: %+v, want the lock free", st)
	}
}

// TestQueuedRelockSurvivesServerRestart: like a waiting Lock
// (TestWaitingLockSurvivesServerRestart), a Relock queued behind a waiter
// keeps waiting across a restart of the server (its handler ends and
// cancels the queued call): it is granted, with a larger token, once the
// waiter that went first releases.
func TestQueuedRelockSurvivesServerRestart(t *testing.T) {
	ts := startServer(t)
	a := dial(t, ts.addr, client.WithTTL(10*time.Second))
	b := dial(t, ts.addr, client.WithTTL(10*time.Second))
	admin := dial(t, ts.addr)
	held, err := a.Lock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	waiter := lockInBackground(t, b, "x", 30*time.Second)
	waitFor(func() bool {
		st, err := admin.Status(ctxT(t, time.Second), "x")
		return err == nil && st.Waiters == 1
	})
	relocked := make(chan error, 1)
	var nl *client.Lease
	go func() {
		var err error
		nl, err = held.Relock(ctxT(t, 30*time.Second))
		relocked <- err
	}()
	bl := <-waiter
	if bl == nil {
		t.Fatal("the waiter was not granted")
	}
	waitFor(func() bool {
		st, err := admin.Status(ctxT(t, time.Second), "x")
		return err == nil && st.Waiters == 1
	})
	ts.stop()
	ts.start()
	if err := bl.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatalf("release after restart: %v", err)
	}
	if err := <-relocked; err != nil {
		t.Fatalf("the relock queued across a restart: %v, want a grant (a Lock keeps waiting)", err)
	}
	if nl.Token() <= bl.Token() || nl.Err() != nil {
		t.Fatalf("relock after restart: token %d (%v), want a live grant above %d", nl.Token(), nl.Err(), bl.Token())
	}
}

// dropQueuedRelock is a unary interceptor that cuts the first relock (an
// Acquire with release_token) off once it is queued: it cancels the call,
// waits until the server's handler has withdrawn it from the queue (as a
// handler whose connection dropped does), and answers Unavailable, so the
// client sends the same request again.
type dropQueuedRelock struct {
	queued  func() bool // the relock waits in the queue
	gone    func() bool // it has left the queue
	dropped atomic.Bool // the first relock was seen
	cut     atomic.Bool // and withdrawn from the queue
}

func (d *dropQueuedRelock) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	r, ok := req.(*api.AcquireRequest)
	if !ok || r.GetReleaseToken() == 0 || d.dropped.Swap(true) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- invoker(cctx, method, req, reply, cc, opts...) }()
	waitFor(d.queued)
	cancel()
	<-done
	waitFor(d.gone)
	d.cut.Store(true)
	return status.Error(codes.Unavailable, "test: the connection dropped")
}

// TestQueuedRelockSurvivesADroppedCall: a Relock queued behind a waiter
// whose call is cut off (the server's handler ends and withdraws it from
// the queue, so the same request sent again answers that its wait was
// cancelled) keeps waiting, as a Lock does, with a new call: the old grant
// was released by the relock, so what is left is a Lock. It is granted
// once the waiter that went first releases.
func TestQueuedRelockSurvivesADroppedCall(t *testing.T) {
	ts := startServer(t)
	admin := dial(t, ts.addr)
	waiters := func(n int) func() bool {
		return func() bool {
			st, err := admin.Status(ctxT(t, time.Second), "x")
			return err == nil && st.Waiters == n
		}
	}
	d := &dropQueuedRelock{gone: waiters(0)}
	a := dial(t, ts.addr, client.WithDialOptions(client.UnaryOnly(), grpc.WithChainUnaryInterceptor(d.intercept)))
	b := dial(t, ts.addr)
	held, err := a.Lock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	d.queued = func() bool { // b holds x, a's relock waits
		st, err := admin.Status(ctxT(t, time.Second), "x")
		return err == nil && st.Waiters == 1 && st.HolderLease != held.LeaseNumber()
	}
	waiter := lockInBackground(t, b, "x", 30*time.Second)
	waitFor(waiters(1))
	relocked := make(chan error, 1)
	var nl *client.Lease
	go func() {
		var err error
		nl, err = held.Relock(ctxT(t, 30*time.Second))
		relocked <- err
	}()
	bl := <-waiter
	if bl == nil {
		t.Fatal("the waiter was not granted")
	}
	ended := false
	waitFor(func() bool { // the relock waits again (or has given up)
		if len(relocked) > 0 {
			ended = true
			return true
		}
		return d.cut.Load() && waiters(1)()
	})
	if !ended {
		if err := bl.Release(ctxT(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-relocked; err != nil {
		t.Fatalf("a relock whose queued call was cut off: %v, want a grant (a Lock keeps waiting)", err)
	}
	if nl.Token() <= bl.Token() || nl.Err() != nil {
		t.Fatalf("relock: token %d (%v), want a live grant above %d", nl.Token(), nl.Err(), bl.Token())
	}
	if err := nl.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if st, err := admin.Status(ctxT(t, 5*time.Second), "x"); err != nil || st.Held() || st.Waiters != 0 {
		t.Fatalf("after the release: %+v %v", st, err)
	}
}

// TestRelockCancelledWhileQueued: a Relock queued behind a waiter whose ctx
// ends returns the context's error; the old Lease is over (ErrReleased),
// the call leaves the server's queue (like an interrupted Lock: nothing of
// this Client waits or holds), and the Client's local claim on the name is
// freed, so the waiter's release leaves the lock free and this Client can
// lock it again.
func TestRelockCancelledWhileQueued(t *testing.T) {
	ts := startServer(t)
	a, b, admin := dial(t, ts.addr), dial(t, ts.addr), dial(t, ts.addr)
	held, err := a.Lock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	waiter := lockInBackground(t, b, "x", 30*time.Second)
	waitFor(func() bool {
		st, err := admin.Status(ctxT(t, time.Second), "x")
		return err == nil && st.Waiters == 1
	})
	ctx, cancel := context.WithCancel(context.Background())
	relocked := make(chan error, 1)
	go func() {
		_, err := held.Relock(ctx)
		relocked <- err
	}()
	bl := <-waiter
	if bl == nil {
		t.Fatal("the waiter was not granted")
	}
	waitFor(func() bool { // the relock waits behind b
		st, err := admin.Status(ctxT(t, time.Second), "x")
		return err == nil && st.Waiters == 1
	})
	cancel()
	if err := <-relocked; !errors.Is(err, context.Canceled) {
		t.Fatalf("a relock cancelled while queued: %v, want context.Canceled", err)
	}
	if !errors.Is(held.Err(), client.ErrReleased) {
		t.Fatalf("the old lease: %v, want ErrReleased", held.Err())
	}
	if st, err := admin.Status(ctxT(t, 5*time.Second), "x"); err != nil || st.Waiters != 0 || st.HolderLease != bl.LeaseNumber() {
		t.Fatalf("after the cancelled relock: %+v %v, want b alone holding and nobody waiting", st, err)
	}
	if err := bl.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if st, err := admin.Status(ctxT(t, 5*time.Second), "x"); err != nil || st.Held() || st.Waiters != 0 {
		t.Fatalf("after b's release: %+v %v, want the lock free", st, err)
	}
	again, err := a.TryLock(ctxT(t, 5*time.Second), "x")
	if err != nil || again.Token() <= bl.Token() {
		t.Fatalf("TryLock after the cancelled relock: %v %v", again, err)
	}
}

// TestReleaseInFlightDuringARevoke: the same hazard as
// TestRelockRacesRelease without a relock. A Release is on its way when an
// admin force-releases the grant and the session learns of it (the Lease
// ends, ErrRevoked); another caller of the Client then takes the name in
// the same session. The late Release names the lock, not the grant: it
// must not end that caller's new grant, so the Client keeps its local
// claim on the name until the Release has returned (TryLock meanwhile is
// told the name is taken locally), and frees it then.
func TestReleaseInFlightDuringARevoke(t *testing.T) {
	ts := startServer(t)
	h := newHoldReleases()
	a := dial(t, ts.addr, client.WithTTL(600*time.Millisecond), client.WithDialOptions(client.UnaryOnly(), grpc.WithChainUnaryInterceptor(h.intercept)))
	admin := dial(t, ts.addr)
	l, err := a.Lock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	h.armed.Store(true)
	released := make(chan error, 1)
	go func() { released <- l.Release(ctxT(t, 10*time.Second)) }()
	<-h.arrived // the Release is on its way
	if _, _, err := admin.ForceReleaseGrant(ctxT(t, 5*time.Second), "x", l.Token(), "test"); err != nil {
		t.Fatal(err)
	}
	waitFor(func() bool { return errors.Is(l.Err(), client.ErrRevoked) }) // the next renewal tells
	nl, err := a.TryLock(ctxT(t, 5*time.Second), "x")
	h.armed.Store(false)
	close(h.proceed)
	<-released
	st, serr := admin.Status(ctxT(t, 5*time.Second), "x")
	if serr != nil {
		t.Fatal(serr)
	}
	if nl != nil {
		if nl.Err() == nil && (len(st.Grants) != 1 || st.Grants[0].Token != nl.Token()) {
			t.Fatalf("the new Lease (token %d) reports itself valid, but the server has %+v: the late Release ended it", nl.Token(), st)
		}
		t.Fatalf("TryLock while a Release of the name was on its way: granted token %d, want a local LockedError", nl.Token())
	}
	var local *client.LockedError
	if !errors.As(err, &local) || !local.Local {
		t.Fatalf("TryLock while a Release of the name was on its way: %v, want a local LockedError", err)
	}
	again, err := a.TryLock(ctxT(t, 5*time.Second), "x")
	if err != nil || again.Token() <= l.Token() {
		t.Fatalf("TryLock after the Release returned: %v %v", again, err)
	}
}

// dropRelockReply is a unary interceptor that lets the first relock act on
// the server, then loses its answer (Unavailable) after calling between, so
// the client sends the same request again.
type dropRelockReply struct {
	between func(granted uint64)
	dropped atomic.Bool
}

func (d *dropRelockReply) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	r, ok := req.(*api.AcquireRequest)
	if !ok || r.GetReleaseToken() == 0 || d.dropped.Swap(true) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
		return err
	}
	d.between(reply.(*api.AcquireResponse).GetToken())
	return status.Error(codes.Unavailable, "test: the answer was lost")
}

// TestRelockWhoseNewGrantEndedBeforeTheRetry: a relock acts (the old grant
// released, a new one granted), its answer is lost, and an admin
// force-releases the new grant before the client's retry, which the server
// answers "this call's grant has already ended" (FAILED_PRECONDITION, as a
// refused relock, but with a GrantEnded detail). The client must not report
// ErrRevoked — which says the old grant had ended before and nothing was
// released or queued (the chaos worker records the release as failed on
// it) — but that the relock was granted the new token, which has ended.
func TestRelockWhoseNewGrantEndedBeforeTheRetry(t *testing.T) {
	ts := startServer(t)
	admin := dial(t, ts.addr)
	var granted uint64
	d := &dropRelockReply{between: func(tok uint64) {
		granted = tok
		if _, _, err := admin.ForceReleaseGrant(ctxT(t, 5*time.Second), "x", tok, "test"); err != nil {
			t.Error(err)
		}
	}}
	a := dial(t, ts.addr, client.WithDialOptions(client.UnaryOnly(), grpc.WithChainUnaryInterceptor(d.intercept)))
	l, err := a.Lock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Relock(ctxT(t, 5*time.Second))
	if err == nil || errors.Is(err, client.ErrRevoked) || !strings.Contains(err.Error(), fmt.Sprintf("was granted token %d", granted)) {
		t.Fatalf("relock whose new grant (token %d) ended before the retry: %v, want an error naming that grant, not ErrRevoked", granted, err)
	}
	if st, err := admin.Status(ctxT(t, 5*time.Second), "x"); err != nil || st.Held() || st.Waiters != 0 {
		t.Fatalf("after: %+v %v, want the lock free", st, err)
	}
	if again, err := a.TryLock(ctxT(t, 5*time.Second), "x"); err != nil || again.Token() <= granted {
		t.Fatalf("TryLock after: %v %v", again, err)
	}
}

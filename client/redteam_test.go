package client_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/client"
)

// Red-team tests: each one reproduced a violation of a stated property (a red
// team on the call-numbering change found them; each failed before its fix).
// The comments describe the hole as it was.

// One Lock that waits for a busy lock (its call stays unanswered, so the
// session's ack cannot pass it) while the same session keeps taking and
// releasing another lock: after ~1024 calls the server refuses every call of
// the session with RESOURCE_EXHAUSTED, and Release of a held lock makes the
// client abandon the whole session. Nothing was wrong with the client's use:
// one waiting Lock plus ordinary work.
func TestRedteamWaitingLockWedgesSession(t *testing.T) {
	ts := startServer(t)
	other := dial(t, ts.addr, client.WithOwner("other"), client.WithTTL(time.Minute))
	busy, err := other.Lock(ctxT(t, 5*time.Second), "busy")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Release(context.Background())

	c := dial(t, ts.addr, client.WithTTL(time.Minute))
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waited := make(chan error, 1)
	go func() { _, err := c.Lock(wctx, "busy"); waited <- err }()
	time.Sleep(200 * time.Millisecond) // the Lock is queued on the server

	for i := range 700 { // 1,400 calls, as TestManyCallsOnOneSession makes without a waiting Lock
		l, err := c.TryLock(ctxT(t, 5*time.Second), "x")
		if err != nil {
			t.Fatalf("while one Lock waits, call %d (TryLock) failed: %v", 2*i+1, err)
		}
		if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
			t.Fatalf("while one Lock waits, call %d (Release of a held lock) failed: %v", 2*i+2, err)
		}
	}
}

// halfOpenFirstWait models a connection that died on the client's side only:
// the first waiting Acquire reaches the server and stays open there (the
// server has no keepalive of its own, so it learns of a dead peer only from
// TCP, minutes later), while the client sees UNAVAILABLE at once and retries.
// After a while the server's side of the first attempt ends too.
func halfOpenFirstWait(serverNotices time.Duration) grpc.DialOption {
	var once sync.Once
	return grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if r, ok := req.(*api.AcquireRequest); ok && r.Wait {
			first := false
			once.Do(func() { first = true })
			if first {
				sctx, cancel := context.WithCancel(context.Background())
				go func() { _ = invoker(sctx, method, proto.Clone(r), new(api.AcquireResponse), cc, opts...) }()
				time.AfterFunc(serverNotices, cancel)
				time.Sleep(200 * time.Millisecond) // it is queued on the server
				return status.Error(codes.Unavailable, "injected: connection lost (client side)")
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
}

// The client's retry of its waiting Lock shares the server's queue entry
// with the first attempt; when the server finally ends the first attempt it
// cancels that entry, and the retry, which nothing wakes, waits for a grant
// that never comes: the lock goes free and Lock still blocks (here until its
// 4 s deadline; without a deadline, forever).
func TestRedteamLockHangsAfterHalfOpenConnection(t *testing.T) {
	ts := startServer(t)
	other := dial(t, ts.addr, client.WithOwner("other"))
	busy, err := other.Lock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, ts.addr, client.WithDialOptions(halfOpenFirstWait(600*time.Millisecond)))
	got := make(chan error, 1)
	start := time.Now()
	go func() {
		l, err := c.Lock(ctxT(t, 4*time.Second), "x")
		if err == nil {
			l.Release(context.Background())
		}
		got <- err
	}()
	time.Sleep(time.Second) // retry waiting; the first attempt's server side ended
	if err := busy.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	freed := time.Since(start)
	if err := <-got; err != nil {
		t.Fatalf("Lock failed after %v although the lock went free at %v and nobody else wanted it: %v", time.Since(start).Round(time.Millisecond), freed.Round(time.Millisecond), err)
	}
}

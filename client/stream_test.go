package client_test

import (
	"context"
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
)

// onSessionRecv wraps every Session stream the client opens: recv sees
// each answer it reads (m, after a successful read) and may replace the
// read's error.
func onSessionRecv(recv func(m *api.SessionResponse, err error) error) grpc.DialOption {
	return grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || method != api.FenceService_Session_FullMethodName {
			return cs, err
		}
		return &recvHook{ClientStream: cs, recv: recv}, nil
	})
}

type recvHook struct {
	grpc.ClientStream
	recv func(*api.SessionResponse, error) error
}

func (h *recvHook) RecvMsg(m any) error {
	err := h.ClientStream.RecvMsg(m)
	return h.recv(m.(*api.SessionResponse), err)
}

// countUnary counts the unary calls of method the client makes.
func countUnary(method string, n *atomic.Int32) grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if m == method {
			n.Add(1)
		}
		return invoker(ctx, m, req, reply, cc, opts...)
	})
}

// TestSessionStreamBrokenAfterGrantYieldsOneGrant: the Session stream
// breaks after the server granted an Acquire and before its answer
// arrives; the client retries on a new stream with the same request id and
// gets that grant, never a second one. No unary Acquire is made.
func TestSessionStreamBrokenAfterGrantYieldsOneGrant(t *testing.T) {
	ts := startServer(t)
	var (
		mu      sync.Mutex
		dropped *api.AcquireResponse
		unary   atomic.Int32
	)
	breakOnce := onSessionRecv(func(m *api.SessionResponse, err error) error {
		mu.Lock()
		defer mu.Unlock()
		if err == nil && m.GetAcquire() != nil && dropped == nil {
			dropped = m.GetAcquire()
			return status.Error(codes.Unavailable, "injected: the stream broke before the answer arrived")
		}
		return err
	})
	c := dial(t, ts.addr, client.WithDialOptions(breakOnce, countUnary(api.FenceService_Acquire_FullMethodName, &unary)))
	l, err := c.Lock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	lost := dropped
	mu.Unlock()
	if lost == nil || l.Token() != lost.Token {
		t.Fatalf("got token %d; the lost answer had %v", l.Token(), lost)
	}
	if n := unary.Load(); n != 0 {
		t.Fatalf("%d unary Acquire calls, want all on the Session stream", n)
	}
	other := dial(t, ts.addr)
	l2, err := other.TryLock(ctxT(t, 5*time.Second), "y")
	if err != nil || l2.Token() != l.Token()+1 {
		t.Fatalf("next grant token %d, want %d (err %v): the retry was granted again", l2.Token(), l.Token()+1, err)
	}
	if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatalf("release on the new stream: %v", err)
	}
}

// TestSessionStreamFallsBackToUnary: a server without the Session rpc
// answers UNIMPLEMENTED, at the stream's first read (as gRPC does) or as it
// opens; the client then locks and releases with unary calls.
func TestSessionStreamFallsBackToUnary(t *testing.T) {
	ts := startServer(t)
	older := onSessionRecv(func(*api.SessionResponse, error) error {
		return status.Error(codes.Unimplemented, "unknown method Session for service fence.v1.FenceService")
	})
	for name, opt := range map[string]grpc.DialOption{"at the first read": older, "as it opens": client.UnaryOnly()} {
		var acquires, releases atomic.Int32
		c := dial(t, ts.addr, client.WithDialOptions(opt, countUnary(api.FenceService_Acquire_FullMethodName, &acquires),
			countUnary(api.FenceService_Release_FullMethodName, &releases)))
		l, err := c.Lock(ctxT(t, 5*time.Second), "fallback")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
			t.Fatalf("%s: release: %v", name, err)
		}
		if acquires.Load() != 1 || releases.Load() != 1 {
			t.Fatalf("%s: %d unary Acquires and %d Releases, want 1 and 1", name, acquires.Load(), releases.Load())
		}
	}
}

// TestSessionStreamCancelledWaitLeavesQueue: a Lock on the stream whose
// context ends leaves the server's queue (the client sends a cancel, and
// one for the settle's attempt), so its outcome settles as "not granted"
// and the session lives on; without the cancel the wait would stay queued
// while the stream lives, the settle would fail and give the session up.
func TestSessionStreamCancelledWaitLeavesQueue(t *testing.T) {
	ts := startServer(t)
	holder, waiter := dial(t, ts.addr), dial(t, ts.addr)
	l, err := holder.Lock(ctxT(t, 5*time.Second), "q")
	if err != nil {
		t.Fatal(err)
	}
	mine, err := waiter.Lock(ctxT(t, 5*time.Second), "mine") // the waiter's session
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := waiter.Lock(ctx, "q"); done <- err }()
	waitFor(func() bool {
		st, err := holder.Status(ctxT(t, 5*time.Second), "q")
		return err == nil && len(st.Queue) == 1
	})
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled Lock succeeded")
	}
	if err := mine.Err(); err != nil {
		t.Fatalf("the cancelled wait gave the session up: %v", err)
	}
	waitFor(func() bool {
		st, err := holder.Status(ctxT(t, 5*time.Second), "q")
		return err == nil && len(st.Queue) == 0
	})
	if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// countStreams counts the streams of method the client opens.
func countStreams(method string, n *atomic.Int32) grpc.DialOption {
	return grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, m string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if m == method {
			n.Add(1)
		}
		return streamer(ctx, desc, cc, m, opts...)
	})
}

// TestSessionStreamCarriesRenewals: a session's renewals travel on its
// Session stream (no KeepAlive stream is opened); against an older server
// they go on a KeepAlive stream, and the lease lives on either way.
func TestSessionStreamCarriesRenewals(t *testing.T) {
	ts := startServer(t)
	for _, older := range []bool{false, true} {
		clk := clocktest.New()
		var keepAlives, renewals atomic.Int32
		opts := []grpc.DialOption{countStreams(api.FenceService_KeepAlive_FullMethodName, &keepAlives),
			onSessionRecv(func(m *api.SessionResponse, err error) error {
				if err == nil && m.GetKeepAlive().GetOk() {
					renewals.Add(1)
				}
				return err
			})}
		if older {
			opts = append(opts, client.UnaryOnly())
		}
		c := dial(t, ts.addr, client.WithClock(clk), client.WithTTL(3*time.Second), client.WithDialOptions(opts...))
		l, err := c.Lock(ctxT(t, 5*time.Second), "renewed")
		if err != nil {
			t.Fatal(err)
		}
		before := l.Deadline()
		clk.Advance(time.Second) // TTL/3: a renewal
		waitFor(func() bool { return l.Deadline().After(before) })
		switch {
		case !older && (keepAlives.Load() != 0 || renewals.Load() == 0):
			t.Fatalf("%d KeepAlive streams and %d renewals on the Session stream, want 0 and some", keepAlives.Load(), renewals.Load())
		case older && (keepAlives.Load() == 0 || renewals.Load() != 0):
			t.Fatalf("older server: %d KeepAlive streams and %d renewals on a Session stream, want some and 0", keepAlives.Load(), renewals.Load())
		}
		if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
}

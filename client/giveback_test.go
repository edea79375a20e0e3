package client_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/client"
)

// TestGiveBackRefusedEndsSession: a TryLock's grant is made but its reply is
// lost; the client settles it (granted after all) and gives the grant back,
// but the server refuses that Release with a definitive error other than
// "lease gone" or "grant gone". The grant would then stay held by a session
// that keeps renewing, with no caller: the client must give up the session,
// so the server ends it and the next waiter gets the lock.
func TestGiveBackRefusedEndsSession(t *testing.T) {
	ts := startServer(t)
	var once sync.Once
	refuse := grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		switch method {
		case api.Fence_Acquire_FullMethodName:
			lose := false
			once.Do(func() { lose = true })
			if lose {
				if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
					return err
				}
				<-ctx.Done()
				return status.FromContextError(ctx.Err()).Err()
			}
		case api.Fence_Release_FullMethodName:
			return status.Error(codes.ResourceExhausted, "injected: release refused")
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	c := dial(t, ts.addr, client.WithTTL(time.Minute), client.WithDialOptions(refuse))
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

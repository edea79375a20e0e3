package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/clock/clocktest"
)

// TestSuspendEndsLease: the host sleeps through the lease deadline. Go's
// monotonic clock stood still, boottime did not; on resume the lease must
// say it expired, and Done and the Context must close.
func TestSuspendEndsLease(t *testing.T) {
	ts := startServer(t)
	clk := clocktest.New()
	c := dial(t, ts.addr, client.WithClock(clk), client.WithTTL(10*time.Second))
	l, err := c.Lock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	ctx := l.Context()
	if err := l.Err(); err != nil {
		t.Fatalf("fresh lease: %v", err)
	}
	clk.Suspend(time.Minute)
	if err := l.Err(); !errors.Is(err, client.ErrExpired) {
		t.Fatalf("after a modeled 1m suspend of a 10s lease: Err = %v, want ErrExpired", err)
	}
	<-l.Done() // no time bound: the test's own deadline catches a hang
	<-ctx.Done()
	if !errors.Is(context.Cause(ctx), client.ErrExpired) || !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("lease context: Err %v, Cause %v; want Canceled caused by ErrExpired", ctx.Err(), context.Cause(ctx))
	}
}

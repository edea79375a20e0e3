package client_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"
)

// TestLanesEndAtClose: callers of one Client that hold four permits at
// once use four leases (lanes); Release frees every permit, and Close ends
// every lane's lease on the server and every goroutine the lanes started.
func TestLanesEndAtClose(t *testing.T) {
	ts := startServer(t)
	b := dial(t, ts.addr)
	ignore := goleak.IgnoreCurrent()
	c := dial(t, ts.addr)
	ctx := context.Background()
	sem := c.Semaphore("pool", 4)
	var held []uint64
	for i := range 4 {
		l, err := sem.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l.Slot() != i {
			t.Fatalf("permit %d in slot %d", i, l.Slot())
		}
		held = append(held, l.LeaseNumber())
	}
	if got, err := b.Status(ctx, "pool"); err != nil || len(got.Grants) != 4 {
		t.Fatalf("status %+v %v, want 4 grants", got, err)
	}
	for i := range held {
		for j := range i {
			if held[i] == held[j] {
				t.Fatalf("two permits under lease #%d", held[i])
			}
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Status(ctx, "pool"); err != nil || got.Held() || len(got.Grants) != 0 {
		t.Fatalf("after Close: %+v %v, want no grant", got, err)
	}
	goleak.VerifyNone(t, ignore)
}

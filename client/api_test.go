package client_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
)

// TestTryLockHeldInThisProcess: TryLock of a name another goroutine of the
// same Client holds returns at once with ErrLocked, saying so, instead of
// waiting for the local holder.
func TestTryLockHeldInThisProcess(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr, client.WithOwner("me"))
	held, err := c.Lock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.TryLock(ctxT(t, 5*time.Second), "x")
	var locked *client.LockedError
	if !errors.Is(err, client.ErrLocked) || !errors.As(err, &locked) || !strings.Contains(err.Error(), "this process") ||
		locked.HolderLease != held.LeaseNumber() || locked.Token != held.Token() {
		t.Fatalf("TryLock of a name held in this process: %v", err)
	}
	if err := held.Err(); err != nil {
		t.Fatalf("the holder's lease after the refused TryLock: %v", err)
	}
}

// TestInvalidArgumentMatchesErrInvalid: refusals for bad input match
// ErrInvalid without the caller importing gRPC.
func TestInvalidArgumentMatchesErrInvalid(t *testing.T) {
	ts := startServer(t) // its minimum TTL is 200ms
	c := dial(t, ts.addr)
	if _, err := c.Lock(ctxT(t, 5*time.Second), ""); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("empty lock name: %v, want ErrInvalid", err)
	}
	if _, err := c.TryLock(ctxT(t, 5*time.Second), "x", client.WithTTL(100*time.Millisecond)); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("TTL below the server's minimum: %v, want ErrInvalid", err)
	}
}

// TestSecondReleaseIsNil: releasing twice is not an error.
func TestSecondReleaseIsNil(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr)
	l, err := c.Lock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatalf("second Release: %v, want nil", err)
	}
	if !errors.Is(l.Err(), client.ErrReleased) {
		t.Fatalf("Err after release: %v", l.Err())
	}
}

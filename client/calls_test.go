package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/clock/clocktest"
)

// TestForceReleaseEndsOnlyThatLock: an admin force-release of one lock ends
// that Lease alone (ErrRevoked, at the holder's next renewal); the session
// and its other lock live on. Before, ForceRelease revoked the holder's
// whole lease, releasing every lock of it.
func TestForceReleaseEndsOnlyThatLock(t *testing.T) {
	ts := startServer(t)
	clk := clocktest.New()
	holder := dial(t, ts.addr, client.WithClock(clk), client.WithTTL(3*time.Second))
	admin := dial(t, ts.addr)
	a, err := holder.Lock(ctxT(t, 5*time.Second), "api/a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := holder.Lock(ctxT(t, 5*time.Second), "api/b")
	if err != nil {
		t.Fatal(err)
	}
	info, released, err := admin.ForceRelease(ctxT(t, 5*time.Second), "api/a", "test")
	if err != nil || len(released) != 1 || released[0] != "api/a" || info.Token != a.Token() {
		t.Fatalf("force-release: %+v %v %v", info, released, err)
	}
	if st, err := admin.Status(ctxT(t, 5*time.Second), "api/b"); err != nil || !st.Held() {
		t.Fatalf("api/b after force-releasing api/a: %+v %v", st, err)
	}
	before := b.Deadline()
	clk.Advance(time.Second) // TTL/3: the next renewal tells the holder
	waitFor(func() bool { return a.Err() != nil && b.Deadline().After(before) })
	if !errors.Is(a.Err(), client.ErrRevoked) {
		t.Fatalf("api/a's lease ended with %v, want ErrRevoked", a.Err())
	}
	select {
	case <-a.Done():
	default:
		t.Fatal("api/a's Done is open")
	}
	if err := b.Err(); err != nil {
		t.Fatalf("api/b ended with api/a: %v", err)
	}
	if err := a.Release(ctxT(t, 5*time.Second)); !errors.Is(err, client.ErrRevoked) {
		t.Fatalf("release of the force-released grant: %v, want ErrRevoked", err)
	}
	// Released before the holder heard of it: Release says so and ends only that grant.
	c, err := holder.Lock(ctxT(t, 5*time.Second), "api/c")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := admin.ForceRelease(ctxT(t, 5*time.Second), "api/c", "test"); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctxT(t, 5*time.Second)); !errors.Is(err, client.ErrRevoked) {
		t.Fatalf("release after an unnoticed force-release: %v, want ErrRevoked", err)
	}
	if err := b.Err(); err != nil {
		t.Fatalf("api/b ended with api/c's force-release: %v", err)
	}
	if _, _, err := admin.ForceRelease(ctxT(t, 5*time.Second), "api/a", "again"); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("force-release of a free lock: %v, want ErrNotHeld", err)
	}
}

// TestManyCallsOnOneSession: a session makes far more calls than the server
// remembers unacknowledged (1024); every one succeeds, because each request
// acknowledges the answers the client has.
func TestManyCallsOnOneSession(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr, client.WithTTL(time.Minute))
	for i := range 700 { // 1,400 calls
		l, err := c.TryLock(ctxT(t, 5*time.Second), "x")
		if err != nil {
			t.Fatalf("call %d: %v", 2*i+1, err)
		}
		if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
			t.Fatalf("call %d: %v", 2*i+2, err)
		}
	}
}

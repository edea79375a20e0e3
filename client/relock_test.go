package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
)

// TestRelock: with nobody waiting, Relock is granted again at once with a
// larger token and the old Lease ends (ErrReleased, Done closed); with a
// waiter of another client, the waiter is granted first and the relock
// waits behind it, granted when the waiter releases; the new Lease is a
// lease like any (it holds the Client's local claim on the name, Release
// works, the name is free after).
func TestRelock(t *testing.T) {
	ts := startServer(t)
	a, b, admin := dial(t, ts.addr), dial(t, ts.addr), dial(t, ts.addr)
	first, err := a.Lock(ctxT(t, 5*time.Second), "loop")
	if err != nil {
		t.Fatal(err)
	}
	second, err := first.Relock(ctxT(t, 5*time.Second))
	if err != nil || second.Token() <= first.Token() || second.Name() != "loop" {
		t.Fatalf("relock with nobody waiting: %v %v, want a token above %d", second, err, first.Token())
	}
	// The new grant holds the session's local claim on the name: another
	// caller of this Client is told so at once, with the new token.
	var local *client.LockedError
	if _, err := a.TryLock(ctxT(t, 5*time.Second), "loop"); !errors.As(err, &local) || !local.Local || local.Token != second.Token() {
		t.Fatalf("TryLock beside the relocked grant: %v, want a local LockedError with token %d", err, second.Token())
	}
	if !errors.Is(first.Err(), client.ErrReleased) {
		t.Fatalf("the old lease: %v, want ErrReleased", first.Err())
	}
	select {
	case <-first.Done():
	default:
		t.Fatal("the old lease's Done is open")
	}
	if _, err := first.Relock(ctxT(t, 5*time.Second)); !errors.Is(err, client.ErrReleased) {
		t.Fatalf("relock of a released lease: %v, want ErrReleased", err)
	}

	waiter := lockInBackground(t, b, "loop", 5*time.Second)
	waitFor(func() bool {
		st, err := admin.Status(ctxT(t, time.Second), "loop")
		return err == nil && st.Waiters == 1
	})
	relocked := make(chan *client.Lease, 1)
	go func() {
		l, err := second.Relock(ctxT(t, 5*time.Second))
		if err != nil {
			t.Error(err)
		}
		relocked <- l
	}()
	bl := <-waiter
	if bl == nil || bl.Token() <= second.Token() {
		t.Fatalf("the waiter got %v, want a token above %d", bl, second.Token())
	}
	waitFor(func() bool {
		st, err := admin.Status(ctxT(t, time.Second), "loop")
		return err == nil && st.Waiters == 1
	})
	if err := bl.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	third := <-relocked
	if third == nil || third.Token() <= bl.Token() || third.Err() != nil {
		t.Fatalf("the relock got %v, want a live grant above the waiter's %d", third, bl.Token())
	}
	if err := third.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if st, err := admin.Status(ctxT(t, 5*time.Second), "loop"); err != nil || st.Held() || st.Waiters != 0 {
		t.Fatalf("after the last release: %+v %v", st, err)
	}
}

// TestRelockOfAnEndedGrant: a relock of a grant an admin force-released is
// refused (ErrRevoked) and neither releases nor queues anything; the
// session's local claim on the name is freed, so a Lock of it works.
func TestRelockOfAnEndedGrant(t *testing.T) {
	ts := startServer(t)
	a, admin := dial(t, ts.addr), dial(t, ts.addr)
	l, err := a.Lock(ctxT(t, 5*time.Second), "loop")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := admin.ForceReleaseGrant(ctxT(t, 5*time.Second), "loop", l.Token(), "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Relock(ctxT(t, 5*time.Second)); !errors.Is(err, client.ErrRevoked) {
		t.Fatalf("relock of a force-released grant: %v, want ErrRevoked", err)
	}
	if st, err := admin.Status(ctxT(t, 5*time.Second), "loop"); err != nil || st.Held() || st.Waiters != 0 {
		t.Fatalf("the refused relock changed the lock: %+v %v", st, err)
	}
	again, err := a.TryLock(ctxT(t, 5*time.Second), "loop")
	if err != nil || again.Token() <= l.Token() {
		t.Fatalf("lock after the refused relock: %v %v", again, err)
	}
}

// TestRelockKeepsOptions: a relock asks with the options the lease was
// taken with (a semaphore's permits, a reader's grant); a lease taken
// WithOncePer cannot relock (ErrInvalid) and is left as it was.
func TestRelockKeepsOptions(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr)
	p, err := c.Semaphore("pool", 3).Acquire(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	p2, err := p.Relock(ctxT(t, 5*time.Second))
	if err != nil || p2.Token() <= p.Token() {
		t.Fatalf("relock of a permit: %v %v", p2, err)
	}
	if st, err := c.Status(ctxT(t, 5*time.Second), "pool"); err != nil || st.Permits != 3 || len(st.Grants) != 1 {
		t.Fatalf("the semaphore after the relock: %+v %v", st, err)
	}
	r, err := c.RWLock("rw").RLock(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := r.Relock(ctxT(t, 5*time.Second))
	if err != nil || !r2.Shared() {
		t.Fatalf("relock of a reader: %v %v, want a reader's grant", r2, err)
	}
	once, err := c.Lock(ctxT(t, 5*time.Second), "nightly", client.WithOncePer(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := once.Relock(ctxT(t, 5*time.Second)); !errors.Is(err, client.ErrInvalid) || once.Err() != nil {
		t.Fatalf("relock of a once-per lease: %v (lease %v), want ErrInvalid and the lease intact", err, once.Err())
	}
}

// lockInBackground starts c.Lock(name) with timeout d and returns where its
// Lease arrives (nil if the Lock failed; the error is reported).
func lockInBackground(t *testing.T, c *client.Client, name string, d time.Duration) <-chan *client.Lease {
	waiter := make(chan *client.Lease, 1)
	go func() {
		l, err := c.Lock(ctxT(t, d), name)
		if err != nil {
			t.Error(err)
		}
		waiter <- l
	}()
	return waiter
}

package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
)

// twoHosts dials a new server as host-a and host-b.
func twoHosts(t *testing.T) (a, b *client.Client) {
	ts := startServer(t)
	return dial(t, ts.addr, client.WithOwner("host-a")), dial(t, ts.addr, client.WithOwner("host-b"))
}

// TestOncePer: with WithOncePer, a job that ran (Do with fn returning nil,
// or ReleaseRan) is not run again inside the window by any client: Do does
// not call fn, Lock and TryLock fail with a *RanError that says when, by
// whom and with which token. A failed run records nothing.
func TestOncePer(t *testing.T) {
	a, b := twoHosts(t)
	ctx, once := context.Background(), client.WithOncePer(time.Hour)

	// A failed run records nothing: b runs next.
	failed := errors.New("job failed")
	if err := a.Do(ctx, "jobs/nightly", func(context.Context, uint64) error { return failed }, once); !errors.Is(err, failed) {
		t.Fatalf("a's failing run: %v", err)
	}
	var ranToken uint64
	before := time.Now()
	if err := b.Do(ctx, "jobs/nightly", func(_ context.Context, tok uint64) error { ranToken = tok; return nil }, once); err != nil {
		t.Fatalf("b's run: %v", err)
	}
	if ranToken != 2 {
		t.Fatalf("b ran with token %d, want 2", ranToken)
	}

	// Now nobody runs it inside the hour.
	called := false
	err := a.Do(ctx, "jobs/nightly", func(context.Context, uint64) error { called = true; return nil }, once)
	var ran *client.RanError
	if !errors.Is(err, client.ErrRanRecently) || !errors.As(err, &ran) || called {
		t.Fatalf("a's second run: %v (fn called: %v), want ErrRanRecently", err, called)
	}
	if ran.Name != "jobs/nightly" || ran.Token != 2 || ran.HolderOwner != "host-b" || ran.HolderLease == 0 || ran.Window != time.Hour ||
		ran.At.Before(before.Add(-time.Second)) || ran.At.After(time.Now().Add(time.Second)) {
		t.Fatalf("RanError %+v: want jobs/nightly, token 2, host-b, window 1h, at about now", ran)
	}
	if _, err := a.TryLock(ctx, "jobs/nightly", once); !errors.As(err, &ran) || ran.Token != 2 {
		t.Fatalf("TryLock: %v, want a RanError of token 2", err)
	}
	// Without the option the lock is an ordinary lock.
	l, err := a.TryLock(ctx, "jobs/nightly")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ReleaseRan(ctx); err != nil { // a grant without a window records nothing
		t.Fatal(err)
	}
	if _, err := a.TryLock(ctx, "jobs/nightly", once); !errors.As(err, &ran) || ran.Token != 2 {
		t.Fatalf("after a windowless run: %v, want b's run (token 2) still", err)
	}
	// A window of a minute has not passed either.
	if _, err := a.TryLock(ctx, "jobs/nightly", client.WithOncePer(time.Minute)); !errors.Is(err, client.ErrRanRecently) {
		t.Fatalf("1m window: %v", err)
	}
}

// TestOncePerWaiter: a Lock WithOncePer that waits while another host runs
// the job fails with ErrRanRecently when that run is recorded (ReleaseRan),
// and gets the lock when the run is released without it (failed).
func TestOncePerWaiter(t *testing.T) {
	a, b := twoHosts(t)
	ctx, once := context.Background(), client.WithOncePer(time.Hour)
	for _, succeeded := range []bool{false, true} {
		l, err := a.TryLock(ctx, "jobs/nightly", once)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			l, err := b.Lock(ctx, "jobs/nightly", once)
			if err == nil {
				err = l.Release(ctx) // b's run failed too
			}
			got <- err
		}()
		waitFor(func() bool { info, _ := a.Status(ctx, "jobs/nightly"); return info.Waiters == 1 })
		if succeeded {
			err = l.ReleaseRan(ctx)
		} else {
			err = l.Release(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		err = <-got
		if succeeded != errors.Is(err, client.ErrRanRecently) || !succeeded && err != nil {
			t.Fatalf("a's run succeeded: %v; b's Lock: %v", succeeded, err)
		}
	}
}

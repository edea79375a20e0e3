package client_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/clock/clocktest"
)

// nextLeader returns the observation's next leader, failing the test if
// none comes within 5s.
func nextLeader(t *testing.T, o *client.Observation) string {
	t.Helper()
	select {
	case l, ok := <-o.Leaders():
		if !ok {
			t.Fatalf("observation ended: %v", o.Err())
		}
		return showLeader(l)
	case <-time.After(5 * time.Second):
		t.Fatal("no leader within 5s")
	}
	return ""
}

func showLeader(l client.Leader) string {
	return fmt.Sprintf("%s=%s t%d #%d %s", l.Name, l.Value, l.Token, l.Lease, l.Owner)
}

// TestElection: a campaign leads with its value, Proclaim changes it, the
// next candidate leads after Resign with a larger token, an observer sees
// each leader and value once and in order, and a deposed leader's Proclaim
// is refused.
func TestElection(t *testing.T) {
	ts := startServer(t)
	// alice's leases renew only when the test moves this clock: a grant an
	// admin ends stays valid in her process until she is told.
	clk := clocktest.New()
	a := dial(t, ts.addr, client.WithOwner("alice"), client.WithClock(clk))
	b := dial(t, ts.addr, client.WithOwner("bob"))
	ctx := ctxT(t, 20*time.Second)

	if _, err := b.Leader(ctx, "svc"); !errors.Is(err, client.ErrNoLeader) {
		t.Fatalf("Leader of an election nobody ran: %v, want ErrNoLeader", err)
	}
	la, err := a.Campaign(ctx, "svc", "10.0.0.1:80")
	if err != nil {
		t.Fatal(err)
	}
	if la.Token() != 1 || la.Value() != "10.0.0.1:80" || la.Name() != "svc" {
		t.Fatalf("leadership: token %d value %q name %q", la.Token(), la.Value(), la.Name())
	}
	l, err := b.Leader(ctx, "svc")
	if err != nil || showLeader(l) != "svc=10.0.0.1:80 t1 #1 alice" {
		t.Fatalf("Leader: %s, %v", showLeader(l), err)
	}
	obs, err := b.Observe(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	if got := nextLeader(t, obs); got != "svc=10.0.0.1:80 t1 #1 alice" {
		t.Fatalf("first observed: %s", got)
	}
	if err := la.Proclaim(ctx, "10.0.0.1:81"); err != nil {
		t.Fatal(err)
	}
	if got := nextLeader(t, obs); got != "svc=10.0.0.1:81 t1 #1 alice" {
		t.Fatalf("after Proclaim: %s", got)
	}
	if err := la.Proclaim(ctx, "10.0.0.1:81"); err != nil { // the same value again: nothing new to observe
		t.Fatal(err)
	}

	// bob campaigns and waits; an admin ends alice's grant (she does not
	// know yet), bob leads with token 2 and his value.
	won := make(chan *client.Leadership, 1)
	go func() {
		lb, err := b.Campaign(ctx, "svc", "10.0.0.2:80")
		if err != nil {
			t.Error(err)
		}
		won <- lb
	}()
	waitFor(func() bool { info, _ := b.Status(ctx, "svc"); return info.Waiters == 1 })
	if _, _, err := b.ForceRelease(ctx, "svc", "test: depose alice"); err != nil {
		t.Fatal(err)
	}
	lb := <-won
	if lb == nil {
		t.FailNow()
	}
	if got := nextLeader(t, obs); got != "svc=10.0.0.2:80 t2 #2 bob" {
		t.Fatalf("after the handoff: %s", got)
	}
	if la.Err() != nil {
		t.Fatalf("alice's process cannot know yet (no renewal ran): %v", la.Err())
	}
	err = la.Proclaim(ctx, "10.0.0.1:82")
	if !errors.Is(err, client.ErrDeposed) || !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("a deposed leader's Proclaim: %v, want ErrDeposed and fencing.ErrStale", err)
	}
	if l, err := b.Leader(ctx, "svc"); err != nil || showLeader(l) != "svc=10.0.0.2:80 t2 #2 bob" {
		t.Fatalf("Leader after the refused Proclaim: %s, %v", showLeader(l), err)
	}

	if err := lb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(lb.Err(), client.ErrReleased) {
		t.Fatalf("after Resign: %v, want ErrReleased", lb.Err())
	}
	if _, err := b.Leader(ctx, "svc"); !errors.Is(err, client.ErrNoLeader) {
		t.Fatalf("Leader after Resign: %v, want ErrNoLeader", err)
	}
	obs.Close()
	if _, ok := <-obs.Leaders(); ok || obs.Err() == nil {
		t.Fatalf("after Close: still open, or no error (%v)", obs.Err())
	}
}

// TestLeaderWithoutValue: a lock held under an election's name whose holder
// has not written the value is no leader yet, and a key written with
// another lock's larger token is never taken for the leader's value.
func TestLeaderWithoutValue(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr, client.WithOwner("carol"))
	ctx := ctxT(t, 10*time.Second)
	held, err := c.Lock(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Leader(ctx, "svc"); !errors.Is(err, client.ErrNoLeader) {
		t.Fatalf("held without a value: %v, want ErrNoLeader", err)
	}
	obs, err := c.Observe(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	other, err := c.Lock(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, "svc", []byte("not the leader's"), other.Token()); err != nil {
		t.Fatal(err)
	}
	if l, err := c.Leader(ctx, "svc"); !errors.Is(err, client.ErrNoLeader) {
		t.Fatalf("a value written with another lock's token %d: %s, %v; want ErrNoLeader", other.Token(), showLeader(l), err)
	}
	// The observer reports nothing of that write; once the holder writes the
	// key... it cannot (a larger token wrote it): its value is refused.
	if err := c.Put(ctx, "svc", []byte("the holder's"), held.Token()); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("the holder's write under a larger token's: %v, want ErrStale", err)
	}
	// A new holder of svc (token 3) writes it: that is the first leader seen.
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lc, err := c.Campaign(ctx, "svc", "carol:2")
	if err != nil {
		t.Fatal(err)
	}
	if got := nextLeader(t, obs); got != fmt.Sprintf("svc=carol:2 t%d #1 carol", lc.Token()) || lc.Token() != 3 {
		t.Fatalf("first observed: %s (token %d), want carol:2 with token 3", got, lc.Token())
	}
}

package server

import (
	"context"
	"testing"
	"time"

	"github.com/fencehq/fence/api"
)

// TestRelockSeenByWatchAndHotLocks: a relock that hands the lock to a
// waiter and queues is one watch message, in the order of a release then
// an acquire (RELEASED of the old token with cause released, GRANTED to
// the waiter, WAITER_JOINED of the relocker), and its grant when its turn
// comes is RELEASED then GRANTED with a new token; HotLocks counts every
// grant (3) and every wait (2) and nobody waiting at the end.
func TestRelockSeenByWatchAndHotLocks(t *testing.T) {
	n := startNode(t, nil)
	wctx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	w, err := n.cli.Watch(wctx, &api.WatchRequest{Name: "job"})
	if err != nil {
		t.Fatal(err)
	}
	a, b := n.lease(time.Hour, "alice"), n.lease(time.Hour, "bob")
	if _, err := n.acquire(a, "job", false); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { _, err := n.acquire(b, "job", true); waited <- err }()
	want := []string{
		"GRANTED job #1 alice t1 UNSPECIFIED;",
		"WAITER_JOINED job #2 bob t0 UNSPECIFIED;",
		"RELEASED job #1 alice t1 RELEASED;GRANTED job #2 bob t2 UNSPECIFIED;WAITER_JOINED job #1 alice t0 UNSPECIFIED;",
		"RELEASED job #2 bob t2 RELEASED;GRANTED job #1 alice t3 UNSPECIFIED;",
	}
	for _, wt := range want[:2] {
		if got := describe(nextEvents(t, w)); got != wt {
			t.Fatalf("got %q, want %q", got, wt)
		}
	}
	relocked := make(chan *api.AcquireResponse, 1)
	go func() {
		r, err := n.cli.Acquire(ctx(t), relockRequest(a, "job", 1))
		if err != nil {
			t.Error(err)
		}
		relocked <- r
	}()
	if got := describe(nextEvents(t, w)); got != want[2] {
		t.Fatalf("the relock: got %q, want %q (one entry: a release then an acquire)", got, want[2])
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	if err := n.release(b, "job", false); err != nil {
		t.Fatal(err)
	}
	if got := describe(nextEvents(t, w)); got != want[3] {
		t.Fatalf("the relock's turn: got %q, want %q", got, want[3])
	}
	if r := <-relocked; r == nil || r.Token != 3 {
		t.Fatalf("the relock got %v, want token 3", r)
	}
	hot, err := n.cli.HotLocks(context.Background(), &api.HotLocksRequest{Prefix: "job"})
	if err != nil || len(hot.Locks) != 1 {
		t.Fatalf("HotLocks: %v %v", hot, err)
	}
	if h := hot.Locks[0]; h.Grants < 2.99 || h.Grants > 3 || h.Waits < 1.99 || h.Waits > 2 || h.Waiters != 0 {
		t.Fatalf("HotLocks after a relock: %v, want about 3 grants, 2 waits, nobody waiting", h)
	}
}

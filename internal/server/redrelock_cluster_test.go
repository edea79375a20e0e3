package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/locktest"
)

// TestRelockAcrossLeaderChange: a relock queued behind a waiter through one
// leader, which is then cut off: through the leader the majority elects,
// the waiter's release grants the relock (its call is replicated state:
// the client's retry finds it queued, or withdrawn and waits again), with a
// token above the waiter's, and the new leader shows it held by the
// relocker with that token.
func TestRelockAcrossLeaderChange(t *testing.T) {
	c := locktest.NewCluster(t, 3)
	ctx := func(d time.Duration) context.Context { return within(t, d) }
	dial := func(owner string) *client.Client {
		cl, err := client.Dial(ctx(5*time.Second), c.Addrs(), client.WithInsecure(), client.WithOwner(owner), client.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	a, b, admin := dial("host-a"), dial("host-b"), dial("admin")
	held, err := a.Lock(ctx(5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	waiters := func(n int) bool {
		st, err := admin.Status(ctx(time.Second), "x")
		return err == nil && st.Waiters == n
	}
	waiter := make(chan *client.Lease, 1)
	go func() {
		l, err := b.Lock(ctx(30*time.Second), "x")
		if err != nil {
			t.Error(err)
		}
		waiter <- l
	}()
	for !waiters(1) {
		time.Sleep(5 * time.Millisecond)
	}
	relocked := make(chan *client.Lease, 1)
	go func() {
		l, err := held.Relock(ctx(30 * time.Second))
		if err != nil {
			t.Error(err)
		}
		relocked <- l
	}()
	bl := <-waiter
	if bl == nil {
		t.Fatal("the waiter was not granted")
	}
	for !waiters(1) {
		time.Sleep(5 * time.Millisecond)
	}
	old := c.Leader()
	c.Partition(old)
	var majority []*locktest.Node
	for _, n := range c.Nodes {
		if n != old {
			majority = append(majority, n)
		}
	}
	next := c.Leader(majority...)
	if err := bl.Release(ctx(20 * time.Second)); err != nil {
		t.Fatalf("release through %s: %v", next.ID, err)
	}
	nl := <-relocked
	if nl == nil || nl.Token() <= bl.Token() || bl.Token() <= held.Token() {
		t.Fatalf("tokens %d, %d, relock %v: want each above the one before", held.Token(), bl.Token(), nl)
	}
	st, err := admin.Status(ctx(10*time.Second), "x")
	if err != nil || len(st.Grants) != 1 || st.Grants[0].Token != nl.Token() || st.HolderLease != nl.LeaseNumber() {
		t.Fatalf("after the leader moved to %s: %+v %v, want lease #%d holding token %d", next.ID, st, err, nl.LeaseNumber(), nl.Token())
	}
}

package server_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/locktest"
)

// TestOncePerAcrossLeaderChange: a run recorded through one leader is
// refused by the next, after the first is cut off and the majority elects
// another: the record is replicated state, not the leader's memory.
func TestOncePerAcrossLeaderChange(t *testing.T) {
	c := locktest.NewCluster(t, 3)
	ctx := func(d time.Duration) context.Context { return within(t, d) }
	dial := func(owner string) *client.Client {
		cl, err := client.Dial(ctx(5*time.Second), c.Addrs(), client.WithInsecure(), client.WithOwner(owner))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	a, b := dial("host-a"), dial("host-b")
	once := client.WithOncePer(time.Hour)
	if err := a.Do(ctx(5*time.Second), "jobs/nightly", func(context.Context, uint64) error { return nil }, once); err != nil {
		t.Fatal(err)
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
	ran := false
	err := b.Do(ctx(10*time.Second), "jobs/nightly", func(context.Context, uint64) error { ran = true; return nil }, once)
	var re *client.RanError
	if !errors.As(err, &re) || ran || re.HolderOwner != "host-a" || re.Token != 1 {
		t.Fatalf("after the leader moved to %s: %v (ran: %v), want host-a's run, token 1", next.ID, err, ran)
	}
}

package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/fsm"
)

// Red team 2 (selective acknowledgement, waiting handlers).

// giveUp proposes CancelWait only when it counts itself as the last
// attempt of the call registered (attempts ≤ 1). Two attempts whose
// contexts end together (the client's retry carries the same deadline, or
// one cancel ends both streams) each count the other, still registered —
// unregister runs after giveUp returns — and each leaves the wait to the
// other. Neither cancels: the lease stays queued with no handler and no
// client call, and gets the lock when it frees — a grant nobody was told of,
// held for as long as the session renews.
func TestRedteam2TwoAttemptsGiveUpTogetherNeitherCancels(t *testing.T) {
	n := startNode(t, nil)
	a, b := n.lease(time.Hour, "a"), n.lease(time.Hour, "b")
	for trial := 0; trial < 80; trial++ {
		name := fmt.Sprintf("x%d", trial)
		if _, err := n.acquire(a, name, false); err != nil {
			t.Fatal(err)
		}
		s := nextSeq()
		req := &api.AcquireRequest{RequestId: newReq(), Seq: s, Ack: 1, LeaseSecret: b, Name: name, Wait: true, LockDelay: durationpb.New(0)}
		cctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 2)
		go func() { _, err := n.cli.Acquire(cctx, req); done <- err }()
		eventually(t, "first attempt queued", func() bool { return n.getLock(name).Waiters == 1 })
		go func() { _, err := n.cli.Acquire(cctx, req); done <- err }() // the retry: answered Queued from memory
		eventually(t, "both attempts registered", func() bool { return n.srv.node.Waiting(leaseIDOf(t, b), name, s) == 2 })
		time.Sleep(20 * time.Millisecond) // the retry's Acquire applied, it waits
		cancel()                          // both end together
		<-done
		<-done
		eventually(t, "handlers gone", func() bool { return n.srv.node.Waiting(leaseIDOf(t, b), name, s) == 0 })
		// The last attempt to leave proposes CancelWait after it unregistered:
		// give it time to commit (the bound is a hang guard, not a timing claim).
		deadline := time.Now().Add(5 * time.Second)
		for n.getLock(name).Waiters != 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if w := n.getLock(name).Waiters; w != 0 {
			// The holder lets go: the lock goes to b, whose client heard Canceled.
			if _, err := n.cli.Release(ctx(t), &api.ReleaseRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: a, Name: name}); err != nil {
				t.Fatal(err)
			}
			k := n.getLock(name)
			t.Fatalf("trial %d: both attempts of call %d ended (Canceled) and neither cancelled the wait: %d waiter left; after the holder released, lock %q is held by lease #%d (token %d) with no call waiting for it",
				trial, s, w, name, k.GetHolderLeaseNumber(), k.GetToken())
		}
	}
}

func leaseIDOf(t *testing.T, b []byte) (id [16]byte) {
	t.Helper()
	if len(b) != 16 {
		t.Fatalf("lease id of %d bytes", len(b))
	}
	copy(id[:], b)
	return id
}

// The same race, its interleaving made deterministic: both attempts' handlers
// are registered (as they are until giveUp returns), and each gives up; the
// first sees two attempts and leaves the wait, the second also sees two.
func TestRedteam2GiveUpInterleavingLeavesWaitBehind(t *testing.T) {
	n := startNode(t, nil)
	a, b := n.lease(time.Hour, "a"), n.lease(time.Hour, "b")
	if _, err := n.acquire(a, "x", false); err != nil {
		t.Fatal(err)
	}
	s := nextSeq()
	cmd, err := n.srv.limits.acquire(&api.AcquireRequest{RequestId: newReq(), Seq: s, Ack: 1, LeaseSecret: b, Name: "x", Wait: true, LockDelay: durationpb.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	first := n.srv.node.Wait(cmd.Lease, cmd.Name, cmd.Seq)                                 // the first attempt's handler
	retry := n.srv.node.Wait(cmd.Lease, cmd.Name, cmd.Seq)                                 // the retry's
	if res, err := n.srv.node.Propose(ctx(t), cmd); err != nil || res.Code != fsm.Queued { // both see Queued
		t.Fatalf("acquire: %v %v", res.Code, err)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel() // both calls' contexts ended together
	v := &service{s: n.srv}
	_, err1 := v.giveUp(ended, cmd) // first attempt
	_, err2 := v.giveUp(ended, cmd) // the retry
	v.leaveWait(cmd, first)         // the handlers return, in either order
	v.leaveWait(cmd, retry)
	time.Sleep(50 * time.Millisecond)
	if w := n.getLock("x").Waiters; w != 0 {
		t.Fatalf("both attempts of call %d gave up (%v; %v) and the wait is still queued (%d waiter): nobody cancels it, the grant goes to no caller", s, code(err1), code(err2), w)
	}
}

// waitOutcome answers a waiting handler from its call's memory: code OK and
// the token — without the check recall makes ("a grant that has ended since
// answers Ended, never OK"). When the grant ends before the handler looks
// (here: granted and force-released in one raft entry; in general, any
// time the handler is slow to be scheduled), the handler answers OK with a
// token no longer held, while a retry of the same call answers Ended: one
// call, two answers, and an OK for a grant already gone.
func TestRedteam2WaitingHandlerAnswersOKForEndedGrant(t *testing.T) {
	n := startNode(t, nil)
	a, b := n.lease(time.Hour, "a"), n.lease(time.Hour, "b")
	held, err := n.acquire(a, "x", false)
	if err != nil {
		t.Fatal(err)
	}
	req := &api.AcquireRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: b, Name: "x", Wait: true, LockDelay: durationpb.New(0)}
	type answer struct {
		r   *api.AcquireResponse
		err error
	}
	got := make(chan answer, 1)
	go func() { r, err := n.cli.Acquire(ctx(t), req); got <- answer{r, err} }()
	eventually(t, "b queued", func() bool { return n.getLock("x").Waiters == 1 })
	// One entry: a releases x (b is granted token+1), an admin force-releases that grant.
	next := held.GetToken() + 1
	if _, err := n.srv.node.ProposeEntry(ctx(t), []fsm.Command{
		{Kind: fsm.KindRelease, RequestID: [16]byte(newReq()), Lease: leaseIDOf(t, a), Seq: nextSeq(), Ack: 1, Name: "x"},
		{Kind: fsm.KindForceRelease, RequestID: [16]byte(newReq()), Name: "x", Token: next},
	}); err != nil {
		t.Fatal(err)
	}
	first := <-got
	_, retryErr := n.cli.Acquire(ctx(t), req)
	if first.err == nil {
		k := n.getLock("x")
		t.Fatalf("the waiting handler answered OK with token %d, a grant already force-released (lock x now: holder #%d token %d); a retry of the same call answers: %v",
			first.r.GetToken(), k.GetHolderLeaseNumber(), k.GetToken(), retryErr)
	}
}

// The fsm's memory limit is exceeded by one valid Acquire (server
// validation accepts it: open increasing, strictly between ack and seq, at
// most 1024): its open list names every other number below its seq. The
// node's next snapshot holds a lease the snapshot reader refuses, so the node
// cannot restart from its own data (and no follower can install it).
func TestRedteam2OneAcquireMakesTheNodeUnrestartable(t *testing.T) {
	n := startNode(t, nil)
	b := n.lease(time.Hour, "b")
	var open []uint64
	for i := uint64(0); i < fsm.MaxCallsInFlight; i++ {
		open = append(open, 3+2*i)
	}
	seq := open[len(open)-1] + 2
	_, err := n.cli.Acquire(ctx(t), &api.AcquireRequest{RequestId: newReq(), Seq: seq, Ack: 1, Open: open, LeaseSecret: b, Name: "x", LockDelay: durationpb.New(0)})
	t.Logf("the Acquire: %v", err)
	if err := n.srv.Snapshot(); err != nil {
		t.Fatal(err)
	}
	n.stop()
	cfg := DefaultConfig()
	cfg.Insecure = true // these tests dial plaintext; tls_test.go covers TLS
	cfg.DataDir, cfg.GRPCAddr, cfg.RaftAddr, cfg.MetricsAddr = n.dir, "127.0.0.1:0", "127.0.0.1:0", ""
	cfg.Clock, cfg.Registerer, cfg.Logger, cfg.RaftLogLevel = n.clock, prometheus.NewRegistry(), testLogger(), "error"
	cfg.HeartbeatTimeout, cfg.ElectionTimeout = 10*time.Millisecond, 50*time.Millisecond
	srv, err := New(cfg)
	if err != nil {
		t.Fatalf("after one valid Acquire and a snapshot, the node does not start again: %v", err)
	}
	defer srv.Close()
	wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.WaitReady(wctx); err != nil {
		t.Fatalf("after one valid Acquire and a snapshot, the restarted node never becomes ready: %v", err)
	}
}

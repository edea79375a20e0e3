package server

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/fsm"
)

// Red-team tests: each one reproduced a violation of a stated property (a red
// team on the call-numbering change found them; each failed before its fix).
// The comments describe the hole as it was.

func (n *testNode) snapshotBytes() []byte {
	var b []byte
	n.srv.node.View(func(s *fsm.State) { b = s.Marshal(nil) })
	return b
}

// Two handlers serve one waiting Acquire: the first attempt (whose
// connection the client gave up on) and the client's retry of the same
// request, which the fsm answers Queued from memory and which then waits.
// When the first attempt's handler ends it proposes CancelWait for the call
// number, which removes the one queue entry both attempts share. Nothing wakes
// the retry (CancelWait emits no event; the waiters only hear Granted and
// LeaseEnded): it waits on a queue entry that no longer exists, while the lock
// goes free. A client Lock without a deadline blocks forever.
func TestRedteamRetryOfQueuedCallHangsAfterFirstAttemptCancels(t *testing.T) {
	n := startNode(t, nil)
	a, b := n.lease(time.Hour, "a"), n.lease(time.Hour, "b")
	if _, err := n.acquire(a, "x", false); err != nil {
		t.Fatal(err)
	}
	// An earlier call of b, answered; the retry's higher ack forgets it, which
	// shows (in the state's bytes) when the retry has been applied.
	s0 := nextSeq()
	if _, err := n.cli.Acquire(ctx(t), &api.AcquireRequest{RequestId: newReq(), Seq: s0, Ack: s0, LeaseSecret: b, Name: "y", LockDelay: durationpb.New(0)}); err != nil {
		t.Fatal(err)
	}
	s := nextSeq()
	req := &api.AcquireRequest{RequestId: newReq(), Seq: s, Ack: s0, LeaseSecret: b, Name: "x", Wait: true, LockDelay: durationpb.New(0)}
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	first := make(chan error, 1)
	go func() { _, err := n.cli.Acquire(ctx1, req); first <- err }()
	eventually(t, "first attempt queued", func() bool { return n.getLock("x").Waiters == 1 })

	before := n.snapshotBytes()
	retry := &api.AcquireRequest{RequestId: req.RequestId, Seq: s, Ack: s, LeaseSecret: b, Name: "x", Wait: true, LockDelay: durationpb.New(0)}
	type answer struct {
		r   *api.AcquireResponse
		err error
	}
	second := make(chan answer, 1)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel2()
	go func() { r, err := n.cli.Acquire(ctx2, retry); second <- answer{r, err} }()
	eventually(t, "retry applied (answered Queued from memory)", func() bool { return !bytes.Equal(before, n.snapshotBytes()) })

	cancel1() // the client gave up on the first attempt's connection
	<-first
	eventually(t, "first attempt's CancelWait applied", func() bool { return n.getLock("x").Waiters == 0 })

	// The holder lets go: the lock is free, and b's call is the only one that wants it.
	if _, err := n.cli.Release(ctx(t), &api.ReleaseRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: a, Name: "x"}); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-second:
		t.Logf("retry answered: %v %v", got.r, got.err)
	case <-time.After(2 * time.Second):
		k := n.getLock("x")
		t.Fatalf("the retry of a waiting Acquire still waits 2s after the lock went free (lock x: holder #%d, %d waiters): its queue entry was cancelled by the first attempt's handler and nothing woke it",
			k.GetHolderLeaseNumber(), k.GetWaiters())
	}
}

// waitOutcome decides a waiting handler's answer from the lock ("held by my
// lease?"), not from the call's remembered outcome. A handler whose call was
// cancelled (by another attempt's CancelWait) answers OK with the token of a
// later call's grant of the same lock; a retry of that same call answers
// Cancelled: one call, two answers, and an OK for a call that never got a grant.
func TestRedteamCancelledWaitAnsweredWithAnotherCallsGrant(t *testing.T) {
	n := startNode(t, nil)
	a, b := n.lease(time.Hour, "a"), n.lease(time.Hour, "b")
	if _, err := n.acquire(a, "x", false); err != nil {
		t.Fatal(err)
	}
	s0 := nextSeq()
	if _, err := n.cli.Acquire(ctx(t), &api.AcquireRequest{RequestId: newReq(), Seq: s0, Ack: s0, LeaseSecret: b, Name: "y", LockDelay: durationpb.New(0)}); err != nil {
		t.Fatal(err)
	}
	s := nextSeq()
	req := &api.AcquireRequest{RequestId: newReq(), Seq: s, Ack: s0, LeaseSecret: b, Name: "x", Wait: true, LockDelay: durationpb.New(0)}
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	first := make(chan error, 1)
	go func() { _, err := n.cli.Acquire(ctx1, req); first <- err }()
	eventually(t, "first attempt queued", func() bool { return n.getLock("x").Waiters == 1 })
	before := n.snapshotBytes()
	type answer struct {
		r   *api.AcquireResponse
		err error
	}
	second := make(chan answer, 1)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel2()
	go func() {
		r, err := n.cli.Acquire(ctx2, &api.AcquireRequest{RequestId: req.RequestId, Seq: s, Ack: s, LeaseSecret: b, Name: "x", Wait: true, LockDelay: durationpb.New(0)})
		second <- answer{r, err}
	}()
	eventually(t, "retry applied", func() bool { return !bytes.Equal(before, n.snapshotBytes()) })
	cancel1()
	<-first
	eventually(t, "first attempt's CancelWait applied", func() bool { return n.getLock("x").Waiters == 0 })
	if _, err := n.cli.Release(ctx(t), &api.ReleaseRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: a, Name: "x"}); err != nil {
		t.Fatal(err)
	}
	// A later call of lease b takes x.
	s2 := nextSeq()
	later, err := n.cli.Acquire(ctx(t), &api.AcquireRequest{RequestId: newReq(), Seq: s2, Ack: s, LeaseSecret: b, Name: "x", LockDelay: durationpb.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	var got answer
	select {
	case got = <-second:
	case <-time.After(3 * time.Second):
		t.Fatal("the retry never answered")
	}
	_, again := n.cli.Acquire(ctx(t), &api.AcquireRequest{RequestId: req.RequestId, Seq: s, Ack: s, LeaseSecret: b, Name: "x", Wait: true, LockDelay: durationpb.New(0)})
	if got.err == nil {
		t.Fatalf("call %d (its wait cancelled) answered OK with token %d, the grant of call %d (token %d); a retry of call %d answers: %v",
			s, got.r.GetToken(), s2, later.GetToken(), s, again)
	}
}

// Config.Validate accepts any non-empty node id, but the SetNode command a
// leader proposes for itself must carry a valid fsm name (≤ 256 bytes, no
// control characters). With a longer id the server starts, and every entry
// holding its SetNode fails to decode on every replica and is skipped, with
// all the client commands batched into it (they fail with INTERNAL).
func TestRedteamNodeIDTheFsmRefuses(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NodeID = strings.Repeat("n", 300)
	cfg.DataDir, cfg.GRPCAddr, cfg.RaftAddr = t.TempDir(), "127.0.0.1:0", "127.0.0.1:0"
	if err := cfg.Validate(); err != nil {
		return // refused up front: fine
	}
	c := fsm.Command{Kind: fsm.KindSetNode, Name: cfg.NodeID, Addr: "127.0.0.1:7300"}
	if err := c.Validate(); err != nil {
		t.Fatalf("Config.Validate accepts node id of %d bytes, but the leader's SetNode for it is refused by the fsm: %v", len(cfg.NodeID), err)
	}
}

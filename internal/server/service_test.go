package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
)

// TestRetryWithoutWaitWithdraws: a retry without wait of an Acquire that
// waits in the queue (the client settling a call its caller gave up on)
// takes the call out of the queue and answers ABORTED at once, even while
// another attempt of the call still waits — which then learns the same.
// (Had the retry waited, an overlapping attempt would keep the call
// queued, and the client could never learn its outcome.)
func TestRetryWithoutWaitWithdraws(t *testing.T) {
	n := startNode(t, nil)
	a, b := n.lease(time.Hour, "a"), n.lease(time.Hour, "b")
	if _, err := n.acquire(a, "x", false); err != nil {
		t.Fatal(err)
	}
	req := &api.AcquireRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: b, Name: "x", Wait: true, LockDelay: durationpb.New(0)}
	first := make(chan error, 1)
	go func() { _, err := n.cli.Acquire(ctx(t), req); first <- err }()
	eventually(t, "b queued", func() bool { return n.getLock("x").Waiters == 1 })
	retry := proto.Clone(req).(*api.AcquireRequest)
	retry.Wait = false
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := n.cli.Acquire(rctx, retry); code(err) != codes.Aborted {
		t.Fatalf("retry without wait of a queued call: %v, want ABORTED", err)
	}
	if got := n.getLock("x").Waiters; got != 0 {
		t.Fatalf("%d waiters after the withdrawal, want 0", got)
	}
	if err := <-first; code(err) != codes.Aborted {
		t.Fatalf("the attempt that waited: %v, want ABORTED", err)
	}
}

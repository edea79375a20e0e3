package server

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
)

// relockRequest is an Acquire (waiting) of name that first releases the
// lease's grant with token.
func relockRequest(lease []byte, name string, token uint64) *api.AcquireRequest {
	return &api.AcquireRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: lease, Name: name, Wait: true,
		LockDelay: durationpb.New(0), ReleaseToken: token}
}

// TestRelockOverTheWire: a relock with nobody waiting is granted again at
// once with a larger token; with a waiter, the waiter is granted and the
// relock waits behind it, granted when the waiter releases; a retry of the
// same request answers the first grant and grants nothing more; a stale
// token is refused with FAILED_PRECONDITION naming it, and a relock
// without wait or with once_per with INVALID_ARGUMENT, changing nothing.
func TestRelockOverTheWire(t *testing.T) {
	n := startNode(t, nil)
	a, b := n.lease(time.Hour, "a"), n.lease(time.Hour, "b")
	g, err := n.acquire(a, "job", false)
	if err != nil || g.Token != 1 {
		t.Fatalf("acquire: %v %v", g, err)
	}
	req := relockRequest(a, "job", 1)
	again, err := n.cli.Acquire(ctx(t), req)
	if err != nil || again.Token != 2 || again.LeaseNumber != 1 {
		t.Fatalf("relock with nobody waiting: %v %v, want token 2 of lease #1", again, err)
	}
	retry, err := n.cli.Acquire(ctx(t), proto.Clone(req).(*api.AcquireRequest))
	if err != nil || retry.Token != 2 {
		t.Fatalf("retried relock: %v %v, want the first grant (token 2)", retry, err)
	}
	if info := n.getLock("job"); info.Token != 2 || info.HolderLeaseNumber != 1 {
		t.Fatalf("after the retry: %v, want lease #1 with token 2", info)
	}

	before := n.getLock("job")
	for _, tc := range []struct {
		name string
		req  *api.AcquireRequest
		code codes.Code
		msg  string
	}{
		{"an old token", relockRequest(a, "job", 1), codes.FailedPrecondition, `does not hold lock "job" with token 1 (that grant ended, or is another's): nothing was released or queued`},
		{"another lease's token", relockRequest(b, "job", 2), codes.FailedPrecondition, `does not hold lock "job" with token 2`},
		{"without wait", func() *api.AcquireRequest { r := relockRequest(a, "job", 2); r.Wait = false; return r }(), codes.InvalidArgument, "set wait"},
		{"with once_per", func() *api.AcquireRequest {
			r := relockRequest(a, "job", 2)
			r.OncePer = durationpb.New(time.Hour)
			return r
		}(), codes.InvalidArgument, "no once_per"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := n.cli.Acquire(ctx(t), tc.req)
			if st := status.Convert(err); st.Code() != tc.code || !strings.Contains(st.Message(), tc.msg) {
				t.Fatalf("got %v %q, want %v containing %q", st.Code(), st.Message(), tc.code, tc.msg)
			}
			if after := n.getLock("job"); after.Token != before.Token || after.HolderLeaseNumber != 1 || after.Waiters != 0 {
				t.Fatalf("the refusal changed the lock: %v", after)
			}
		})
	}

	// A waiter is granted first; the relock waits behind it.
	waited := make(chan *api.AcquireResponse, 1)
	go func() {
		r, err := n.acquire(b, "job", true)
		if err != nil {
			t.Error(err)
		}
		waited <- r
	}()
	eventually(t, "b waits", func() bool { return n.getLock("job").Waiters == 1 })
	relocked := make(chan *api.AcquireResponse, 1)
	go func() {
		r, err := n.cli.Acquire(ctx(t), relockRequest(a, "job", 2))
		if err != nil {
			t.Error(err)
		}
		relocked <- r
	}()
	if r := <-waited; r == nil || r.Token != 3 {
		t.Fatalf("the waiter got %v, want token 3", r)
	}
	eventually(t, "a waits behind b", func() bool { i := n.getLock("job"); return i.Waiters == 1 && i.HolderLeaseNumber == 2 })
	if err := n.release(b, "job", false); err != nil {
		t.Fatal(err)
	}
	if r := <-relocked; r == nil || r.Token != 4 || r.LeaseNumber != 1 {
		t.Fatalf("the relock got %v, want token 4 of lease #1", r)
	}
}

// TestRelockIsOneEntry: a relock is one raft entry, a release and then an
// acquire two — with a waiter granted in the relock's entry too. (The test
// node's clock is fake: no tick entry lands in between.)
func TestRelockIsOneEntry(t *testing.T) {
	n := startNode(t, nil)
	a, b := n.lease(time.Hour, "a"), n.lease(time.Hour, "b")
	index := func() uint64 {
		t.Helper()
		r, err := n.cli.GetLock(ctx(t), &api.GetLockRequest{Name: "job"})
		if err != nil {
			t.Fatal(err)
		}
		return r.Index
	}
	g, err := n.acquire(a, "job", false)
	if err != nil {
		t.Fatal(err)
	}
	before := index()
	if _, err = n.cli.Acquire(ctx(t), relockRequest(a, "job", g.Token)); err != nil {
		t.Fatal(err)
	}
	if got := index() - before; got != 1 {
		t.Fatalf("a relock took %d entries, want 1", got)
	}
	before = index()
	if err := n.release(a, "job", false); err != nil {
		t.Fatal(err)
	}
	if g, err = n.acquire(a, "job", false); err != nil {
		t.Fatal(err)
	}
	if got := index() - before; got != 2 {
		t.Fatalf("a release and an acquire took %d entries, want 2", got)
	}
	waited := make(chan *api.AcquireResponse, 1)
	go func() {
		r, err := n.acquire(b, "job", true)
		if err != nil {
			t.Error(err)
		}
		waited <- r
	}()
	eventually(t, "b waits", func() bool { return n.getLock("job").Waiters == 1 })
	before = index()
	relocked := make(chan error, 1)
	go func() { _, err := n.cli.Acquire(ctx(t), relockRequest(a, "job", g.Token)); relocked <- err }()
	if r := <-waited; r == nil {
		t.Fatal("the waiter was not granted")
	}
	eventually(t, "a waits", func() bool { return n.getLock("job").Waiters == 1 })
	if got := index() - before; got != 1 {
		t.Fatalf("a relock that granted the waiter and queued took %d entries, want 1", got)
	}
	if err := n.release(b, "job", false); err != nil {
		t.Fatal(err)
	}
	if err := <-relocked; err != nil {
		t.Fatal(err)
	}
}

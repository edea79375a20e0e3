package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
)

// acquireMode is acquire of a semaphore of permits (0: a mutex) or, with
// shared, a reader's grant.
func (n *testNode) acquireMode(ctx context.Context, lease []byte, name string, wait bool, permits uint32, shared bool) (*api.AcquireResponse, error) {
	return n.cli.Acquire(ctx, &api.AcquireRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: lease, Name: name, Wait: wait,
		LockDelay: durationpb.New(0), Permits: permits, Shared: shared})
}

// TestSemaphoreOverTheWire: permits over gRPC — each grant its own token
// and the lowest free slot, the (N+1)th refused with ABORTED, another
// count or a mutex Acquire refused with FAILED_PRECONDITION naming both
// counts (a PermitsMismatch detail), bad input INVALID_ARGUMENT, and no
// refusal changes the lock; GetLock lists the grants.
func TestSemaphoreOverTheWire(t *testing.T) {
	n := startNode(t, nil)
	a, b, c := n.lease(time.Hour, "a"), n.lease(time.Hour, "b"), n.lease(time.Hour, "c")
	ga, err := n.acquireMode(ctx(t), a, "pool", false, 2, false)
	if err != nil || ga.Token != 1 || ga.Slot != 0 {
		t.Fatalf("first permit: %v %v", ga, err)
	}
	gb, err := n.acquireMode(ctx(t), b, "pool", false, 2, false)
	if err != nil || gb.Token != 2 || gb.Slot != 1 {
		t.Fatalf("second permit: %v %v", gb, err)
	}
	before := n.getLock("pool")
	for _, tc := range []struct {
		name    string
		permits uint32
		shared  bool
		code    codes.Code
		msg     string
	}{
		{"all permits held", 2, false, codes.Aborted, `held by lease #1 (owner "a") with token 1`},
		{"another count", 3, false, codes.FailedPrecondition, `lock "pool" is a semaphore of 2 permits, but this Acquire asks for a semaphore of 3 permits`},
		{"a mutex acquire", 0, false, codes.FailedPrecondition, `but this Acquire asks for a lock of one permit (a mutex or read-write lock)`},
		{"a reader", 0, true, codes.FailedPrecondition, `is a semaphore of 2 permits`},
		{"too many permits", 70000, false, codes.InvalidArgument, "permits 70000 is above 65536"},
		{"a shared semaphore acquire", 2, true, codes.InvalidArgument, "a semaphore has no shared grants"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := n.acquireMode(ctx(t), c, "pool", false, tc.permits, tc.shared)
			if st := status.Convert(err); st.Code() != tc.code || !strings.Contains(st.Message(), tc.msg) {
				t.Fatalf("got %v %q, want %v containing %q", st.Code(), st.Message(), tc.code, tc.msg)
			}
			if tc.code == codes.FailedPrecondition {
				var d *api.PermitsMismatch
				for _, x := range status.Convert(err).Details() {
					d, _ = x.(*api.PermitsMismatch)
				}
				if d == nil || d.Permits != 2 || d.Asked != max(tc.permits, 1) || d.Name != "pool" {
					t.Fatalf("detail %v", d)
				}
			}
			if after := n.getLock("pool"); after.Token != before.Token || len(after.Grants) != 2 || after.Waiters != 0 {
				t.Fatalf("the refusal changed the lock: %v", after)
			}
		})
	}
	info := n.getLock("pool")
	if info.Permits != 2 || len(info.Grants) != 2 || info.Grants[1].Owner != "b" || info.Grants[1].Slot != 1 || info.Grants[1].Token != 2 ||
		info.Grants[1].TtlLeft.AsDuration() != time.Hour {
		t.Fatalf("GetLock: %v", info)
	}
	if err := n.release(a, "pool", false); err != nil {
		t.Fatal(err)
	}
	if gc, err := n.acquireMode(ctx(t), c, "pool", false, 2, false); err != nil || gc.Token != 3 || gc.Slot != 0 {
		t.Fatalf("the freed slot 0: %v %v", gc, err)
	}
}

// TestReadWriteOverTheWire: two readers hold at once; a writer waits for
// them and gets a token above both; a reader that comes while the writer
// waits queues behind it (no starvation) and goes in when the writer
// releases; GetLock counts the shared waiter.
func TestReadWriteOverTheWire(t *testing.T) {
	n := startNode(t, nil)
	r1, r2, w, r3 := n.lease(time.Hour, "r1"), n.lease(time.Hour, "r2"), n.lease(time.Hour, "w"), n.lease(time.Hour, "r3")
	for _, l := range [][]byte{r1, r2} {
		if g, err := n.acquireMode(ctx(t), l, "rw", false, 0, true); err != nil || !g.Shared {
			t.Fatalf("reader: %v %v", g, err)
		}
	}
	wrote := make(chan *api.AcquireResponse, 1)
	go func() {
		g, err := n.acquireMode(context.Background(), w, "rw", true, 0, false)
		if err != nil {
			t.Error(err)
		}
		wrote <- g
	}()
	eventually(t, "writer queued", func() bool { return n.getLock("rw").Waiters == 1 })
	if _, err := n.acquireMode(ctx(t), r3, "rw", false, 0, true); status.Code(err) != codes.Aborted {
		t.Fatalf("a reader passed a waiting writer: %v", err)
	}
	read := make(chan *api.AcquireResponse, 1)
	go func() {
		g, err := n.acquireMode(context.Background(), r3, "rw", true, 0, true)
		if err != nil {
			t.Error(err)
		}
		read <- g
	}()
	eventually(t, "reader queued behind the writer", func() bool { return n.getLock("rw").SharedWaiters == 1 })
	if r, err := n.cli.GetLock(ctx(t), &api.GetLockRequest{Name: "rw"}); err != nil || len(r.Queue) != 2 || r.Queue[0].Shared || !r.Queue[1].Shared {
		t.Fatalf("queue %v (%v): want the writer, then a reader", r.GetQueue(), err)
	}
	for _, l := range [][]byte{r1, r2} {
		if err := n.release(l, "rw", false); err != nil {
			t.Fatal(err)
		}
	}
	g := <-wrote
	if g == nil || g.Token != 3 || g.Shared {
		t.Fatalf("writer's grant %v, want token 3 (above the readers' 1 and 2)", g)
	}
	if err := n.release(w, "rw", false); err != nil {
		t.Fatal(err)
	}
	if g := <-read; g == nil || g.Token != 4 || !g.Shared {
		t.Fatalf("reader's grant %v, want shared token 4", g)
	}
}

// TestSemaphorePermitDelayOverTheWire: a holder's lease expires with a
// lock-delay: its permit stays taken for the delay (GetLock shows the grant
// delayed, with its own delay_left on the leader's clock), the other permit
// serves, and the delayed slot is granted again once the delay ends.
func TestSemaphorePermitDelayOverTheWire(t *testing.T) {
	n := startNode(t, nil)
	dead, live, next := n.lease(2*time.Second, "paused"), n.lease(time.Hour, "live"), n.lease(time.Hour, "next")
	if _, err := n.cli.Acquire(ctx(t), &api.AcquireRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: dead, Name: "pool",
		Permits: 2, LockDelay: durationpb.New(3 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if g, err := n.acquireMode(ctx(t), live, "pool", false, 2, false); err != nil || g.Slot != 1 {
		t.Fatalf("second permit: %v %v", g, err)
	}
	n.clock.Advance(2100 * time.Millisecond) // the paused holder expires: its permit's 3s lock-delay begins
	eventually(t, "expiry", func() bool { g := n.getLock("pool").Grants; return len(g) == 2 && g[0].Delayed })
	info := n.getLock("pool")
	if g := info.Grants[0]; g.Slot != 0 || g.Token != 1 || g.LeaseNumber != 0 || g.DelayLeft.AsDuration() != 3*time.Second {
		t.Fatalf("delayed permit %v: want slot 0, token 1, no lease, 3s left (the clock has not moved since)", g)
	}
	if info.Delayed || info.HolderOwner != "live" || info.Grants[1].DelayLeft != nil {
		t.Fatalf("lock %v: the held permit describes it, and has no delay_left", info)
	}
	if _, err := n.acquireMode(ctx(t), next, "pool", false, 2, false); status.Code(err) != codes.Aborted {
		t.Fatalf("a third holder during the permit's lock-delay: %v", err)
	}
	n.clock.Advance(3100 * time.Millisecond)
	eventually(t, "delay over", func() bool { return len(n.getLock("pool").Grants) == 1 })
	if g, err := n.acquireMode(ctx(t), next, "pool", false, 2, false); err != nil || g.Slot != 0 || g.Token != 3 {
		t.Fatalf("the delayed slot after its delay: %v %v", g, err)
	}
}

// TestOncePerOfSemaphoreOrReaderRefused: a once-per window promises one run
// of a job per window, but a semaphore's N holders, or readers, would all
// run it at once (the run is recorded only when the first finishes):
// an Acquire with once_per and permits > 1, or with shared, is
// INVALID_ARGUMENT and makes no lock; with permits 1 it is a mutex's.
func TestOncePerOfSemaphoreOrReaderRefused(t *testing.T) {
	n := startNode(t, nil)
	a := n.lease(time.Hour, "a")
	for _, tc := range []struct {
		name    string
		permits uint32
		shared  bool
		code    codes.Code
	}{
		{"a semaphore", 2, false, codes.InvalidArgument},
		{"a reader", 0, true, codes.InvalidArgument},
		{"a mutex", 1, false, codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := n.cli.Acquire(ctx(t), &api.AcquireRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: a, Name: "job",
				LockDelay: durationpb.New(0), Permits: tc.permits, Shared: tc.shared, OncePer: durationpb.New(time.Hour)})
			if got := status.Code(err); got != tc.code {
				t.Fatalf("got %v (%v), want %v", got, err, tc.code)
			}
			if info := n.getLock("job"); tc.code != codes.OK && info.Token != 0 {
				t.Fatalf("the refusal made a lock: %v", info)
			}
		})
	}
}

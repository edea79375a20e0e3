package server

// The tests of this file hold the server to the API contract of
// api/fence/v1/fence.proto; each failed on the code before call numbers (c29fee4).

import (
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
)

// TestKeepAliveHalfCloseAnswersEverything: a client that sends renewals and
// half-closes gets an answer to every one before the stream ends (before:
// the handler returned on half-close and dropped what was still pending —
// 12 of 20 answered in review).
func TestKeepAliveHalfCloseAnswersEverything(t *testing.T) {
	n := startNode(t, nil)
	lease := n.lease(time.Hour, "a")
	st, err := n.cli.KeepAlive(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	const sent = 20
	for i := 1; i <= sent; i++ {
		if err := st.Send(&api.KeepAliveRequest{LeaseSecret: lease, Seq: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	answered := 0
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after %d answers: %v", answered, err)
		}
		if !r.Ok {
			t.Fatalf("renewal %d refused", r.Seq)
		}
		answered++
	}
	if answered != sent {
		t.Fatalf("%d of %d renewals answered before the stream ended", answered, sent)
	}
}

// TestKeepAliveBadLeaseIsAnsweredAlone: a malformed lease id is refused in
// its own answer; the other leases on the stream go on being renewed
// (before: one bad id ended the stream for every lease sharing it).
func TestKeepAliveBadLeaseIsAnsweredAlone(t *testing.T) {
	n := startNode(t, nil)
	lease := n.lease(time.Hour, "a")
	st, err := n.cli.KeepAlive(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range [][]byte{lease, []byte("short"), lease} {
		if err := st.Send(&api.KeepAliveRequest{LeaseSecret: id, Seq: uint64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	want := []bool{true, false, true}
	for i := range want {
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("answer %d: %v (a malformed lease id ended the stream)", i+1, err)
		}
		if r.Seq != uint64(i+1) || r.Ok != want[i] {
			t.Fatalf("answer %+v, want seq %d ok %v", r, i+1, want[i])
		}
		if !r.Ok && r.Error == "" {
			t.Fatalf("refusal of seq %d says nothing", r.Seq)
		}
	}
}

// TestMutatingCallsNeedARequestID: without a request id a retry cannot be
// told from a second call (before: two Acquires without one on one lease
// both answered OK with token 1: two callers shared one grant).
func TestMutatingCallsNeedARequestID(t *testing.T) {
	n := startNode(t, nil)
	a := n.lease(time.Hour, "a")
	calls := map[string]func() error{
		"create-lease": func() error {
			_, err := n.cli.CreateLease(ctx(t), &api.CreateLeaseRequest{Ttl: durationpb.New(time.Minute)})
			return err
		},
		"acquire": func() error {
			_, err := n.cli.Acquire(ctx(t), &api.AcquireRequest{LeaseSecret: a, Seq: nextSeq(), Ack: 1, Name: "x"})
			return err
		},
		"release": func() error {
			_, err := n.cli.Release(ctx(t), &api.ReleaseRequest{LeaseSecret: a, Seq: nextSeq(), Ack: 1, Name: "x"})
			return err
		},
		"revoke": func() error { _, err := n.cli.Revoke(ctx(t), &api.RevokeRequest{LeaseSecret: a}); return err },
		"put": func() error {
			_, err := n.cli.Put(ctx(t), &api.PutRequest{Key: "k", Value: []byte("v"), Token: 1})
			return err
		},
		"all-zero id": func() error {
			_, err := n.cli.Acquire(ctx(t), &api.AcquireRequest{RequestId: make([]byte, 16), LeaseSecret: a, Seq: nextSeq(), Ack: 1, Name: "x"})
			return err
		},
	}
	for name, call := range calls {
		if err := call(); code(err) != codes.InvalidArgument {
			t.Errorf("%s without a request id: %v, want INVALID_ARGUMENT", name, err)
		}
	}
	if l := n.getLock("x"); l.HolderLeaseNumber != 0 {
		t.Fatalf("a call without a request id took effect: %v", l)
	}
}

// TestRetriesKeepThePromise: a retry with the same request id of each
// mutating call answers as the proto says (api/fence/v1/fence.proto, Conventions).
func TestRetriesKeepThePromise(t *testing.T) {
	n := startNode(t, nil)
	create := &api.CreateLeaseRequest{RequestId: newReq(), Ttl: durationpb.New(time.Hour), Owner: "a"}
	first, err := n.cli.CreateLease(ctx(t), create)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := n.cli.CreateLease(ctx(t), create); err != nil || again.LeaseNumber != first.LeaseNumber {
		t.Fatalf("retried create-lease: %v %v, want lease #%d", again, err, first.LeaseNumber)
	}
	acq := &api.AcquireRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: first.LeaseSecret, Name: "x"}
	g, err := n.cli.Acquire(ctx(t), acq)
	if err != nil {
		t.Fatal(err)
	}
	put := &api.PutRequest{RequestId: newReq(), Key: "k", Value: []byte("v"), Token: g.Token}
	for range 2 {
		if _, err := n.cli.Put(ctx(t), put); err != nil {
			t.Fatalf("put and its retry: %v", err)
		}
	}
	rel := &api.ReleaseRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: first.LeaseSecret, Name: "x"}
	for range 2 {
		if _, err := n.cli.Release(ctx(t), rel); err != nil {
			t.Fatalf("release and its retry: %v", err)
		}
	}
	rev := &api.RevokeRequest{RequestId: newReq(), LeaseSecret: first.LeaseSecret}
	for i := range 2 {
		if _, err := n.cli.Revoke(ctx(t), rev); err != nil {
			t.Fatalf("revoke attempt %d: %v (a retried revoke must answer OK)", i+1, err)
		}
	}
}

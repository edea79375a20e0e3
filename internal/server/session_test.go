package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/relay"
)

// sessionConn is a raw Session stream for tests: answers by call id, and
// how the stream ended.
type sessionConn struct {
	t      testing.TB
	st     api.FenceService_SessionClient
	cancel context.CancelFunc

	mu      sync.Mutex
	answers map[uint64]chan *api.SessionResponse
	ended   chan struct{}
	err     error // guarded by mu; why the stream ended (nil: the server ended it cleanly)
}

func openSession(t testing.TB, cli api.FenceServiceClient, parent context.Context) *sessionConn {
	t.Helper()
	sctx, cancel := context.WithCancel(parent)
	st, err := cli.Session(sctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &sessionConn{t: t, st: st, cancel: cancel, answers: map[uint64]chan *api.SessionResponse{}, ended: make(chan struct{})}
	t.Cleanup(cancel)
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				s.mu.Lock()
				s.err = err
				s.mu.Unlock()
				close(s.ended)
				return
			}
			s.answer(r.CallId) <- r
		}
	}()
	return s
}

func (s *sessionConn) answer(id uint64) chan *api.SessionResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.answers[id] == nil {
		s.answers[id] = make(chan *api.SessionResponse, 16)
	}
	return s.answers[id]
}

func (s *sessionConn) send(r *api.SessionRequest) {
	s.t.Helper()
	if err := s.st.Send(r); err != nil {
		s.t.Fatalf("send %v: %v", r, err)
	}
}

// wait returns call id's answer: its response, or its refusal as an error.
func (s *sessionConn) wait(id uint64) (*api.SessionResponse, error) {
	s.t.Helper()
	select {
	case r := <-s.answer(id):
		if b, ok := r.Result.(*api.SessionResponse_Error); ok {
			var st spb.Status
			if err := proto.Unmarshal(b.Error, &st); err != nil {
				s.t.Fatalf("call %d: the error is no google.rpc.Status: %v", id, err)
			}
			return r, status.FromProto(&st).Err()
		}
		return r, nil
	case <-s.ended:
		s.t.Fatalf("call %d: the stream ended before its answer: %v", id, s.endErr())
	case <-time.After(10 * time.Second): // a hang guard, not a bound under test
		s.t.Fatalf("call %d: no answer", id)
	}
	return nil, nil
}

// endErr waits for the stream to end and returns how.
func (s *sessionConn) endErr() error {
	select {
	case <-s.ended:
	case <-time.After(10 * time.Second): // a hang guard
		s.t.Fatal("the stream did not end")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func acquireCall(id uint64, lease []byte, name string, wait bool, reqID []byte, seq uint64) *api.SessionRequest {
	return &api.SessionRequest{CallId: id, Call: &api.SessionRequest_Acquire{Acquire: &api.AcquireRequest{
		RequestId: reqID, LeaseSecret: lease, Name: name, Wait: wait, Seq: seq, Ack: 1, LockDelay: durationpb.New(0)}}}
}

func releaseCall(id uint64, lease []byte, name string) *api.SessionRequest {
	return &api.SessionRequest{CallId: id, Call: &api.SessionRequest_Release{Release: &api.ReleaseRequest{
		RequestId: newReq(), LeaseSecret: lease, Name: name, Seq: nextSeq(), Ack: 1}}}
}

func cancelCall(id uint64) *api.SessionRequest {
	return &api.SessionRequest{CallId: id, Call: &api.SessionRequest_Cancel{Cancel: &api.SessionCancel{}}}
}

// queued reports the lease numbers waiting for name.
func (n *testNode) queued(name string) int {
	var q int
	n.srv.node.View(func(s *fsm.State) { q = len(s.Queue(name)) })
	return q
}

// A waiting Acquire on a stream holds up neither a Release nor a renewal
// on the same stream, and is granted when the lock is released there.
func TestSessionCallsRunConcurrently(t *testing.T) {
	n := startNode(t, nil)
	a, b := n.lease(time.Hour, "a"), n.lease(time.Hour, "b")
	s := openSession(t, n.cli, t.Context())
	s.send(acquireCall(1, a, "x", false, newReq(), nextSeq()))
	first, err := s.wait(1)
	if err != nil {
		t.Fatal(err)
	}
	s.send(acquireCall(2, b, "x", true, newReq(), nextSeq())) // waits
	eventually(t, "b queued", func() bool { return n.queued("x") == 1 })
	s.send(&api.SessionRequest{CallId: 3, Call: &api.SessionRequest_KeepAlive{KeepAlive: &api.KeepAliveRequest{LeaseSecret: a, Seq: 7}}})
	r, err := s.wait(3)
	if err != nil || !r.GetKeepAlive().GetOk() || r.GetKeepAlive().GetSeq() != 7 {
		t.Fatalf("renewal behind a waiting Acquire: %v %v", r, err)
	}
	s.send(releaseCall(4, a, "x"))
	if _, err := s.wait(4); err != nil {
		t.Fatalf("release behind a waiting Acquire: %v", err)
	}
	r, err = s.wait(2)
	if err != nil || r.GetAcquire().GetToken() <= first.GetAcquire().GetToken() {
		t.Fatalf("the waiter after the release: %v %v (first token %d)", r, err, first.GetAcquire().GetToken())
	}
}

// The unknown-outcome rule across streams: an Acquire whose answer never
// arrived (its stream broke after the server granted it) is retried with
// the same request id on a new stream, and later on the same stream under
// an old call id: each answers the first grant, never a second one.
func TestSessionRetryOnNewStreamReturnsFirstGrant(t *testing.T) {
	n := startNode(t, nil)
	a := n.lease(time.Hour, "a")
	s1 := openSession(t, n.cli, t.Context())
	req, seq := newReq(), nextSeq()
	s1.send(acquireCall(1, a, "x", false, req, seq))
	eventually(t, "granted", func() bool { return n.getLock("x").GetToken() != 0 })
	s1.cancel() // the answer may be lost with the stream: the outcome is unknown to the client
	tok := n.getLock("x").GetToken()

	s2 := openSession(t, n.cli, t.Context())
	s2.send(acquireCall(1, a, "x", false, req, seq))
	r, err := s2.wait(1)
	if err != nil || r.GetAcquire().GetToken() != tok {
		t.Fatalf("retry on a new stream: %v %v, want the first grant's token %d", r, err, tok)
	}
	s2.send(acquireCall(1, a, "x", false, req, seq)) // a late replay of the same call id, after its answer
	r, err = s2.wait(1)
	if err != nil || r.GetAcquire().GetToken() != tok {
		t.Fatalf("replay under the answered call id: %v %v, want token %d", r, err, tok)
	}
	if got := n.getLock("x").GetToken(); got != tok {
		t.Fatalf("the lock's token moved from %d to %d: a retry was granted again", tok, got)
	}
}

// Cancelling a waiting Acquire withdraws it from the queue, as a cancelled
// unary Acquire; a cancel of an unknown call id is ignored.
func TestSessionCancelWithdrawsWaiter(t *testing.T) {
	n := startNode(t, nil)
	a, b := n.lease(time.Hour, "a"), n.lease(time.Hour, "b")
	if _, err := n.acquire(a, "x", false); err != nil {
		t.Fatal(err)
	}
	s := openSession(t, n.cli, t.Context())
	s.send(cancelCall(99)) // nothing runs under 99
	s.send(acquireCall(1, b, "x", true, newReq(), nextSeq()))
	eventually(t, "b queued", func() bool { return n.queued("x") == 1 })
	s.send(cancelCall(1))
	if _, err := s.wait(1); code(err) != codes.Canceled {
		t.Fatalf("cancelled waiter: %v, want CANCELED", err)
	}
	eventually(t, "b withdrawn", func() bool { return n.queued("x") == 0 })
	// The stream lives on.
	s.send(acquireCall(2, b, "y", false, newReq(), nextSeq()))
	if _, err := s.wait(2); err != nil {
		t.Fatal(err)
	}
}

// A call's timeout ends its wait (DEADLINE_EXCEEDED) and withdraws it.
func TestSessionTimeoutWithdrawsWaiter(t *testing.T) {
	n := startNode(t, nil)
	a, b := n.lease(time.Hour, "a"), n.lease(time.Hour, "b")
	if _, err := n.acquire(a, "x", false); err != nil {
		t.Fatal(err)
	}
	s := openSession(t, n.cli, t.Context())
	req := acquireCall(1, b, "x", true, newReq(), nextSeq())
	req.Timeout = durationpb.New(50 * time.Millisecond)
	s.send(req)
	if _, err := s.wait(1); code(err) != codes.DeadlineExceeded {
		t.Fatalf("waiter at its timeout: %v, want DEADLINE_EXCEEDED", err)
	}
	eventually(t, "b withdrawn", func() bool { return n.queued("x") == 0 })
}

// The end of the stream (the client went away) withdraws its waiters.
func TestSessionEndWithdrawsWaiters(t *testing.T) {
	n := startNode(t, nil)
	a, b := n.lease(time.Hour, "a"), n.lease(time.Hour, "b")
	for _, name := range []string{"x", "y"} {
		if _, err := n.acquire(a, name, false); err != nil {
			t.Fatal(err)
		}
	}
	s := openSession(t, n.cli, t.Context())
	first := acquireCall(1, b, "x", true, newReq(), nextSeq())
	second := acquireCall(2, b, "y", true, newReq(), nextSeq())
	second.GetAcquire().Ack = first.GetAcquire().GetSeq() // the first is not answered
	s.send(first)
	s.send(second)
	eventually(t, "b queued twice", func() bool { return n.queued("x") == 1 && n.queued("y") == 1 })
	s.cancel()
	eventually(t, "b withdrawn", func() bool { return n.queued("x") == 0 && n.queued("y") == 0 })
}

// A Release racing its own Acquire's cancel: whatever the order the server
// sees them in, the lease ends up neither holding nor waiting for the
// lock once a retry of the Acquire (the client's settle) has told it the
// outcome and a grant, if any, was given back.
func TestSessionReleaseRacesCancel(t *testing.T) {
	n := startNode(t, nil)
	a, b := n.lease(time.Hour, "a"), n.lease(time.Hour, "b")
	for i := range 20 {
		name := fmt.Sprintf("race/%d", i)
		if _, err := n.acquire(a, name, false); err != nil {
			t.Fatal(err)
		}
		s := openSession(t, n.cli, t.Context())
		req, seq := newReq(), nextSeq()
		s.send(acquireCall(1, b, name, true, req, seq))
		eventually(t, "b queued", func() bool { return n.queued(name) == 1 })
		s.send(releaseCall(2, a, name)) // hands the lock to b …
		s.send(cancelCall(1))           // … while b's client gives up on it
		rel := releaseCall(3, b, name)  // and releases what it might hold
		rel.GetRelease().Ack = seq      // the Acquire is not answered yet
		s.send(rel)
		s.wait(2)
		_, err := s.wait(1)
		s.wait(3)
		if err != nil { // settle: the retry answers the first outcome
			s.send(acquireCall(4, b, name, true, req, seq))
			if r, rerr := s.wait(4); rerr == nil {
				t.Logf("%s: the grant won the race (token %d); given back", name, r.GetAcquire().GetToken())
				s.send(releaseCall(5, b, name))
				if _, err := s.wait(5); err != nil {
					t.Fatal(err)
				}
			}
		} else {
			s.send(releaseCall(6, b, name))
			s.wait(6)
		}
		eventually(t, "nothing left of b on "+name, func() bool { return n.getLock(name).GetToken() == 0 && n.queued(name) == 0 })
		s.cancel()
	}
}

// Breaking the stream's rules ends it with INVALID_ARGUMENT: call id 0, a
// call id reused while its call runs. A request without a call, or with a
// bad timeout or a bad Acquire, is refused alone, as the unary call would be.
func TestSessionBadInput(t *testing.T) {
	n := startNode(t, nil)
	a, b := n.lease(time.Hour, "a"), n.lease(time.Hour, "b")
	if _, err := n.acquire(a, "x", false); err != nil {
		t.Fatal(err)
	}
	s := openSession(t, n.cli, t.Context())
	s.send(&api.SessionRequest{CallId: 1})
	if _, err := s.wait(1); code(err) != codes.InvalidArgument {
		t.Fatalf("a request without a call: %v, want INVALID_ARGUMENT", err)
	}
	bad := acquireCall(2, b, "y", false, newReq(), nextSeq())
	bad.Timeout = durationpb.New(-time.Second)
	s.send(bad)
	if _, err := s.wait(2); code(err) != codes.InvalidArgument {
		t.Fatalf("a negative timeout: %v, want INVALID_ARGUMENT", err)
	}
	s.send(acquireCall(3, b, "", false, newReq(), nextSeq()))
	_, err := s.wait(3)
	_, unary := n.cli.Acquire(ctx(t), &api.AcquireRequest{RequestId: newReq(), LeaseSecret: b, Seq: nextSeq(), Ack: 1})
	if code(err) != codes.InvalidArgument || status.Convert(err).Message() != status.Convert(unary).Message() {
		t.Fatalf("an Acquire without a name: %v, want the unary call's refusal %v", err, unary)
	}
	s.send(acquireCall(4, b, "x", false, newReq(), nextSeq())) // held by a: refused with its LockHeld detail
	_, err = s.wait(4)
	if st := status.Convert(err); st.Code() != codes.Aborted || len(st.Details()) != 1 {
		t.Fatalf("a held lock: %v (details %v), want ABORTED with LockHeld", err, st.Details())
	}
	if n.getLock("y").GetToken() != 0 {
		t.Fatal("the Acquire with a bad timeout was executed")
	}

	s.send(acquireCall(5, b, "x", true, newReq(), nextSeq())) // waits
	eventually(t, "b queued", func() bool { return n.queued("x") == 1 })
	s.send(acquireCall(5, b, "z", false, newReq(), nextSeq()))
	if err := s.endErr(); code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "reused") {
		t.Fatalf("a call id reused while its call runs: the stream ended with %v, want INVALID_ARGUMENT", err)
	}
	eventually(t, "the waiter withdrawn with the stream", func() bool { return n.queued("x") == 0 })
	if n.getLock("z").GetToken() != 0 {
		t.Fatal("the refused call with the reused id was executed")
	}

	s2 := openSession(t, n.cli, t.Context())
	s2.send(acquireCall(0, b, "z", false, newReq(), nextSeq()))
	if err := s2.endErr(); code(err) != codes.InvalidArgument {
		t.Fatalf("call id 0: the stream ended with %v, want INVALID_ARGUMENT", err)
	}
	if n.getLock("z").GetToken() != 0 {
		t.Fatal("the call with id 0 was executed")
	}
}

// A message above the server's size limit ends the stream with
// RESOURCE_EXHAUSTED and changes nothing, as a unary call that size.
func TestSessionOversizedMessage(t *testing.T) {
	n := startNode(t, nil)
	b := n.lease(time.Hour, "b")
	s := openSession(t, n.cli, t.Context())
	huge := acquireCall(1, b, strings.Repeat("n", fsm.MaxValueLen+128<<10), false, newReq(), nextSeq())
	if err := s.st.Send(huge); err == nil {
		if err := s.endErr(); code(err) != codes.ResourceExhausted {
			t.Fatalf("an oversized message: the stream ended with %v, want RESOURCE_EXHAUSTED", err)
		}
	}
	var locks int
	n.srv.node.View(func(st *fsm.State) { locks = st.NumLocks() })
	if locks != 0 {
		t.Fatalf("%d locks after an oversized message, want 0", locks)
	}
}

// At most maxSessionCalls calls run on one stream: the next is refused
// with RESOURCE_EXHAUSTED and not executed, but a renewal is not; once one
// ends, calls run again.
func TestSessionBoundsCallsInFlight(t *testing.T) {
	n := startNode(t, nil)
	a, b, c := n.lease(time.Hour, "a"), n.lease(time.Hour, "b"), n.lease(time.Hour, "c")
	s := openSession(t, n.cli, t.Context())
	name := func(i int) string { return fmt.Sprintf("many/%d", i) }
	for i := range maxSessionCalls { // one at a time: each acknowledges the one before
		s.send(acquireCall(uint64(i+1), a, name(i), false, newReq(), nextSeq()))
		if _, err := s.wait(uint64(i + 1)); err != nil {
			t.Fatal(err)
		}
	}
	var open []uint64                // b's calls, all unanswered while they wait
	for i := range maxSessionCalls { // b waits on every one of them
		req := acquireCall(uint64(i+1), b, name(i), true, newReq(), nextSeq())
		acq := req.GetAcquire()
		if len(open) > 0 {
			acq.Ack, acq.Open = open[0], open[1:]
		} else {
			acq.Ack = acq.Seq
		}
		open = append(open, acq.Seq)
		s.send(req)
	}
	eventually(t, "all queued", func() bool { return n.queued(name(maxSessionCalls-1)) == 1 })
	extra := uint64(maxSessionCalls + 1) // of another lease: b is at its own bound of unacknowledged calls
	s.send(acquireCall(extra, c, "extra", false, newReq(), nextSeq()))
	if _, err := s.wait(extra); code(err) != codes.ResourceExhausted {
		t.Fatalf("call %d on the stream: %v, want RESOURCE_EXHAUSTED", extra, err)
	}
	if n.getLock("extra").GetToken() != 0 {
		t.Fatal("the refused call was executed")
	}
	// Renewals are not counted (their handler's backpressure bounds them):
	// a session whose every call waits still renews, or it would expire.
	renew := uint64(maxSessionCalls + 2)
	s.send(&api.SessionRequest{CallId: renew, Call: &api.SessionRequest_KeepAlive{KeepAlive: &api.KeepAliveRequest{LeaseSecret: b, Seq: 1}}})
	if r, err := s.wait(renew); err != nil || !r.GetKeepAlive().GetOk() {
		t.Fatalf("renewal of the lease whose %d calls wait on the stream: %v %v", maxSessionCalls, r, err)
	}
	s.send(cancelCall(1))
	if _, err := s.wait(1); code(err) != codes.Canceled {
		t.Fatal(err)
	}
	s.send(acquireCall(extra, c, "extra", false, newReq(), nextSeq()))
	if _, err := s.wait(extra); err != nil {
		t.Fatalf("a call after one ended: %v", err)
	}
}

// Bytes that are no SessionRequest end the stream with an error, and
// nothing is executed.
func TestSessionGarbage(t *testing.T) {
	n := startNode(t, nil)
	b := n.lease(time.Hour, "b")
	r, err := relay.New([]string{n.srv.GRPCAddr()}, insecure.NewCredentials(), insecure.NewCredentials(), relay.Hooks{
		Up: func(*relay.Call, []byte) [][]byte { return [][]byte{{0xff, 0xff, 0xff, 0x0f, 0x0a}} }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	conn, err := grpc.NewClient(r.Addrs()[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s := openSession(t, api.NewFenceServiceClient(conn), t.Context())
	s.send(acquireCall(1, b, "garbage", false, newReq(), nextSeq()))
	err = s.endErr()
	if err == nil || code(err) == codes.OK {
		t.Fatalf("a stream of garbage ended with %v, want an error", err)
	}
	t.Logf("garbage: %v", err)
	if n.getLock("garbage").GetToken() != 0 {
		t.Fatal("something was executed")
	}
}

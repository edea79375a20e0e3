package server

import (
	"bytes"
	"context"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
)

// sessionGoroutines counts the goroutines of Session streams that serve a
// call, and reports whether a stream's intake is parked while it starts
// (or refuses) a call, waiting for its client to read answers.
func sessionGoroutines(t *testing.T) (serving int, intakeParked bool) {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		t.Fatal(err)
	}
	for g := range strings.SplitSeq(b.String(), "\n\n") {
		switch {
		case strings.Contains(g, "(*sessionStream).serve("):
			serving++
		case strings.Contains(g, "(*sessionStream).intake(") && strings.Contains(g, "(*sessionStream).start(") &&
			(strings.Contains(g, " [select") || strings.Contains(g, " [chan send")):
			intakeParked = true
		}
	}
	return serving, intakeParked
}

// A client that sends calls and never reads their answers holds at most
// maxSessionCalls of the server's goroutines: a call whose answer waits to
// be sent still holds one of the stream's maxSessionCalls answer slots, so
// the stream stops taking calls (its intake waits for a slot) instead of
// starting a goroutine for each call sent.
func TestSessionNonReadingClientHoldsBoundedGoroutines(t *testing.T) {
	n := startNode(t, nil)
	// The smallest window gRPC takes: the server's answers stop after 64 KiB.
	conn, err := grpc.NewClient(n.srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStaticStreamWindowSize(64<<10), grpc.WithStaticConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	st, err := api.NewFenceServiceClient(conn).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Each call is refused at once (a Release of no lease): its answer is
	// ready at once, and the client reads none. 3*maxSessionCalls requests
	// fit in the server's receive window (api.StreamWindow), so sending
	// them never blocks, whatever the server does.
	const calls = 3 * maxSessionCalls
	for i := range calls {
		if err := st.Send(&api.SessionRequest{CallId: uint64(i + 1), Call: &api.SessionRequest_Release{Release: &api.ReleaseRequest{}}}); err != nil {
			t.Fatalf("send %d: %v", i+1, err)
		}
	}
	// Either the stream's goroutines pass the bound (the finding), or the
	// intake stops at it.
	var serving int
	eventually(t, "the intake to stop, or the goroutines to pass the bound", func() bool {
		var parked bool
		serving, parked = sessionGoroutines(t)
		return parked || serving > maxSessionCalls
	})
	if serving > maxSessionCalls {
		t.Fatalf("%d goroutines serve calls of one stream whose client reads nothing, want at most %d", serving, maxSessionCalls)
	}
}

// intakeStuckAnswering reports whether a Session stream's intake is parked
// sending a refusal it answers itself (while it holds the stream's lock).
func intakeStuckAnswering(t *testing.T) bool {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		t.Fatal(err)
	}
	for g := range strings.SplitSeq(b.String(), "\n\n") {
		if strings.Contains(g, "(*sessionStream).intake(") && strings.Contains(g, "(*sessionStream).answerErr(") &&
			(strings.Contains(g, " [select") || strings.Contains(g, " [chan send")) {
			return true
		}
	}
	return false
}

// A client that reads no answers, whose stream's intake is stuck sending a
// refusal while it holds that stream's lock, stalls nothing else: another
// stream's Acquire, renewal and Release are answered, and so is a unary
// call.
func TestSessionNonReadingStreamStallsNoOther(t *testing.T) {
	n := startNode(t, nil)
	a := n.lease(time.Hour, "a")
	conn, err := grpc.NewClient(n.srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStaticStreamWindowSize(64<<10), grpc.WithStaticConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	st, err := api.NewFenceServiceClient(conn).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 * maxSessionCalls { // requests without a call: the intake answers each itself
		if err := st.Send(&api.SessionRequest{CallId: uint64(i + 1)}); err != nil {
			t.Fatalf("send %d: %v", i+1, err)
		}
	}
	eventually(t, "the intake to be stuck answering", func() bool { return intakeStuckAnswering(t) })
	s := openSession(t, n.cli, t.Context())
	s.send(acquireCall(1, a, "other", false, newReq(), nextSeq()))
	if _, err := s.wait(1); err != nil {
		t.Fatalf("acquire on another stream: %v", err)
	}
	s.send(&api.SessionRequest{CallId: 2, Call: &api.SessionRequest_KeepAlive{KeepAlive: &api.KeepAliveRequest{LeaseSecret: a, Seq: 1}}})
	if r, err := s.wait(2); err != nil || !r.GetKeepAlive().GetOk() {
		t.Fatalf("renewal on another stream: %v %v", r, err)
	}
	s.send(releaseCall(3, a, "other"))
	if _, err := s.wait(3); err != nil {
		t.Fatalf("release on another stream: %v", err)
	}
	if got := n.getLock("other"); got.GetHolderLeaseNumber() != 0 {
		t.Fatalf("after the release: %v", got)
	}
}

// Timeouts at and past their edges: zero, a negative fraction and one
// past durationpb's range are refused alone (INVALID_ARGUMENT, nothing
// executed); the largest valid one runs the call. A storm of cancels for
// calls that do not run is ignored, and the stream serves on.
func TestSessionTimeoutEdgesAndCancelStorm(t *testing.T) {
	n := startNode(t, nil)
	a := n.lease(time.Hour, "a")
	s := openSession(t, n.cli, t.Context())
	for i, bad := range []*durationpb.Duration{{}, {Nanos: -1}, {Seconds: 315576000001}, {Seconds: 1, Nanos: 1e9}} {
		id := uint64(i + 1)
		req := acquireCall(id, a, "edge", false, newReq(), nextSeq())
		req.Timeout = bad
		s.send(req)
		if _, err := s.wait(id); code(err) != codes.InvalidArgument {
			t.Fatalf("timeout %v: %v, want INVALID_ARGUMENT", bad, err)
		}
	}
	if n.getLock("edge").GetToken() != 0 {
		t.Fatal("an Acquire with a bad timeout was executed")
	}
	for i := range 5000 {
		s.send(cancelCall(uint64(100 + i)))
	}
	req := acquireCall(10, a, "edge", false, newReq(), nextSeq())
	req.Timeout = &durationpb.Duration{Seconds: 315576000000} // durationpb's largest: 10,000 years
	s.send(req)
	if _, err := s.wait(10); err != nil {
		t.Fatalf("the largest timeout, after 5000 cancels: %v", err)
	}
}

// A late duplicate across streams: an Acquire granted on one stream, its
// grant released on another (whose request acknowledges the Acquire), and
// then the same Acquire (same request id and number) arriving once more on
// the first stream is refused and grants nothing: the lock stays free, no
// ghost grant. (The planted bug fence_bug_replay fails it.)
func TestSessionLateDuplicateAcrossStreamsGrantsNothing(t *testing.T) {
	n := startNode(t, nil)
	a := n.lease(time.Hour, "a")
	first, second := openSession(t, n.cli, t.Context()), openSession(t, n.cli, t.Context())
	req, seq := newReq(), nextSeq()
	first.send(acquireCall(1, a, "dup", false, req, seq))
	if _, err := first.wait(1); err != nil {
		t.Fatal(err)
	}
	rel := releaseCall(1, a, "dup")
	rel.GetRelease().Ack = rel.GetRelease().GetSeq() // every call below it answered: the Acquire's too
	second.send(rel)
	if _, err := second.wait(1); err != nil {
		t.Fatal(err)
	}
	first.send(acquireCall(2, a, "dup", false, req, seq))
	r, err := first.wait(2)
	if err == nil {
		t.Fatalf("the late duplicate was answered %v, want refused", r)
	}
	if holder := n.getLock("dup").GetHolderLeaseNumber(); holder != 0 {
		t.Fatalf("the late duplicate granted the lock again (holder lease %d): a ghost grant", holder)
	}
}

// serverGoroutines counts the goroutines running code of package server.
func serverGoroutines(t *testing.T) int {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		t.Fatal(err)
	}
	n := 0
	for g := range strings.SplitSeq(b.String(), "\n\n") {
		if strings.Contains(g, "fence/internal/server.(") && !strings.Contains(g, "testing.tRunner") {
			n++
		}
	}
	return n
}

// An idle Session stream costs the server no more goroutines than an idle
// KeepAlive stream: a client may open very many (no cap per connection or
// identity). Today it costs 4 (the handler, its intake, the KeepAlive
// handler started at once for renewals, and that handler's intake) against
// KeepAlive's 2: about 27 KiB of heap and stack per stream on both sides
// (measured for 2000 streams), 2.7 GB for 100 000.
func TestSessionIdleStreamCost(t *testing.T) {
	t.Skip("finding: an idle Session stream holds 4 server goroutines (KeepAlive: 2) and no cap bounds the streams a connection or identity opens; fix: start the renewal handler at the first renewal (it also watches leadership), and/or grpc.MaxConcurrentStreams / a per-identity cap")
	n := startNode(t, nil)
	const streams = 50
	base := serverGoroutines(t)
	for range streams {
		if _, err := n.cli.KeepAlive(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the KeepAlive handlers", func() bool { return serverGoroutines(t)-base >= 2*streams })
	keepAlive := serverGoroutines(t) - base
	base += keepAlive
	for range streams {
		if _, err := n.cli.Session(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the Session handlers", func() bool { return serverGoroutines(t)-base >= 2*streams })
	time.Sleep(100 * time.Millisecond) // let every stream's goroutines start: a measurement, not a bound
	if session := serverGoroutines(t) - base; session > keepAlive {
		t.Fatalf("%d idle Session streams hold %d server goroutines, %d KeepAlive streams %d", streams, session, streams, keepAlive)
	}
}

package server

import (
	"context"
	"crypto/rand"
	"fmt"

	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/clock/clocktest"
	"github.com/fencehq/fence/internal/fsm"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type testNode struct {
	t        testing.TB
	srv      *Server
	cli      api.FenceServiceClient
	clock    *clocktest.Fake
	dir      string
	conf     func(*Config)
	grpcAddr string // pinned after the first start
	raftAddr string // likewise: a member's raft address never changes
}

// startNode runs a single-node server in a temp dir on free loopback ports,
// with a fake clock driving leases, ticks and lock-delays.
func startNode(t testing.TB, conf func(*Config)) *testNode {
	t.Helper()
	n := &testNode{t: t, clock: clocktest.New(), dir: t.TempDir(), conf: conf}
	n.start()
	t.Cleanup(func() { n.stop() })
	return n
}

func (n *testNode) start() {
	n.t.Helper()
	cfg := DefaultConfig()
	cfg.Insecure = true // these tests dial plaintext; tls_test.go covers TLS
	cfg.DataDir, cfg.GRPCAddr, cfg.RaftAddr, cfg.MetricsAddr = n.dir, "127.0.0.1:0", "127.0.0.1:0", ""
	if n.grpcAddr != "" {
		cfg.GRPCAddr, cfg.RaftAddr = n.grpcAddr, n.raftAddr
	}
	cfg.Clock = n.clock
	cfg.Registerer = prometheus.NewRegistry()
	cfg.Logger = testLogger()
	cfg.RaftLogLevel = "error"
	cfg.HeartbeatTimeout, cfg.ElectionTimeout = 10*time.Millisecond, 50*time.Millisecond
	if n.conf != nil {
		n.conf(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		n.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.WaitReady(ctx); err != nil {
		n.t.Fatal(err)
	}
	// Keep the address across restarts, and let the leader record it first.
	n.grpcAddr, n.raftAddr = srv.GRPCAddr(), srv.RaftAddr()
	for {
		var recorded string
		srv.node.View(func(s *fsm.State) { recorded, _ = s.NodeAddr(cfg.NodeID) })
		if recorded == srv.AdvertisedGRPCAddr() {
			break
		}
		if ctx.Err() != nil {
			n.t.Fatal("leader never recorded its address")
		}
		time.Sleep(time.Millisecond)
	}
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { conn.Close() })
	n.srv, n.cli = srv, api.NewFenceServiceClient(conn)
}

func (n *testNode) stop() {
	if n.srv != nil {
		if err := n.srv.Close(); err != nil {
			n.t.Errorf("close: %v", err)
		}
		n.srv = nil
	}
}

func (n *testNode) restart() {
	n.t.Helper()
	n.stop()
	n.start()
}

func testLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func newReq() []byte {
	b := make([]byte, 16)
	rand.Read(b)
	return b
}

// testSeq numbers the Acquire and Release calls of the tests: unique across
// all leases, which is all the call numbering asks (ack stays 0: no test
// makes 1024 calls on one lease).
var testSeq atomic.Uint64

func nextSeq() uint64 { return testSeq.Add(1) }

func (n *testNode) lease(ttl time.Duration, owner string) []byte {
	n.t.Helper()
	r, err := n.cli.CreateLease(ctx(n.t), &api.CreateLeaseRequest{RequestId: newReq(), Ttl: durationpb.New(ttl), Owner: owner})
	if err != nil {
		n.t.Fatal(err)
	}
	return r.LeaseSecret
}

func (n *testNode) acquire(lease []byte, name string, wait bool) (*api.AcquireResponse, error) {
	return n.cli.Acquire(ctx(n.t), &api.AcquireRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: lease, Name: name, Wait: wait,
		LockDelay: durationpb.New(0)})
}

func (n *testNode) getLock(name string) *api.LockInfo {
	n.t.Helper()
	r, err := n.cli.GetLock(ctx(n.t), &api.GetLockRequest{Name: name})
	if err != nil {
		n.t.Fatal(err)
	}
	return r.Lock
}

// eventually polls cond until it holds; the fake clock makes the outcome
// deterministic, the poll only waits for goroutines to catch up.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func code(err error) codes.Code { return status.Code(err) }

func TestAcquireReleaseHandoff(t *testing.T) {
	n := startNode(t, nil)
	a, b, c := n.lease(time.Hour, "a"), n.lease(time.Hour, "b"), n.lease(time.Hour, "c")

	got, err := n.acquire(a, "jobs/nightly", false)
	if err != nil || got.Token != 1 {
		t.Fatalf("acquire: %v %v", got, err)
	}
	_, err = n.acquire(b, "jobs/nightly", false)
	if code(err) != codes.Aborted {
		t.Fatalf("try on held lock: %v", err)
	}
	var held *api.LockHeld
	for _, d := range status.Convert(err).Details() {
		held, _ = d.(*api.LockHeld)
	}
	if held == nil || held.Token != 1 || held.HolderOwner != "a" {
		t.Fatalf("no LockHeld detail: %v", status.Convert(err).Details())
	}

	// b then c queue; release hands over in FIFO order.
	type grant struct {
		who string
		tok uint64
		err error
	}
	grants := make(chan grant, 2)
	for _, w := range []struct {
		who   string
		lease []byte
	}{{"b", b}, {"c", c}} {
		go func() {
			r, err := n.acquire(w.lease, "jobs/nightly", true)
			grants <- grant{w.who, r.GetToken(), err}
		}()
		want := uint32(1)
		if w.who == "c" {
			want = 2
		}
		eventually(t, w.who+" queued", func() bool { return n.getLock("jobs/nightly").Waiters == want })
	}
	if _, err := n.cli.Release(ctx(t), &api.ReleaseRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: a, Name: "jobs/nightly"}); err != nil {
		t.Fatal(err)
	}
	g := <-grants
	if g.err != nil || g.who != "b" || g.tok != 2 {
		t.Fatalf("first handoff: %+v", g)
	}
	if _, err := n.cli.Revoke(ctx(t), &api.RevokeRequest{RequestId: newReq(), LeaseSecret: b}); err != nil {
		t.Fatal(err)
	}
	g = <-grants
	if g.err != nil || g.who != "c" || g.tok != 3 {
		t.Fatalf("second handoff: %+v", g)
	}
	list, err := n.cli.ListLocks(ctx(t), &api.ListLocksRequest{})
	if err != nil || len(list.Locks) != 1 || list.Locks[0].HolderOwner != "c" || list.Locks[0].Token != 3 {
		t.Fatalf("list: %v %v", list, err)
	}
	// Release by a lease that does not hold it.
	_, err = n.cli.Release(ctx(t), &api.ReleaseRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: a, Name: "jobs/nightly"})
	if code(err) != codes.FailedPrecondition {
		t.Fatalf("release by non-holder: %v", err)
	}
}

func TestAcquireRetryIsIdempotent(t *testing.T) {
	n := startNode(t, nil)
	a := n.lease(time.Hour, "a")
	req := &api.AcquireRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: a, Name: "x"}
	first, err := n.cli.Acquire(ctx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := n.cli.Acquire(ctx(t), req) // the reply was "lost"; retry
	if err != nil || again.Token != first.Token {
		t.Fatalf("retry: %v %v, want token %d", again, err, first.Token)
	}
	if _, err := n.cli.Release(ctx(t), &api.ReleaseRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: a, Name: "x"}); err != nil {
		t.Fatal(err)
	}
	// A very late duplicate: its grant has ended, so it says so (never OK).
	if late, err := n.cli.Acquire(ctx(t), req); code(err) != codes.FailedPrecondition {
		t.Fatalf("late duplicate of a grant since released: %v %v, want FAILED_PRECONDITION", late, err)
	}
	if n.getLock("x").HolderLeaseNumber != 0 {
		t.Fatal("a late duplicate re-acquired the lock")
	}
	// A new call for a lock the lease holds is refused, not silently shared.
	if _, err := n.acquire(a, "y", false); err != nil {
		t.Fatal(err)
	}
	if _, err := n.acquire(a, "y", false); code(err) != codes.AlreadyExists {
		t.Fatalf("second acquire by the same lease: %v", err)
	}
}

func TestExpiryAndLockDelay(t *testing.T) {
	n := startNode(t, nil)
	dead := n.lease(2*time.Second, "paused")
	live := n.lease(time.Hour, "next")
	r, err := n.cli.Acquire(ctx(t), &api.AcquireRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: dead, Name: "x", LockDelay: durationpb.New(3 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *api.AcquireResponse, 1)
	go func() {
		r, _ := n.acquire(live, "x", true)
		got <- r
	}()
	eventually(t, "waiter queued", func() bool { return n.getLock("x").Waiters == 1 })

	n.clock.Advance(1900 * time.Millisecond)
	if l := n.getLock("x"); l.HolderOwner != "paused" {
		t.Fatalf("expired early: %v", l)
	}
	n.clock.Advance(200 * time.Millisecond)
	eventually(t, "expiry", func() bool { return n.getLock("x").Delayed })
	if _, err := n.acquire(n.lease(time.Hour, "other"), "x", false); code(err) != codes.Aborted {
		t.Fatalf("try during lock-delay: %v", err)
	}
	n.clock.Advance(2900 * time.Millisecond)
	select {
	case g := <-got:
		t.Fatalf("granted during lock-delay: %v", g)
	case <-time.After(50 * time.Millisecond):
	}
	n.clock.Advance(200 * time.Millisecond)
	g := <-got
	if g == nil || g.Token != r.Token+1 {
		t.Fatalf("grant after lock-delay: %v", g)
	}
	// The expired lease is gone: renewing it says so, using it is NotFound.
	if _, err := n.acquire(dead, "y", false); code(err) != codes.NotFound {
		t.Fatalf("acquire with expired lease: %v", err)
	}
}

func TestKeepAliveRenews(t *testing.T) {
	n := startNode(t, nil)
	a := n.lease(2*time.Second, "a")
	if _, err := n.acquire(a, "x", false); err != nil {
		t.Fatal(err)
	}
	stream, err := n.cli.KeepAlive(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 10; i++ { // 10 × 1s: far past the 2s TTL
		n.clock.Advance(time.Second)
		if err := stream.Send(&api.KeepAliveRequest{LeaseSecret: a, Seq: i}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil || !resp.Ok || resp.Seq != i || resp.Ttl.AsDuration() != 2*time.Second {
			t.Fatalf("renewal %d: %v %v", i, resp, err)
		}
	}
	if l := n.getLock("x"); l.HolderOwner != "a" || l.TtlLeft.AsDuration() != 2*time.Second {
		t.Fatalf("renewed lease lost its lock: %v", l)
	}
	// Stop renewing: it ends.
	n.clock.Advance(2100 * time.Millisecond)
	eventually(t, "expiry", func() bool { return n.getLock("x").HolderLeaseNumber == 0 })
	if err := stream.Send(&api.KeepAliveRequest{LeaseSecret: a, Seq: 99}); err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.Recv(); err != nil || resp.Ok {
		t.Fatalf("renewal of an expired lease: %v %v", resp, err)
	}
	stream.CloseSend()
}

func TestWaitGivesUpAtDeadline(t *testing.T) {
	n := startNode(t, nil)
	a, b := n.lease(time.Hour, "a"), n.lease(time.Hour, "b")
	if _, err := n.acquire(a, "x", false); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := n.cli.Acquire(c, &api.AcquireRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: b, Name: "x", Wait: true})
	if code(err) != codes.DeadlineExceeded {
		t.Fatalf("wait past deadline: %v", err)
	}
	eventually(t, "queue left", func() bool { return n.getLock("x").Waiters == 0 })
}

func TestFencedPutGet(t *testing.T) {
	n := startNode(t, nil)
	a, b := n.lease(time.Hour, "a"), n.lease(time.Hour, "b")
	ta, _ := n.acquire(a, "x", false)
	n.cli.Release(ctx(t), &api.ReleaseRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: a, Name: "x"})
	tb, _ := n.acquire(b, "x", false)

	put := func(v string, tok uint64) error {
		_, err := n.cli.Put(ctx(t), &api.PutRequest{RequestId: newReq(), Key: "total/77", Value: []byte(v), Token: tok})
		return err
	}
	if err := put("B", tb.Token); err != nil {
		t.Fatal(err)
	}
	if err := put("B2", tb.Token); err != nil { // same token again: allowed
		t.Fatal(err)
	}
	err := put("A-stale", ta.Token)
	if code(err) != codes.FailedPrecondition {
		t.Fatalf("stale put: %v", err)
	}
	var st *api.StaleToken
	for _, d := range status.Convert(err).Details() {
		st, _ = d.(*api.StaleToken)
	}
	if st == nil || st.Offered != ta.Token || st.Highest != tb.Token {
		t.Fatalf("stale detail: %v", st)
	}
	g, err := n.cli.Get(ctx(t), &api.GetRequest{Key: "total/77"})
	if err != nil || string(g.Value) != "B2" || g.Token != tb.Token {
		t.Fatalf("get: %v %v", g, err)
	}
	if _, err := n.cli.Get(ctx(t), &api.GetRequest{Key: "nope"}); code(err) != codes.NotFound {
		t.Fatalf("get missing: %v", err)
	}
	if err := put("future", 1000); code(err) != codes.InvalidArgument {
		t.Fatalf("put with a token never issued: %v", err)
	}
}

// TestBadInputChangesNothing sends malformed requests; each gets
// InvalidArgument and the state stays byte-identical.
func TestBadInputChangesNothing(t *testing.T) {
	n := startNode(t, nil)
	a := n.lease(time.Hour, "a")
	before := n.state()
	long := make([]byte, 257)
	for i := range long {
		long[i] = 'x'
	}
	tests := []struct {
		name string
		call func() error
	}{
		{"ttl missing", func() error { _, err := n.cli.CreateLease(ctx(t), &api.CreateLeaseRequest{}); return err }},
		{"ttl below min", func() error {
			_, err := n.cli.CreateLease(ctx(t), &api.CreateLeaseRequest{Ttl: durationpb.New(time.Millisecond)})
			return err
		}},
		{"ttl above max", func() error {
			_, err := n.cli.CreateLease(ctx(t), &api.CreateLeaseRequest{Ttl: durationpb.New(2 * time.Hour)})
			return err
		}},
		{"ttl malformed", func() error {
			_, err := n.cli.CreateLease(ctx(t), &api.CreateLeaseRequest{Ttl: &durationpb.Duration{Seconds: 5, Nanos: -1}})
			return err
		}},
		{"owner with newline", func() error {
			_, err := n.cli.CreateLease(ctx(t), &api.CreateLeaseRequest{Ttl: durationpb.New(time.Minute), Owner: "a\nb"})
			return err
		}},
		{"request id of 3 bytes", func() error {
			_, err := n.cli.CreateLease(ctx(t), &api.CreateLeaseRequest{RequestId: []byte{1, 2, 3}, Ttl: durationpb.New(time.Minute)})
			return err
		}},
		{"lease id short", func() error {
			_, err := n.cli.Acquire(ctx(t), &api.AcquireRequest{LeaseSecret: []byte{1}, Name: "x"})
			return err
		}},
		{"lock name empty", func() error { _, err := n.cli.Acquire(ctx(t), &api.AcquireRequest{LeaseSecret: a}); return err }},
		{"lock name too long", func() error {
			_, err := n.cli.Acquire(ctx(t), &api.AcquireRequest{LeaseSecret: a, Name: string(long)})
			return err
		}},
		{"lock name control char", func() error {
			_, err := n.cli.Acquire(ctx(t), &api.AcquireRequest{LeaseSecret: a, Name: "a\x07"})
			return err
		}},
		{"lock-delay negative", func() error {
			_, err := n.cli.Acquire(ctx(t), &api.AcquireRequest{LeaseSecret: a, Name: "x", LockDelay: durationpb.New(-time.Second)})
			return err
		}},
		{"once_per negative", func() error {
			_, err := n.cli.Acquire(ctx(t), &api.AcquireRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: a, Name: "x", OncePer: durationpb.New(-time.Second)})
			return err
		}},
		{"once_per above 366 days", func() error {
			_, err := n.cli.Acquire(ctx(t), &api.AcquireRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: a, Name: "x", OncePer: durationpb.New(367 * 24 * time.Hour)})
			return err
		}},
		{"once_per malformed", func() error {
			_, err := n.cli.Acquire(ctx(t), &api.AcquireRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: a, Name: "x", OncePer: &durationpb.Duration{Seconds: 5, Nanos: -1}})
			return err
		}},
		{"put token 0", func() error { _, err := n.cli.Put(ctx(t), &api.PutRequest{Key: "k", Token: 0}); return err }},
		{"put value too large", func() error {
			_, err := n.cli.Put(ctx(t), &api.PutRequest{Key: "k", Token: 1, Value: make([]byte, 1<<20+1)})
			return err
		}},
		{"get key empty", func() error { _, err := n.cli.Get(ctx(t), &api.GetRequest{}); return err }},
		{"release name empty", func() error { _, err := n.cli.Release(ctx(t), &api.ReleaseRequest{LeaseSecret: a}); return err }},
		{"revoke lease id empty", func() error { _, err := n.cli.Revoke(ctx(t), &api.RevokeRequest{}); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if code(err) != codes.InvalidArgument || status.Convert(err).Message() == "" {
				t.Fatalf("got %v, want InvalidArgument with a message", err)
			}
			if after := n.state(); after != before {
				t.Fatal("a refused request changed the state")
			}
		})
	}
}

// state returns the canonical encoding of the node's replicated state.
func (n *testNode) state() string {
	var b []byte
	n.srv.node.View(func(s *fsmState) { b = s.Marshal(nil) })
	return string(b)
}

// logAndSnapshot runs f as two subtests: restarting from the log alone
// (snap false) and from a snapshot plus the log after it (snap true).
func logAndSnapshot(t *testing.T, f func(t *testing.T, snap bool)) {
	for _, snap := range []bool{false, true} {
		name := "log only"
		if snap {
			name = "across a snapshot"
		}
		t.Run(name, func(t *testing.T) { f(t, snap) })
	}
}

// TestRestartKeepsStateAndTokens restarts a node from its data dir (log only,
// and from a snapshot plus the log after it). The highest token belongs to a
// released lock, so a counter rebuilt from what is held would repeat it.
func TestRestartKeepsStateAndTokens(t *testing.T) {
	logAndSnapshot(t, func(t *testing.T, snap bool) {
		n := startNode(t, nil)
		a := n.lease(time.Hour, "a")
		if r, err := n.acquire(a, "keep", false); err != nil || r.Token != 1 {
			t.Fatalf("keep: %v %v", r, err)
		}
		for i := 0; i < 20; i++ {
			if _, err := n.acquire(a, "x", false); err != nil {
				t.Fatal(err)
			}
			if _, err := n.cli.Release(ctx(t), &api.ReleaseRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: a, Name: "x"}); err != nil {
				t.Fatal(err)
			}
		}
		last := uint64(21)
		if snap {
			if err := n.srv.Snapshot(); err != nil {
				t.Fatal(err)
			}
		}
		before := n.state()
		n.restart()
		if after := n.state(); after != before {
			t.Fatal("state after restart differs")
		}
		if l := n.getLock("keep"); l.HolderOwner != "a" || l.Token != 1 {
			t.Fatalf("lock after restart: %v", l)
		}
		r, err := n.acquire(n.lease(time.Hour, "b"), "fresh", false)
		if err != nil || r.Token != last+1 {
			t.Fatalf("token after restart: %v %v, want %d", r, err, last+1)
		}
		// The lease survived the restart and is still the holder's.
		if _, err := n.cli.Release(ctx(t), &api.ReleaseRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: a, Name: "keep"}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRestartCreditsLoggedTime(t *testing.T) {
	n := startNode(t, nil)
	a := n.lease(10*time.Second, "a")
	if _, err := n.acquire(a, "x", false); err != nil {
		t.Fatal(err)
	}
	// 6s pass and are logged as ticks, then the node restarts.
	for i := 0; i < 60; i++ {
		n.clock.Advance(100 * time.Millisecond)
		want := time.Duration(i+1) * 100 * time.Millisecond
		eventually(t, "tick logged", func() bool { return n.logical() >= want })
	}
	n.restart()
	left := n.getLock("x").TtlLeft.AsDuration()
	// 10s − 6s logged + at most the takeover slack (4 ticks); never less than promised.
	if left < 4*time.Second || left > 4*time.Second+4*DefaultConfig().TickInterval {
		t.Fatalf("ttl left after restart %v, want 4s…4.4s", left)
	}
}

func (n *testNode) logical() time.Duration {
	var d time.Duration
	n.srv.node.View(func(s *fsmState) { d = s.Clock() })
	return d
}

type fsmState = fsm.State

func TestForceRelease(t *testing.T) {
	n := startNode(t, nil)
	a, b := n.lease(time.Hour, "stuck-job"), n.lease(time.Hour, "next")
	if _, err := n.acquire(a, "x", false); err != nil {
		t.Fatal(err)
	}
	if _, err := n.acquire(a, "y", false); err != nil {
		t.Fatal(err)
	}
	got := make(chan *api.AcquireResponse, 1)
	go func() { r, _ := n.acquire(b, "x", true); got <- r }()
	eventually(t, "queued", func() bool { return n.getLock("x").Waiters == 1 })
	req := &api.ForceReleaseRequest{RequestId: newReq(), Name: "x", Token: n.getLock("x").Token, Reason: "ops: job hung, ticket 42"}
	r, err := n.cli.ForceRelease(ctx(t), req)
	if err != nil || r.RevokedOwner != "stuck-job" || len(r.Released) != 1 || r.Released[0] != "x" {
		t.Fatalf("force-release: %v %v", r, err)
	}
	if g := <-got; g == nil || g.Token != 3 {
		t.Fatalf("waiter after force-release: %v", g)
	}
	// Only the named grant ended: the lease and its other lock live on.
	if y := n.getLock("y"); y.HolderOwner != "stuck-job" {
		t.Fatalf("force-release of x ended y too: %v", y)
	}
	// A retry (or a late duplicate) names the ended grant: the next holder keeps x.
	if _, err := n.cli.ForceRelease(ctx(t), req); code(err) != codes.FailedPrecondition {
		t.Fatalf("retried force-release: %v, want FAILED_PRECONDITION", err)
	}
	if x := n.getLock("x"); x.HolderOwner != "next" || x.Token != 3 {
		t.Fatalf("a retried force-release ended the next holder's grant: %v", x)
	}
	if _, err := n.cli.ForceRelease(ctx(t), &api.ForceReleaseRequest{RequestId: newReq(), Name: "free", Token: 1}); code(err) != codes.FailedPrecondition {
		t.Fatalf("force-release of a free lock: %v", err)
	}
	for _, bad := range []*api.ForceReleaseRequest{{RequestId: newReq(), Token: 3}, {RequestId: newReq(), Name: "x"}, {Name: "x", Token: 3}} {
		if _, err := n.cli.ForceRelease(ctx(t), bad); code(err) != codes.InvalidArgument {
			t.Fatalf("force-release %v: %v, want INVALID_ARGUMENT", bad, err)
		}
	}
}

func TestListLocksPages(t *testing.T) {
	n := startNode(t, nil)
	a := n.lease(time.Hour, "a")
	for i := 0; i < 5; i++ {
		if _, err := n.acquire(a, fmt.Sprintf("lock-%d", i), false); err != nil {
			t.Fatal(err)
		}
	}
	r, err := n.cli.ListLocks(ctx(t), &api.ListLocksRequest{Limit: 2})
	if err != nil || len(r.Locks) != 2 || !r.More || r.Locks[1].Name != "lock-1" {
		t.Fatalf("first page: %v %v", r, err)
	}
	r, err = n.cli.ListLocks(ctx(t), &api.ListLocksRequest{After: "lock-3", Limit: 2})
	if err != nil || len(r.Locks) != 1 || r.More || r.Locks[0].Name != "lock-4" {
		t.Fatalf("last page: %v %v", r, err)
	}
	if _, err := n.cli.ListLocks(ctx(t), &api.ListLocksRequest{Limit: 10001}); code(err) != codes.InvalidArgument {
		t.Fatalf("limit too high: %v", err)
	}
	if _, err := n.cli.ListLocks(ctx(t), &api.ListLocksRequest{After: "bad\x01"}); code(err) != codes.InvalidArgument {
		t.Fatalf("bad after: %v", err)
	}
}

// TestGetLockShowsQueue: GetLock lists the waiters in FIFO order (the order
// they queued, not their lease numbers), drops one that leaves, and shows
// how much of a lock-delay is left on the leader's clock.
func TestGetLockShowsQueue(t *testing.T) {
	n := startNode(t, nil)
	holder := n.lease(2*time.Second, "holder")                                           // lease #1
	b, c, d := n.lease(time.Hour, "b"), n.lease(time.Hour, "c"), n.lease(time.Hour, "d") // #2, #3, #4
	if _, err := n.cli.Acquire(ctx(t), &api.AcquireRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: holder, Name: "q",
		LockDelay: durationpb.New(3 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	getLock := func() *api.GetLockResponse {
		t.Helper()
		r, err := n.cli.GetLock(ctx(t), &api.GetLockRequest{Name: "q"})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	queue := func(r *api.GetLockResponse) (s string) {
		for _, w := range r.GetQueue() {
			s += fmt.Sprintf("#%d %s; ", w.GetLeaseNumber(), w.GetOwner())
		}
		return s
	}
	if r := getLock(); len(r.GetQueue()) != 0 || r.GetLock().GetDelayLeft() != nil {
		t.Fatalf("held, nobody waiting: queue %q, delay_left %v", queue(r), r.GetLock().GetDelayLeft())
	}
	granted := make(chan string, 3)
	bCtx, cancelB := context.WithCancel(ctx(t))
	defer cancelB()
	for i, w := range []struct {
		who   string
		ctx   context.Context
		lease []byte
	}{{"c", ctx(t), c}, {"b", bCtx, b}, {"d", ctx(t), d}} {
		go func() {
			_, err := n.cli.Acquire(w.ctx, &api.AcquireRequest{RequestId: newReq(), Seq: nextSeq(), Ack: 1, LeaseSecret: w.lease, Name: "q", Wait: true,
				LockDelay: durationpb.New(0)})
			if err == nil {
				granted <- w.who
			}
		}()
		eventually(t, w.who+" queued", func() bool { return len(getLock().GetQueue()) == i+1 })
	}
	if r := getLock(); queue(r) != "#3 c; #2 b; #4 d; " || r.GetLock().GetWaiters() != 3 {
		t.Fatalf("queue %q (waiters %d), want c, b, d in the order they queued", queue(r), r.GetLock().GetWaiters())
	}
	cancelB() // b gives up: it leaves the queue
	eventually(t, "b gone", func() bool { return queue(getLock()) == "#3 c; #4 d; " })

	n.clock.Advance(2100 * time.Millisecond) // the holder expires: a lock-delay of 3s begins
	eventually(t, "expiry", func() bool { return getLock().GetLock().GetDelayed() })
	if r := getLock(); r.GetLock().GetDelayLeft().AsDuration() != 3*time.Second || queue(r) != "#3 c; #4 d; " {
		t.Fatalf("delay_left %v, queue %q; want 3s (the clock has not moved since), c, d", r.GetLock().GetDelayLeft().AsDuration(), queue(r))
	}
	n.clock.Advance(time.Second)
	if left := getLock().GetLock().GetDelayLeft().AsDuration(); left != 2*time.Second {
		t.Fatalf("delay_left %v one second on, want 2s", left)
	}
	n.clock.Advance(2 * time.Second)
	if who := <-granted; who != "c" {
		t.Fatalf("granted to %s, want c", who)
	}
	if r := getLock(); queue(r) != "#4 d; " || r.GetLock().GetHolderLeaseNumber() != 3 || r.GetLock().GetDelayLeft() != nil {
		t.Fatalf("after the grant: queue %q, holder #%d, delay_left %v; want d alone, #3, unset", queue(r), r.GetLock().GetHolderLeaseNumber(), r.GetLock().GetDelayLeft())
	}
	list, err := n.cli.ListLocks(ctx(t), &api.ListLocksRequest{})
	if err != nil || len(list.GetLocks()) != 1 || list.GetLocks()[0].GetWaiters() != 1 {
		t.Fatalf("list: %v %v", list, err)
	}
	if _, err := n.cli.Revoke(ctx(t), &api.RevokeRequest{RequestId: newReq(), LeaseSecret: d}); err != nil { // ends d's wait
		t.Fatal(err)
	}
}

// TestHeldFor: a lock's held_for grows with the log's clock from its grant,
// a restarted member (which replays the log) still knows it, and a lock
// whose holder expired has none.
func TestHeldFor(t *testing.T) {
	n := startNode(t, nil)
	a := n.lease(10*time.Second, "a")
	if _, err := n.acquire(a, "x", false); err != nil {
		t.Fatal(err)
	}
	start := n.logical()
	for i := 1; i <= 15; i++ {
		n.clock.Advance(100 * time.Millisecond)
		eventually(t, "tick logged", func() bool { return n.logical() >= start+time.Duration(i)*100*time.Millisecond })
	}
	if got, want := n.getLock("x").GetHeldFor().AsDuration(), n.logical()-start; got != want {
		t.Fatalf("held_for %v, want %v (the log clock since the grant)", got, want)
	}
	if g := n.getLock("x").GetGrants(); len(g) != 1 || g[0].GetHeldFor().AsDuration() != n.logical()-start {
		t.Fatalf("grants %v: want one with held_for %v", g, n.logical()-start)
	}
	n.restart()
	if got := n.getLock("x").GetHeldFor().AsDuration(); got < 1500*time.Millisecond {
		t.Fatalf("held_for after a restart %v, want at least 1.5s", got)
	}
	n.clock.Advance(11 * time.Second) // the lease expires
	eventually(t, "expiry", func() bool {
		n.clock.Advance(100 * time.Millisecond)
		return n.getLock("x").GetHolderLeaseNumber() == 0
	})
	if l := n.getLock("x"); l.GetHeldFor() != nil {
		t.Fatalf("held_for %v once the holder expired, want unset", l.GetHeldFor().AsDuration())
	}
}

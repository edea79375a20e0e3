package client_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/clock/clocktest"
	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/server"
)

func TestMain(m *testing.M) {
	if os.Getenv("FENCE_CLIENT_HELPER") != "" {
		os.Exit(holderProcess())
	}
	os.Exit(m.Run())
}

// testServer is a real single-node server in a temp dir on loopback.
type testServer struct {
	t    testing.TB
	cfg  server.Config
	srv  *server.Server
	addr string
}

func startServer(t testing.TB) *testServer {
	t.Helper()
	cfg := locktest.Config(t.TempDir())
	cfg.MinTTL, cfg.TickInterval, cfg.DefaultLockDelay = 200*time.Millisecond, 20*time.Millisecond, 0
	ts := &testServer{t: t, cfg: cfg}
	ts.start()
	// Pin the port the first start picked, so a restart comes back at the same address.
	ts.cfg.GRPCAddr, ts.addr = ts.srv.GRPCAddr(), ts.srv.GRPCAddr()
	t.Cleanup(ts.stop)
	return ts
}

func (ts *testServer) start() {
	ts.t.Helper()
	srv, err := locktest.Run(ts.cfg)
	if err != nil {
		ts.t.Fatal(err)
	}
	ts.srv = srv
}

func (ts *testServer) stop() {
	if ts.srv != nil {
		ts.srv.Close()
		ts.srv = nil
	}
}

func dial(t testing.TB, addr string, opts ...client.Option) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, []string{addr}, append([]client.Option{client.WithInsecure()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestLockTryLockRelease(t *testing.T) {
	ts := startServer(t)
	a := dial(t, ts.addr, client.WithOwner("alice"))
	b := dial(t, ts.addr, client.WithOwner("bob"))

	la, err := a.Lock(ctxT(t, 5*time.Second), "jobs/nightly")
	if err != nil {
		t.Fatal(err)
	}
	if la.Token() == 0 || la.Name() != "jobs/nightly" || la.Err() != nil {
		t.Fatalf("lease: token %d name %q err %v", la.Token(), la.Name(), la.Err())
	}
	_, err = b.TryLock(ctxT(t, 5*time.Second), "jobs/nightly")
	var locked *client.LockedError
	if !errors.Is(err, client.ErrLocked) || !errors.As(err, &locked) || locked.HolderOwner != "alice" || locked.Token != la.Token() {
		t.Fatalf("TryLock on a held lock: %v", err)
	}
	if err := la.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-la.Done():
	default:
		t.Fatal("Done not closed after Release")
	}
	if !errors.Is(la.Err(), client.ErrReleased) {
		t.Fatalf("Err after release: %v", la.Err())
	}
	lb, err := b.TryLock(ctxT(t, 5*time.Second), "jobs/nightly")
	if err != nil || lb.Token() <= la.Token() {
		t.Fatalf("TryLock after release: %v, token %d after %d", err, lb.Token(), la.Token())
	}
}

func TestLockWaitsInOrderAndSameClientTakesTurns(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr)
	first, err := c.Lock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	// A second goroutine of the same client waits locally instead of sharing.
	got := make(chan *client.Lease)
	go func() {
		l, err := c.Lock(ctxT(t, 10*time.Second), "x")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case l := <-got:
		t.Fatalf("second Lock of the same client shared the lock: token %d", l.Token())
	case <-time.After(100 * time.Millisecond):
	}
	if err := first.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if second := <-got; second == nil || second.Token() <= first.Token() {
		t.Fatalf("second grant: %v", second)
	}
}

// waitFor waits until cond holds: for goroutines of the client to act on a
// fake-clock step (no time bound; the test's own deadline catches a hang).
func waitFor(cond func() bool) {
	for !cond() {
		time.Sleep(time.Millisecond)
	}
}

// TestRenewalKeepsLeasePastTTL: on the fake clock, each TTL/3 step sends a
// renewal; the deadline moves to the time it was sent + TTL − margin, and
// the lease outlives two TTLs.
func TestRenewalKeepsLeasePastTTL(t *testing.T) {
	ts := startServer(t)
	clk := clocktest.New()
	c := dial(t, ts.addr, client.WithClock(clk), client.WithTTL(3*time.Second))
	l, err := c.Lock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	first := l.Deadline()
	for i := 0; i < 6; i++ { // 6 × TTL/3: only renewals can keep it
		before := l.Deadline()
		clk.Advance(time.Second)
		waitFor(func() bool { return l.Deadline().After(before) })
	}
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost while renewing: %v", err)
	}
	if moved := l.Deadline().Sub(first); moved != 6*time.Second {
		t.Fatalf("deadline moved %v over six renewals one second apart, want 6s", moved)
	}
}

// TestLostContactEndsLeaseAtDeadline: the server goes away; the failing
// renewal puts the lease in jeopardy, and at the deadline (fake clock) it
// ends with ErrLostContact — not before.
func TestLostContactEndsLeaseAtDeadline(t *testing.T) {
	ts := startServer(t)
	clk := clocktest.New()
	c := dial(t, ts.addr, client.WithClock(clk), client.WithTTL(3*time.Second))
	l, err := c.Lock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	if left := l.Deadline().Sub(clk.Now()); left != 2700*time.Millisecond {
		t.Fatalf("deadline %v ahead, want 2.7s (TTL − TTL/10)", left)
	}
	ts.stop()
	clk.Advance(time.Second) // the renewal is due, and fails
	waitFor(func() bool { return l.Jeopardy() != nil })
	clk.Advance(1699 * time.Millisecond)
	if err := l.Err(); err != nil {
		t.Fatalf("ended 1ms before its deadline: %v", err)
	}
	clk.Advance(time.Millisecond)
	if err := l.Err(); !errors.Is(err, client.ErrExpired) || !errors.Is(err, client.ErrLostContact) {
		t.Fatalf("Err at the deadline: %v", err)
	}
	<-l.Done()
	<-l.Context().Done()
}

// TestDroppedReplyYieldsOneGrant drops the reply of the first Acquire after
// the server granted it; the client's retry with the same request id must
// get that grant back, not a second one.
func TestDroppedReplyYieldsOneGrant(t *testing.T) {
	ts := startServer(t)
	var (
		mu      sync.Mutex
		dropped *api.AcquireResponse
	)
	drop := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		mu.Lock()
		defer mu.Unlock()
		if method == api.FenceService_Acquire_FullMethodName && err == nil && dropped == nil {
			dropped = reply.(*api.AcquireResponse)
			return status.Error(codes.Unavailable, "injected: reply lost")
		}
		return err
	}
	c := dial(t, ts.addr, client.WithDialOptions(grpc.WithUnaryInterceptor(drop), client.UnaryOnly()))
	l, err := c.Lock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	if dropped == nil || l.Token() != dropped.Token {
		t.Fatalf("got token %d; the dropped reply had %v", l.Token(), dropped)
	}
	// Exactly one grant happened: the next token is the dropped one + 1.
	other := dial(t, ts.addr)
	l2, err := other.TryLock(ctxT(t, 5*time.Second), "y")
	if err != nil || l2.Token() != l.Token()+1 {
		t.Fatalf("next grant token %d, want %d (err %v)", l2.Token(), l.Token()+1, err)
	}
}

// TestWaitingLockSurvivesServerRestart: the server is stopped and restarted
// from its data dir while a Lock waits; the client reconnects and is granted,
// with a larger token, once the holder releases.
func TestWaitingLockSurvivesServerRestart(t *testing.T) {
	ts := startServer(t)
	holder := dial(t, ts.addr, client.WithTTL(10*time.Second))
	waiter := dial(t, ts.addr, client.WithTTL(10*time.Second))
	held, err := holder.Lock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *client.Lease, 1)
	go func() {
		l, err := waiter.Lock(ctxT(t, 30*time.Second), "x")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	time.Sleep(100 * time.Millisecond) // let it queue (the test holds either way)
	ts.stop()
	ts.start()
	if err := held.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatalf("release after restart: %v", err)
	}
	l := <-got
	if l == nil || l.Token() <= held.Token() {
		t.Fatalf("waiter after restart: %v", l)
	}
}

func TestDoStopsOnStaleAndReleases(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr)
	calls := 0
	err := c.Do(ctxT(t, 5*time.Second), "x", func(ctx context.Context, token uint64) error {
		calls++
		return &fencing.StaleError{Resource: "totals/77", Offered: token, Highest: token + 1}
	})
	if !errors.Is(err, fencing.ErrStale) || calls != 1 {
		t.Fatalf("Do: %v after %d calls", err, calls)
	}
	if _, err := dial(t, ts.addr).TryLock(ctxT(t, 5*time.Second), "x"); err != nil {
		t.Fatalf("lock not released after Do: %v", err)
	}
}

// TestDoReleasesWhenFnPanics: a panic in fn, recovered further up (as
// net/http does for a handler), must not leave the lease held and kept
// alive for the life of the process: Do releases it and panics on.
func TestDoReleasesWhenFnPanics(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr)
	var got any
	func() {
		defer func() { got = recover() }()
		c.Do(ctxT(t, 5*time.Second), "x", func(context.Context, uint64) error { panic("boom") })
	}()
	if got != "boom" {
		t.Errorf("recovered %v, want Do to panic on with fn's value %q", got, "boom")
	}
	if _, err := dial(t, ts.addr).TryLock(ctxT(t, 5*time.Second), "x"); err != nil {
		t.Fatalf("lock not released after fn panicked: %v", err)
	}
}

// TestDoContextEndsWithLease: the server goes away mid-work and the lease's
// deadline passes (on the fake clock); fn's context ends, its cause and Do's
// error say the lease expired.
func TestDoContextEndsWithLease(t *testing.T) {
	ts := startServer(t)
	clk := clocktest.New()
	c := dial(t, ts.addr, client.WithClock(clk), client.WithTTL(10*time.Second))
	var cause error
	err := c.Do(ctxT(t, 10*time.Second), "x", func(ctx context.Context, token uint64) error {
		ts.stop()
		clk.Advance(10 * time.Second) // past the deadline (TTL − margin)
		<-ctx.Done()
		cause = context.Cause(ctx)
		return ctx.Err()
	})
	if !errors.Is(err, client.ErrExpired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Do: %v; want it to wrap ErrExpired (and fn's context.Canceled)", err)
	}
	if !errors.Is(cause, client.ErrExpired) {
		t.Fatalf("context.Cause in fn: %v, want ErrExpired", cause)
	}
}

// holderProcess runs in a child process: it takes a lock and reports, on
// stdout, its token and then how the lease ended.
func holderProcess() int {
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{os.Getenv("FENCE_ADDR")}, client.WithInsecure(), client.WithTTL(500*time.Millisecond), client.WithLockDelay(0))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	l, err := c.Lock(ctx, "paused")
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("token", l.Token())
	<-l.Done() // SIGSTOP lands while we wait here
	fmt.Printf("lost expired=%v err=%v\n", errors.Is(l.Err(), client.ErrExpired), l.Err())
	return 0
}

// TestPausedHolderLearnsOfExpiry SIGSTOPs a real holder process past its TTL.
// Meanwhile another client gets the lock with a larger token; after SIGCONT
// the holder's Done is closed and Err says expired.
func TestPausedHolderLearnsOfExpiry(t *testing.T) {
	ts := startServer(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FENCE_CLIENT_HELPER=1", "FENCE_ADDR="+ts.addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { syscall.Kill(cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() }()
	lines := bufio.NewScanner(out)
	var token uint64
	if !lines.Scan() {
		t.Fatal("holder printed nothing")
	}
	if _, err := fmt.Sscanf(lines.Text(), "token %d", &token); err != nil {
		t.Fatalf("holder: %s", lines.Text())
	}
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	next, err := dial(t, ts.addr).Lock(ctxT(t, 10*time.Second), "paused")
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= token {
		t.Fatalf("new holder token %d, paused holder had %d", next.Token(), token)
	}
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if !lines.Scan() {
		t.Fatal("holder said nothing after SIGCONT")
	}
	if got := lines.Text(); !strings.HasPrefix(got, "lost expired=true") {
		t.Fatalf("paused holder: %s", got)
	}
}

func TestFencedPutGet(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr)
	a, err := c.Lock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	a.Release(ctxT(t, 5*time.Second))
	b, err := c.Lock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctxT(t, 5*time.Second), "totals/77", []byte("B"), b.Token()); err != nil {
		t.Fatal(err)
	}
	err = c.Put(ctxT(t, 5*time.Second), "totals/77", []byte("A"), a.Token())
	var se *fencing.StaleError
	if !errors.As(err, &se) || se.Offered != a.Token() || se.Highest != b.Token() {
		t.Fatalf("stale put: %v", err)
	}
	v, tok, err := c.Get(ctxT(t, 5*time.Second), "totals/77")
	if err != nil || string(v) != "B" || tok != b.Token() {
		t.Fatalf("get: %q %d %v", v, tok, err)
	}
}

func TestListReadsEveryPage(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr, client.WithTTL(time.Minute))
	const n = 1203 // more than one server page (1000)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := c.TryLock(ctxT(t, 10*time.Second), fmt.Sprintf("l/%04d", i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	list, err := c.List(ctxT(t, 10*time.Second))
	if err != nil || len(list) != n || list[0].Name != "l/0000" || list[n-1].Name != fmt.Sprintf("l/%04d", n-1) {
		t.Fatalf("listed %d locks (err %v)", len(list), err)
	}
}

// TestWaitingLeaseInQueue: WithWaiting reports the lease that waits, before
// it waits; Status lists the queue in FIFO order under those numbers, and
// the grants go to those very leases. TryLock reports nothing.
func TestWaitingLeaseInQueue(t *testing.T) {
	ts := startServer(t)
	holder, err := dial(t, ts.addr, client.WithOwner("first")).Lock(ctxT(t, 5*time.Second), "x")
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan uint64, 2)
	report := client.WithWaiting(func(n uint64) { waiting <- n })
	second := make(chan *client.Lease, 1)
	go func() {
		l, err := dial(t, ts.addr, client.WithOwner("second")).Lock(ctxT(t, 10*time.Second), "x", report)
		if err != nil {
			t.Error(err)
		}
		second <- l
	}()
	n2 := <-waiting
	c := dial(t, ts.addr)
	status := func() client.LockInfo {
		info, err := c.Status(ctxT(t, 5*time.Second), "x")
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	waitFor(func() bool { return status().Waiters == 1 })
	third := make(chan *client.Detached, 1)
	go func() {
		d, err := dial(t, ts.addr, client.WithOwner("third")).LockDetached(ctxT(t, 10*time.Second), "x", time.Minute, true, report)
		if err != nil {
			t.Error(err)
		}
		third <- d
	}()
	n3 := <-waiting
	waitFor(func() bool { return status().Waiters == 2 })
	if q := status().Queue; fmt.Sprint(q) != fmt.Sprintf("[{%d second false} {%d third false}]", n2, n3) {
		t.Fatalf("queue %v, want second (#%d) then third (#%d)", q, n2, n3)
	}
	tried := false
	if _, err := dial(t, ts.addr).TryLock(ctxT(t, 5*time.Second), "x", client.WithWaiting(func(uint64) { tried = true })); !errors.Is(err, client.ErrLocked) || tried {
		t.Fatalf("TryLock: %v, reported waiting %v", err, tried)
	}
	if list, err := c.List(ctxT(t, 5*time.Second)); err != nil || len(list) != 1 || list[0].Waiters != 2 || list[0].Queue != nil {
		t.Fatalf("List: %+v %v; want 2 waiters and no queue", list, err)
	}
	if err := holder.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	l2 := <-second
	if l2.LeaseNumber() != n2 {
		t.Fatalf("granted to lease #%d, want #%d", l2.LeaseNumber(), n2)
	}
	if q := status().Queue; fmt.Sprint(q) != fmt.Sprintf("[{%d third false}]", n3) {
		t.Fatalf("queue after the first hand-off %v, want third alone", q)
	}
	if err := l2.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if d := <-third; d.LeaseNumber != n3 {
		t.Fatalf("detached grant to lease #%d, want #%d", d.LeaseNumber, n3)
	}
	if len(waiting) != 0 {
		t.Fatalf("WithWaiting called again: #%d", <-waiting)
	}
}

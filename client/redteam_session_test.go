package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/clock/clocktest"
	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/relay"
)

// TestSessionCloseEndsWaitingLock: Close while a Lock waits on the
// session's stream ends that Lock (the client is closed; its wait is not
// retried until its context ends) and leaves no goroutine behind, with
// the Session and unary paths alike.
func TestSessionCloseEndsWaitingLock(t *testing.T) {
	ts := startServer(t)
	holder := dial(t, ts.addr)
	l, err := holder.Lock(ctxT(t, 5*time.Second), "busy")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctxT(t, 5*time.Second))
	for name, opts := range map[string][]client.Option{"session": nil, "unary": {client.WithDialOptions(client.UnaryOnly())}} {
		ignore := goleak.IgnoreCurrent()
		c := dial(t, ts.addr, opts...)
		if _, err := c.Lock(ctxT(t, 5*time.Second), "mine"); err != nil { // the session exists
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background()) // no deadline: only Close can end the wait
		done := make(chan error, 1)
		go func() { _, err := c.Lock(ctx, "busy"); done <- err }()
		waitFor(func() bool {
			st, err := holder.Status(ctxT(t, 5*time.Second), "busy")
			return err == nil && len(st.Queue) == 1
		})
		c.Close()
		var werr error
		select {
		case werr = <-done:
		case <-time.After(10 * time.Second): // a hang guard, not a bound under test
			cancel()
			werr = <-done
			t.Errorf("%s: Lock still waits 10s after Close (ended by its context: %v)", name, werr)
		}
		cancel()
		if werr == nil || !errors.Is(werr, client.ErrClosed) {
			t.Errorf("%s: Lock after Close: %v, want ErrClosed", name, werr)
		}
		goleak.VerifyNone(t, ignore)
	}
}

// failOnce fails the first unary call of method with UNAVAILABLE, as a
// member that cannot serve it for a moment.
func failOnce(method string, armed *atomic.Bool) grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if m == method && armed.CompareAndSwap(true, false) {
			return status.Error(codes.Unavailable, "injected: a member that cannot serve for a moment")
		}
		return invoker(ctx, m, req, reply, cc, opts...)
	})
}

// TestSessionMemberSwitchKeepsQueuePlace: when the client moves on to
// another member (an UNAVAILABLE answer on any call), its session's next
// call opens a stream there; an Acquire already waiting on the first
// member's stream keeps waiting there, as a waiting unary Acquire does,
// instead of being withdrawn and queued again behind later waiters.
func TestSessionMemberSwitchKeepsQueuePlace(t *testing.T) {
	ts := startServer(t)
	r, err := relay.New([]string{ts.addr}, insecure.NewCredentials(), insecure.NewCredentials(), relay.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	holder := dial(t, ts.addr)
	l, err := holder.Lock(ctxT(t, 5*time.Second), "q")
	if err != nil {
		t.Fatal(err)
	}
	var armed atomic.Bool
	// Two members: the server, and the same server through the relay.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := client.Dial(ctx, []string{ts.addr, r.Addrs()[0]}, client.WithInsecure(), client.WithOwner("first"),
		client.WithDialOptions(failOnce(api.FenceService_GetLock_FullMethodName, &armed)))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	x := dial(t, ts.addr, client.WithOwner("second"))
	if _, err := w.Lock(ctxT(t, 5*time.Second), "mine"); err != nil { // the session, and its stream to the first member
		t.Fatal(err)
	}
	queue := func(n int) []string {
		var owners []string
		waitFor(func() bool {
			st, err := holder.Status(ctxT(t, 5*time.Second), "q")
			owners = owners[:0]
			for _, q := range st.Queue {
				owners = append(owners, q.Owner)
			}
			return err == nil && len(owners) == n
		})
		return owners
	}
	got := make(chan string, 2)
	go func() {
		if _, err := w.Lock(ctxT(t, 10*time.Second), "q"); err == nil {
			got <- "first"
		}
	}()
	queue(1)
	go func() {
		if _, err := x.Lock(ctxT(t, 10*time.Second), "q"); err == nil {
			got <- "second"
		}
	}()
	queue(2)
	armed.Store(true)
	if _, err := w.Status(ctxT(t, 5*time.Second), "q"); err != nil { // UNAVAILABLE once: w moves on to the relay
		t.Fatal(err)
	}
	if _, err := w.Lock(ctxT(t, 5*time.Second), "other"); err != nil { // the session's next call: a stream to the relay
		t.Fatal(err)
	}
	if owners := queue(2); owners[0] != "first" {
		t.Fatalf("queue %v after the client moved on: the first waiter lost its place", owners)
	}
	if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if who := <-got; who != "first" {
		t.Fatalf("%s was granted first", who)
	}
}

// TestSessionStreamResetsUnderConcurrentCalls: callers of one session
// lock, relock and release three names at once while the client's Session
// stream breaks at every 7th answer it reads (the answer is lost). Every
// call still succeeds (its retry on a new stream returns the first
// outcome), no grant is made twice (tokens are unique), the session is not
// given up, and nothing is left held or queued.
func TestSessionStreamResetsUnderConcurrentCalls(t *testing.T) {
	ts := startServer(t)
	var answers atomic.Int32
	breaks := onSessionRecv(func(m *api.SessionResponse, err error) error {
		if err == nil && answers.Add(1)%7 == 0 {
			return status.Error(codes.Unavailable, "injected: the stream broke before the answer arrived")
		}
		return err
	})
	c := dial(t, ts.addr, client.WithDialOptions(breaks))
	const callers, rounds = 6, 15
	var (
		mu     sync.Mutex
		tokens = map[uint64]string{}
		lease  uint64 // guarded by mu; the session's
		wg     sync.WaitGroup
	)
	record := func(l *client.Lease) {
		mu.Lock()
		defer mu.Unlock()
		if prev, dup := tokens[l.Token()]; dup {
			t.Errorf("token %d granted twice: %s and %s", l.Token(), prev, l.Name())
		}
		tokens[l.Token()] = l.Name()
		if lease == 0 {
			lease = l.LeaseNumber()
		} else if l.LeaseNumber() != lease {
			t.Errorf("a grant of lease #%d after lease #%d: the session was given up", l.LeaseNumber(), lease)
		}
	}
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				name := fmt.Sprintf("reset/%d", (i+r)%3)
				l, err := c.Lock(ctxT(t, 10*time.Second), name)
				if err != nil {
					t.Errorf("caller %d round %d: lock: %v", i, r, err)
					return
				}
				record(l)
				if r%2 == 0 {
					if l, err = l.Relock(ctxT(t, 10*time.Second)); err != nil {
						t.Errorf("caller %d round %d: relock: %v", i, r, err)
						return
					}
					record(l)
				}
				if err := l.Release(ctxT(t, 10*time.Second)); err != nil {
					t.Errorf("caller %d round %d: release: %v", i, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if answers.Load() < 7 {
		t.Fatalf("%d answers on Session streams: no stream broke", answers.Load())
	}
	for k := range 3 {
		st, err := c.Status(ctxT(t, 5*time.Second), fmt.Sprintf("reset/%d", k))
		if err != nil || st.Held() || len(st.Queue) != 0 {
			t.Errorf("reset/%d afterwards: %+v %v, want free", k, st, err)
		}
	}
	l, err := c.Lock(ctxT(t, 5*time.Second), "after")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d grants, %d answers read", len(tokens), answers.Load())
}

// olderAt makes the Session streams to the members whose address old
// reports fail UNIMPLEMENTED, as an older fence answers.
func olderAt(old func(target string) bool) grpc.DialOption {
	return grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if method == api.FenceService_Session_FullMethodName && old(cc.Target()) {
			return nil, status.Error(codes.Unimplemented, "injected: an older server")
		}
		return streamer(ctx, desc, cc, method, opts...)
	})
}

// TestSessionFallbackIsPerMemberAndRetried: in a cluster with one older
// member, the client uses unary calls with that member only; the other
// members still get the Session stream. And a member that answered
// UNIMPLEMENTED is asked again after a minute: once upgraded, it gets the
// stream.
func TestSessionFallbackIsPerMemberAndRetried(t *testing.T) {
	ts := startServer(t)
	r, err := relay.New([]string{ts.addr}, insecure.NewCredentials(), insecure.NewCredentials(), relay.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var (
		armed, upgraded atomic.Bool
		unary           atomic.Int32
	)
	clk := clocktest.New()
	old := func(target string) bool { return strings.HasSuffix(target, r.Addrs()[0]) && !upgraded.Load() }
	// Two members: the relay to the server (older, until upgraded) first, and the server.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, []string{r.Addrs()[0], ts.addr}, client.WithInsecure(), client.WithClock(clk), client.WithTTL(time.Hour),
		client.WithDialOptions(olderAt(old), failOnce(api.FenceService_GetLock_FullMethodName, &armed),
			countUnary(api.FenceService_Acquire_FullMethodName, &unary)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lock := func(name string) {
		t.Helper()
		if _, err := c.Lock(ctxT(t, 5*time.Second), name); err != nil {
			t.Fatal(err)
		}
	}
	lock("at-old") // unary, with the older member
	if n := unary.Load(); n != 1 {
		t.Fatalf("%d unary Acquires with the older member, want 1", n)
	}
	armed.Store(true)
	if _, err := c.Status(ctxT(t, 5*time.Second), "at-old"); err != nil { // UNAVAILABLE once: on to the newer member
		t.Fatal(err)
	}
	lock("at-new")
	if n := unary.Load(); n != 1 {
		t.Fatalf("%d unary Acquires: the newer member got a unary Acquire, want its Session stream", n)
	}
	armed.Store(true)
	if _, err := c.Status(ctxT(t, 5*time.Second), "at-old"); err != nil { // back to the first member
		t.Fatal(err)
	}
	upgraded.Store(true)
	lock("upgraded-soon") // within the minute: still unary there
	if n := unary.Load(); n != 2 {
		t.Fatalf("%d unary Acquires, want 2", n)
	}
	clk.Advance(time.Minute)
	lock("upgraded")
	if n := unary.Load(); n != 2 {
		t.Fatalf("%d unary Acquires: the upgraded member got a unary Acquire a minute on, want its Session stream", n)
	}
}

// TestSessionOversizedNameHarmsNoOtherCall: a Lock whose name is far above
// the server's message limit fails on its own (ErrInvalid); it does not
// end the session's Session stream (the server ends a stream with an
// oversized message RESOURCE_EXHAUSTED), which would fail a Lock waiting
// on it as refused, though it may have been granted.
func TestSessionOversizedNameHarmsNoOtherCall(t *testing.T) {
	ts := startServer(t)
	holder, c := dial(t, ts.addr), dial(t, ts.addr)
	l, err := holder.Lock(ctxT(t, 5*time.Second), "q")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lock(ctxT(t, 5*time.Second), "mine"); err != nil { // the session
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		w, err := c.Lock(ctxT(t, 10*time.Second), "q")
		if err == nil {
			err = w.Release(ctxT(t, 5*time.Second))
		}
		done <- err
	}()
	waitFor(func() bool {
		st, err := holder.Status(ctxT(t, 5*time.Second), "q")
		return err == nil && len(st.Queue) == 1
	})
	_, err = c.TryLock(ctxT(t, 5*time.Second), strings.Repeat("n", 2<<20))
	if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if werr := <-done; werr != nil {
		t.Errorf("the Lock waiting beside it: %.200v", werr)
	}
	if !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("a lock with a 2 MiB name: %.200v, want ErrInvalid", err)
	}
}

// TestMaxNameLen: the client's copy of the server's name limit is the
// server's, and a name of that length is taken.
func TestMaxNameLen(t *testing.T) {
	if client.MaxNameLen != fsm.MaxNameLen {
		t.Fatalf("client.MaxNameLen %d, fsm.MaxNameLen %d", client.MaxNameLen, fsm.MaxNameLen)
	}
	ts := startServer(t)
	c := dial(t, ts.addr)
	l, err := c.TryLock(ctxT(t, 5*time.Second), strings.Repeat("n", client.MaxNameLen))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctxT(t, 5*time.Second), strings.Repeat("n", client.MaxNameLen+1)); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("a name one byte too long: %v, want ErrInvalid", err)
	}
}

// TestSessionStreamEndIsNoRefusal: the Session stream ends with a status
// that would refuse a call (RESOURCE_EXHAUSTED here: a message above a
// size limit, a proxy's limit) right after the server granted a Lock, in
// place of its answer. The end of a stream is not the call's refusal:
// its outcome is unknown, so the client settles it, and either returns
// the grant or gives it back; no grant is left that no caller holds.
func TestSessionStreamEndIsNoRefusal(t *testing.T) {
	ts := startServer(t)
	var once atomic.Bool
	endAfterGrant := onSessionRecv(func(m *api.SessionResponse, err error) error {
		if err == nil && m.GetAcquire() != nil && once.CompareAndSwap(false, true) {
			return status.Error(codes.ResourceExhausted, "injected: the stream ended after the grant, before its answer")
		}
		return err
	})
	c := dial(t, ts.addr, client.WithDialOptions(endAfterGrant))
	other := dial(t, ts.addr)
	l, err := c.Lock(ctxT(t, 5*time.Second), "x")
	if err == nil {
		if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("Lock: %v", err)
	if _, err := other.TryLock(ctxT(t, 5*time.Second), "x"); err != nil {
		t.Fatalf("another client's TryLock after it: %v: a grant nobody holds is left", err)
	}
}

// renewals counts the renewals a client reports, by outcome.
type renewals struct{ ok, failed atomic.Int32 }

func (r *renewals) RenewalSent(ok bool) {
	if ok {
		r.ok.Add(1)
	} else {
		r.failed.Add(1)
	}
}
func (*renewals) LeaseLost(error)                 {}
func (*renewals) AcquireWait(time.Duration, bool) {}

// TestSessionMemberSwitchRenewsWithoutFailure: after the session's calls
// moved on to another member (its old stream retired and closed), the
// next renewal goes on the session's current stream and succeeds: no
// renewal fails (no jeopardy) for a stream the client itself retired.
func TestSessionMemberSwitchRenewsWithoutFailure(t *testing.T) {
	ts := startServer(t)
	r, err := relay.New([]string{ts.addr}, insecure.NewCredentials(), insecure.NewCredentials(), relay.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var armed atomic.Bool
	var seen renewals
	clk := clocktest.New()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, []string{ts.addr, r.Addrs()[0]}, client.WithInsecure(), client.WithClock(clk), client.WithTTL(3*time.Second),
		client.WithObserver(&seen), client.WithDialOptions(failOnce(api.FenceService_GetLock_FullMethodName, &armed)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Lock(ctxT(t, 5*time.Second), "renewed")
	if err != nil {
		t.Fatal(err)
	}
	before := l.Deadline()
	clk.Advance(time.Second) // TTL/3: a renewal on the first member's stream
	waitFor(func() bool { return l.Deadline().After(before) })
	armed.Store(true)
	if _, err := c.Status(ctxT(t, 5*time.Second), "renewed"); err != nil { // UNAVAILABLE once: on to the relay
		t.Fatal(err)
	}
	other, err := c.Lock(ctxT(t, 5*time.Second), "other") // a stream to the relay; the first is retired and closes
	if err != nil {
		t.Fatal(err)
	}
	before = l.Deadline()
	clk.Advance(time.Second)
	waitFor(func() bool { return l.Deadline().After(before) || seen.failed.Load() > 0 })
	if n := seen.failed.Load(); n > 0 || l.Jeopardy() != nil {
		t.Fatalf("%d renewals failed after the client moved its calls (jeopardy: %v)", n, l.Jeopardy())
	}
	if err := other.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

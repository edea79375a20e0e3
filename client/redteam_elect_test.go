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

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"go.uber.org/goleak"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/locktest"
)

// Red-team tests of elections (client.Campaign and friends): each one
// reproduced a hole before its fix. The comments describe the hole as it was.

// lostPutReply lets the first Put of value through, runs between() while
// the caller still waits for its answer, and then reports the answer lost
// (Unavailable), so the client sends the same Put again.
func lostPutReply(value string, between func()) grpc.DialOption {
	var once sync.Once
	return grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if r, ok := req.(*api.PutRequest); ok && string(r.GetValue()) == value {
			first := false
			once.Do(func() { first = true })
			if first {
				if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
					return err
				}
				between()
				return status.Error(codes.Unavailable, "injected: the answer was lost")
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
}

// TestProclaimLandedThenDeposed: a Proclaim whose first attempt was written
// (a reader saw the value as the leader's) but whose answer was lost, and
// whose retry met a newer leader's write, was reported as a plain refusal
// (ErrDeposed, "changes nothing"): the election history then shows a value
// read as the leader's that no successful write explains. Its outcome is
// unknown: the error must match ErrIndeterminate (and ErrDeposed).
func TestProclaimLandedThenDeposed(t *testing.T) {
	ts := startServer(t)
	b := dial(t, ts.addr, client.WithOwner("bob"))
	ctx := ctxT(t, 20*time.Second)
	var seen client.Leader
	var seenErr error
	a := dial(t, ts.addr, client.WithOwner("alice"), client.WithDialOptions(lostPutReply("a2", func() {
		seen, seenErr = b.Leader(ctx, "svc")
		if _, _, err := b.ForceRelease(ctx, "svc", "test: depose alice"); err != nil {
			t.Error(err)
			return
		}
		if _, err := b.Campaign(ctx, "svc", "b"); err != nil {
			t.Error(err)
		}
	})))
	la, err := a.Campaign(ctx, "svc", "a1")
	if err != nil {
		t.Fatal(err)
	}
	err = la.Proclaim(ctx, "a2")
	if seenErr != nil || seen.Value != "a2" || seen.Token != la.Token() {
		t.Fatalf("between the write and its lost answer, Leader read %s, %v; want a2 with token %d", showLeader(seen), seenErr, la.Token())
	}
	if !errors.Is(err, client.ErrIndeterminate) || !errors.Is(err, client.ErrDeposed) {
		t.Fatalf("Proclaim that was written, then met a newer leader on its retry: %v; want ErrIndeterminate and ErrDeposed", err)
	}
}

// TestCampaignLandedThenDeposed: the same for a Campaign's own write: its
// value was written and read as the leader's, then its retry met a newer
// leader. Campaign's error said "could not write the value" without
// ErrIndeterminate, so a caller (the chaos workers) took it for "not
// elected" while a reader had seen it lead.
func TestCampaignLandedThenDeposed(t *testing.T) {
	ts := startServer(t)
	b := dial(t, ts.addr, client.WithOwner("bob"))
	ctx := ctxT(t, 20*time.Second)
	var seen client.Leader
	var seenErr error
	a := dial(t, ts.addr, client.WithOwner("alice"), client.WithDialOptions(lostPutReply("a1", func() {
		seen, seenErr = b.Leader(ctx, "svc")
		if _, _, err := b.ForceRelease(ctx, "svc", "test: depose alice"); err != nil {
			t.Error(err)
			return
		}
		if _, err := b.Campaign(ctx, "svc", "b"); err != nil {
			t.Error(err)
		}
	})))
	_, err := a.Campaign(ctx, "svc", "a1")
	if seenErr != nil || seen.Value != "a1" || seen.Token != 1 {
		t.Fatalf("between the write and its lost answer, Leader read %s, %v; want a1 with token 1", showLeader(seen), seenErr)
	}
	if !errors.Is(err, client.ErrIndeterminate) {
		t.Fatalf("Campaign whose value was written, then met a newer leader on its retry: %v; want ErrIndeterminate", err)
	}
}

// TestObserveLeavesNoGoroutine: an observer ended by Close, by its
// context, or by Client.Close leaves no goroutine behind (its watch
// included), and its Leaders channel closes.
func TestObserveLeavesNoGoroutine(t *testing.T) {
	ts := startServer(t)
	c, err := client.Dial(ctxT(t, 5*time.Second), []string{ts.addr}, client.WithInsecure(), client.WithOwner("alice"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Campaign(ctxT(t, 5*time.Second), "svc", "a"); err != nil {
		t.Fatal(err)
	}
	ignore := goleak.IgnoreCurrent()
	byClose, err := c.Observe(context.Background(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(context.Background())
	byCtx, err := c.Observe(cctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	byClient, err := c.Observe(context.Background(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []*client.Observation{byClose, byCtx, byClient} {
		if got := nextLeader(t, o); got != "svc=a t1 #1 alice" {
			t.Fatalf("observed %s", got)
		}
	}
	byClose.Close()
	cancel()
	c.Close()
	for i, o := range []*client.Observation{byClose, byCtx, byClient} {
		for range o.Leaders() {
		}
		if o.Err() == nil {
			t.Errorf("observer %d ended without an error", i)
		}
	}
	// An earlier test's abandoned session may still be revoked in the
	// background (c.abandon's go c.revoke, bounded by its own 5 s): not
	// this test's goroutine, and it ends by itself.
	goleak.VerifyNone(t, ignore, goleak.IgnoreAnyFunction("github.com/fencehq/fence/client.(*Client).revoke"))
}

// TestCampaignRefusesOversizeValueAtOnce: a value the server will never
// store (over 1 MiB) was found out only after the campaign had waited its
// turn in line (behind a leader that may lead for days) and won the lock —
// a grant, a token and a hand-off spent on a campaign that could never
// succeed. Bad input is refused at once and changes nothing.
func TestCampaignRefusesOversizeValueAtOnce(t *testing.T) {
	ts := startServer(t)
	a := dial(t, ts.addr, client.WithOwner("alice"))
	b := dial(t, ts.addr, client.WithOwner("bob"))
	ctx := ctxT(t, 20*time.Second)
	la, err := a.Campaign(ctx, "svc", "a")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := b.Campaign(ctx, "svc", string(make([]byte, 1<<20+1)))
		done <- err
	}()
	for {
		select {
		case err := <-done:
			if !errors.Is(err, client.ErrInvalid) {
				t.Fatalf("Campaign with a value of 1 MiB + 1: %v, want ErrInvalid", err)
			}
			if info, err := b.Status(ctx, "svc"); err != nil || info.Waiters != 0 || info.Token != 1 {
				t.Fatalf("after the refused campaign: %+v, %v; want alice's grant (token 1) and no waiter", info, err)
			}
			if err := la.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Campaign(ctx, "svc", string(make([]byte, 1<<20))); err != nil { // the limit itself is allowed
				t.Fatalf("Campaign with a value of exactly 1 MiB: %v", err)
			}
			return
		default:
		}
		if info, err := b.Status(ctx, "svc"); err != nil || info.Waiters != 0 {
			t.Fatalf("the campaign with a value that can never be written joined the line: %+v, %v", info, err)
		}
	}
}

// TestMaxValueLen: the client's copy of the server's value limit is the
// server's.
func TestMaxValueLen(t *testing.T) {
	if client.MaxValueLen != fsm.MaxValueLen {
		t.Fatalf("client's limit %d, the server's %d", client.MaxValueLen, fsm.MaxValueLen)
	}
}

// TestWatchOfLargeWritesInOneEntry: writes of 1 MiB values that the leader
// packs into one raft entry (it packs about 4 MiB) are one Watch message of
// over 4 MiB — above gRPC's default limit on what a client receives, so
// the watch (and every Observe of an election with large values) ended for
// good with "received message larger than max". The test writes rounds of
// 16 concurrent puts until one entry holds at least 4 of them.
func TestWatchOfLargeWritesInOneEntry(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr)
	ctx := ctxT(t, 60*time.Second)
	l, err := c.Lock(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for round := 0; round < 20; round++ {
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v := make([]byte, 1<<20)
				copy(v, fmt.Sprintf("round %d put %d", round, i))
				if err := c.Put(ctx, "svc", v, l.Token()); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		perIndex := map[uint64]int{}
		for n := 0; n < 16; {
			e, ok := <-w.Events()
			if !ok {
				t.Fatalf("round %d: the watch ended after %d writes: %v", round, n, w.Err())
			}
			if e.Type == client.Written {
				if len(e.Value) != 1<<20 {
					t.Fatalf("a written event with %d bytes, want 1 MiB", len(e.Value))
				}
				n++
				perIndex[e.Index]++
			}
		}
		for _, k := range perIndex {
			if k >= 4 {
				return // one message carried at least 4 MiB of values, and the watch lives
			}
		}
	}
	t.Fatal("no round packed 4 puts into one entry: the test did not exercise a message over 4 MiB")
}

// TestObserveAfterCompaction: an observer whose reader stalls while its
// leader proclaims far more values than the member keeps for watches
// falls behind the history (ErrCompacted); it reads the election again and
// goes on: it delivers values in the order they were proclaimed, none
// twice, and the next leader, elected after the reader returns.
func TestObserveAfterCompaction(t *testing.T) {
	cfg := locktest.Config(t.TempDir())
	cfg.MinTTL, cfg.TickInterval, cfg.DefaultLockDelay = 200*time.Millisecond, 20*time.Millisecond, 0
	cfg.WatchHistory = 8
	ts := &testServer{t: t, cfg: cfg}
	ts.start()
	ts.addr = ts.srv.GRPCAddr()
	t.Cleanup(ts.stop)
	c := dial(t, ts.addr, client.WithOwner("alice"))
	b := dial(t, ts.addr, client.WithOwner("bob"))
	ctx := ctxT(t, 60*time.Second)
	la, err := c.Campaign(ctx, "svc", "v0000")
	if err != nil {
		t.Fatal(err)
	}
	obs, err := c.Observe(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	// Nobody reads obs while 800 values of 64 KiB are proclaimed: its buffers
	// and the stream's window fill, and its member keeps only 8 events.
	pad := strings.Repeat(".", 64<<10)
	for i := 1; i <= 800; i++ {
		if err := la.Proclaim(ctx, fmt.Sprintf("v%04d%s", i, pad)); err != nil {
			t.Fatal(err)
		}
	}
	if err := la.Proclaim(ctx, "final"); err != nil {
		t.Fatal(err)
	}
	// Reading resumes: the observer catches up with "final" (it reads the
	// newest value at each event), then alice resigns and bob is elected:
	// his grant comes only through a watch past the compacted history.
	last := ""
	for {
		l, ok := <-obs.Leaders()
		if !ok {
			t.Fatalf("the observer ended after %.5s: %v", last, obs.Err())
		}
		switch {
		case l.Value == "b" && last == "final" && l.Token == 2:
			return
		case l.Token != la.Token() || l.Value == last || last == "final" ||
			len(last) == 5+len(pad) && len(l.Value) == 5+len(pad) && l.Value[:5] < last[:5]:
			t.Fatalf("observed %.5s (token %d) after %.5s: back, or twice", l.Value, l.Token, last)
		}
		last = l.Value
		if last == "final" {
			if err := la.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Campaign(ctx, "svc", "b"); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// compactedStream is a Watch stream that delivers its first message (the
// start mark) and then ends as a member ends a watch that fell out of its
// history.
type compactedStream struct {
	grpc.ClientStream
	n int
}

func (s *compactedStream) RecvMsg(m any) error {
	if s.n++; s.n > 1 {
		return status.Error(codes.FailedPrecondition, "injected: the watch fell out of the history")
	}
	return s.ClientStream.RecvMsg(m)
}

// TestObserveCompactedAgainOnRestart: an observer whose watch fell out of
// the history reads the lock (GetLock) and watches from the index after it;
// if the history moved past that index meanwhile — many events between the
// two calls, as under a burst of large writes that the 64 MiB bound
// compacts — the new watch is refused as compacted too. The observer ended
// there, for good, though reading the lock once more mends it. Here the
// first watch's stream is ended as compacted and the next Watch call is
// refused as compacted; the third is real.
func TestObserveCompactedAgainOnRestart(t *testing.T) {
	ts := startServer(t)
	var watches atomic.Int32
	inject := grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if method != api.FenceService_Watch_FullMethodName {
			return streamer(ctx, desc, cc, method, opts...)
		}
		switch watches.Add(1) {
		case 2:
			return nil, status.Error(codes.FailedPrecondition, "injected: the index is no longer kept")
		case 1:
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return &compactedStream{ClientStream: s}, nil
		}
		return streamer(ctx, desc, cc, method, opts...)
	})
	a := dial(t, ts.addr, client.WithOwner("alice"))
	o := dial(t, ts.addr, client.WithDialOptions(inject))
	ctx := ctxT(t, 20*time.Second)
	obs, err := o.Observe(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	if _, err := a.Campaign(ctx, "svc", "a"); err != nil {
		t.Fatal(err)
	}
	l, ok := <-obs.Leaders()
	if !ok {
		t.Fatalf("the observer ended (after %d watch calls): %v", watches.Load(), obs.Err())
	}
	if got := showLeader(l); got != "svc=a t1 #1 alice" {
		t.Fatalf("observed %s", got)
	}
}

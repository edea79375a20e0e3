package client_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/client"
)

// Red team 2 (selective acknowledgement).

// The server's memory counts an acknowledged span like an answer, and every
// answered call between two waiting Locks leaves a span. A session with 512
// Locks waiting (512 names, all held elsewhere) that makes one TryLock
// between each has half the limit in flight, and its memory is full: the
// Release of a lock it holds is refused RESOURCE_EXHAUSTED, and Release then
// abandons the whole session — every lock of it ends.
func TestRedteam2HalfTheLimitWaitingWedgesRelease(t *testing.T) {
	ts := startServer(t)
	other := dial(t, ts.addr, client.WithOwner("other"), client.WithTTL(time.Minute))
	const waits = 512
	for i := 0; i <= waits; i++ {
		name := "busy"
		if i < waits {
			name = fmt.Sprintf("h%d", i)
		}
		if _, err := other.TryLock(ctxT(t, 5*time.Second), name); err != nil {
			t.Fatal(err)
		}
	}
	c := dial(t, ts.addr, client.WithTTL(time.Minute))
	mine, err := c.TryLock(ctxT(t, 5*time.Second), "mine")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(ts.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw := api.NewFenceServiceClient(conn)
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < waits; i++ {
		name := fmt.Sprintf("h%d", i)
		go func() { _, _ = c.Lock(wctx, name) }()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) { // queued before the next call is numbered
			r, err := raw.GetLock(ctxT(t, 5*time.Second), &api.GetLockRequest{Name: name})
			if err == nil && r.GetLock().GetWaiters() == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Lock %q never queued", name)
			}
		}
		if _, err := c.TryLock(ctxT(t, 10*time.Second), "busy"); !errors.Is(err, client.ErrLocked) {
			t.Fatalf("TryLock %d while %d Locks wait: %v", i, i+1, err)
		}
	}
	if err := mine.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatalf("Release of a held lock, with %d Locks waiting in the session (%d calls in flight, the limit is 1024): %v", waits, waits+1, err)
	}
}

// Many goroutines Lock / TryLock / Release on one session through a network
// that loses replies (the client retries and settles) and delivers late
// duplicates of earlier requests (their ack and open as first sent). When
// every caller has released, the server must hold nothing for the session:
// a lock still held is a grant no caller knows of (a late duplicate that
// acted, or a settle that lost a grant); two local holders of one name at
// once is a double grant.
func TestRedteam2ConcurrentSessionWithDuplicatesLeavesNoGhost(t *testing.T) {
	ts := startServer(t)
	var (
		mu      sync.Mutex
		replays sync.WaitGroup
		rng     = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	)
	roll := func(n int) int { mu.Lock(); defer mu.Unlock(); return rng.IntN(n) }
	chaos := grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		m, ok := req.(proto.Message)
		numbered := ok && (strings.HasSuffix(method, "/Acquire") || strings.HasSuffix(method, "/Release"))
		if numbered && roll(4) == 0 { // a late duplicate of this very request
			dup, dupReply := proto.Clone(m), proto.Clone(reply.(proto.Message)) // before the real call fills reply
			replays.Add(1)
			go func() {
				defer replays.Done()
				time.Sleep(time.Duration(roll(80)) * time.Millisecond)
				rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				_ = invoker(rctx, method, dup, dupReply, cc, opts...)
			}()
		}
		err := invoker(ctx, method, req, reply, cc, opts...)
		if numbered && err == nil && roll(6) == 0 {
			return status.Error(codes.Unavailable, "injected: reply lost")
		}
		return err
	})
	c := dial(t, ts.addr, client.WithTTL(time.Minute), client.WithDialOptions(chaos))
	var (
		holders sync.Map // name → *atomic.Int32
		wg      sync.WaitGroup
		fails   atomic.Int32
	)
	names := []string{"n0", "n1", "n2", "n3"}
	for g := 0; g < 12; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 15; i++ {
				name := names[roll(len(names))]
				var l *client.Lease
				var err error
				if roll(2) == 0 {
					l, err = c.TryLock(ctxT(t, 5*time.Second), name)
				} else {
					l, err = c.Lock(ctxT(t, time.Duration(50+roll(300))*time.Millisecond), name)
				}
				if err != nil {
					continue
				}
				v, _ := holders.LoadOrStore(name, new(atomic.Int32))
				if n := v.(*atomic.Int32).Add(1); n > 1 {
					t.Errorf("two local holders of %q at once", name)
				}
				time.Sleep(time.Duration(roll(5)) * time.Millisecond)
				v.(*atomic.Int32).Add(-1)
				if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
					fails.Add(1)
					t.Logf("release %q: %v", name, err)
				}
			}
		}()
	}
	wg.Wait()
	replays.Wait()
	time.Sleep(200 * time.Millisecond)
	conn, err := grpc.NewClient(ts.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := api.NewFenceServiceClient(conn).ListLocks(ctxT(t, 5*time.Second), &api.ListLocksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range resp.GetLocks() {
		if k.GetHolderLeaseNumber() != 0 || k.GetWaiters() != 0 {
			t.Errorf("after every caller released: lock %q held by lease #%d (token %d), %d waiting — no caller holds or waits for it",
				k.GetName(), k.GetHolderLeaseNumber(), k.GetToken(), k.GetWaiters())
		}
	}
	t.Logf("%d releases failed", fails.Load())
}

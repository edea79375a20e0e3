package client_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
)

// TestSemaphoreInOneClient: eight callers of one Client share a semaphore
// of three permits: never more than three inside at once, each inside
// with a slot no other caller inside has, and all eight get in (callers
// of one Client holding permits at once each use a lease of their own).
func TestSemaphoreInOneClient(t *testing.T) {
	ts := startServer(t)
	c := dial(t, ts.addr)
	sem := c.Semaphore("pool", 3)
	var (
		mu     sync.Mutex
		inside = map[int]bool{}
		most   int
		ran    atomic.Int32
		wg     sync.WaitGroup
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := sem.Do(context.Background(), func(_ context.Context, _ uint64, slot int) error {
				mu.Lock()
				if inside[slot] || slot < 0 || slot > 2 {
					t.Errorf("slot %d taken twice or out of range", slot)
				}
				inside[slot] = true
				most = max(most, len(inside))
				mu.Unlock()
				for range 3 { // let the others try to get in
					c.Put(context.Background(), "pool/x", nil, 1)
				}
				mu.Lock()
				delete(inside, slot)
				mu.Unlock()
				ran.Add(1)
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if ran.Load() != 8 || most > 3 {
		t.Fatalf("%d callers ran, at most %d at once; want 8, at most 3", ran.Load(), most)
	}
}

// TestPermitsError: another count, a mutex of a semaphore and a reader of
// a semaphore fail with a *PermitsError naming both counts; a bad count is
// refused before any call.
func TestPermitsError(t *testing.T) {
	ts := startServer(t)
	a, b := dial(t, ts.addr), dial(t, ts.addr)
	ctx := context.Background()
	if _, err := a.Semaphore("pool", 2).Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		call  func() error
		asked int
	}{
		{"another count", func() error { _, err := b.Semaphore("pool", 3).TryAcquire(ctx); return err }, 3},
		{"a lock", func() error { _, err := b.TryLock(ctx, "pool"); return err }, 1},
		{"a reader", func() error { _, err := b.RWLock("pool").TryRLock(ctx); return err }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pe *client.PermitsError
			if err := tc.call(); !errors.Is(err, client.ErrPermits) || !errors.As(err, &pe) || pe.Permits != 2 || pe.Asked != tc.asked || pe.Name != "pool" {
				t.Fatalf("%v (%+v), want a PermitsError of 2, asked %d", err, pe, tc.asked)
			}
		})
	}
	for _, n := range []int{0, -1, 1<<16 + 1} {
		if _, err := b.Semaphore("other", n).TryAcquire(ctx); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("%d permits: %v, want ErrInvalid", n, err)
		}
	}
	// A semaphore of one permit is the lock of its name.
	l, err := b.Semaphore("one", 1).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.TryLock(ctx, "one"); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("Lock of a held semaphore of 1: %v, want ErrLocked", err)
	}
	l.Release(ctx)
}

// TestRWLockInOneClient: two readers of one Client hold at once; a writer
// of another waits for both and gets a larger token.
func TestRWLockInOneClient(t *testing.T) {
	ts := startServer(t)
	a, b := dial(t, ts.addr), dial(t, ts.addr)
	ctx := context.Background()
	r1, err := a.RWLock("rw").RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := a.RWLock("rw").TryRLock(ctx)
	if err != nil || !r2.Shared() || r2.Token() != 2 {
		t.Fatalf("second reader: %v %v", r2, err)
	}
	got := make(chan *client.Lease)
	go func() {
		w, err := b.RWLock("rw").Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	r1.Release(ctx)
	r2.Release(ctx)
	if w := <-got; w == nil || w.Token() != 3 || w.Shared() {
		t.Fatalf("writer %v, want token 3", w)
	}
}

// TestRWLockWriterQueuesBesideItsClientsReader: a writer of a Client whose
// other caller reads queues on the server at once (FIFO), so a reader that
// comes after it — of another Client — is refused (a reader never passes a
// waiting writer). A writer that waited locally for its own Client's reader
// instead would let that reader in.
func TestRWLockWriterQueuesBesideItsClientsReader(t *testing.T) {
	ts := startServer(t)
	a, b := dial(t, ts.addr), dial(t, ts.addr)
	ctx := context.Background()
	r1, err := a.RWLock("rw").RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	queued := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		// The deadline only ends the failing case: a writer that never
		// reaches the server's queue while r1 holds.
		w, err := a.RWLock("rw").Lock(ctxT(t, 10*time.Second), client.WithWaiting(func(uint64) { close(queued) }))
		if err == nil {
			err = w.Release(ctx)
		}
		done <- err
	}()
	select {
	case <-queued:
	case err := <-done:
		t.Fatalf("the writer never queued on the server while its Client's reader held (it waited locally): %v", err)
	}
	waitFor(func() bool {
		info, err := b.Status(ctx, "rw")
		return err == nil && info.Waiters == 1
	})
	if l, err := b.RWLock("rw").TryRLock(ctx); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("a reader after a waiting writer: %v, %v; want ErrLocked", l, err)
	}
	if err := r1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

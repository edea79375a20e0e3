package client

import (
	"context"
	"fmt"
)

// Semaphore is a lock of n permits: up to n holders at once, each grant
// with its own fencing token and a slot (Lease.Slot, 0…n−1, the lowest
// free), waiters served in FIFO order. Every holder of a name must use the
// same n while the lock is held or waited for; otherwise the call fails
// with a *PermitsError (ErrPermits). The server forgets an idle lock, so
// the count may change once nobody holds or waits for it.
//
// A Semaphore is a handle with no state of its own: safe for concurrent
// use, and free to make again. Callers of one Client that hold permits at
// once each use a server lease of their own.
type Semaphore struct {
	c    *Client
	name string
	n    int
}

// Semaphore returns a handle on the semaphore name of n permits (n ≥ 1; a
// Semaphore of 1 is the same lock as Lock's). A bad n is reported by its
// calls (ErrInvalid).
func (c *Client) Semaphore(name string, n int) *Semaphore {
	return &Semaphore{c: c, name: name, n: n}
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Permits returns the semaphore's permit count.
func (s *Semaphore) Permits() int { return s.n }

func (s *Semaphore) opts(opts []Option) ([]Option, error) {
	if s.n < 1 || s.n > maxPermits {
		return nil, fmt.Errorf("%w: semaphore %q: %d permits is outside 1…%d", ErrInvalid, s.name, s.n, maxPermits)
	}
	n := uint32(s.n)
	if n == 1 {
		n = 0 // the server's lock of one permit
	}
	return append(opts[:len(opts):len(opts)], func(o *options) { o.permits, o.shared = n, false }), nil
}

// maxPermits is the server's bound on a semaphore's permit count.
const maxPermits = 1 << 16

// Acquire blocks until a permit is granted (FIFO) or ctx ends. The Lease
// carries the permit's token and slot; pass the token to every write, and
// stop when Lease.Done closes.
func (s *Semaphore) Acquire(ctx context.Context, opts ...Option) (*Lease, error) {
	o, err := s.opts(opts)
	if err != nil {
		return nil, err
	}
	return s.c.Lock(ctx, s.name, o...)
}

// TryAcquire takes a permit if one is free and nobody waits, and returns
// at once otherwise with a *LockedError (ErrLocked) naming a holder.
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...Option) (*Lease, error) {
	o, err := s.opts(opts)
	if err != nil {
		return nil, err
	}
	return s.c.TryLock(ctx, s.name, o...)
}

// Do runs fn once while holding a permit, as Client.Do does with a lock:
// fn gets the permit's token and slot, and a context cancelled when the
// lease can no longer be trusted.
func (s *Semaphore) Do(ctx context.Context, fn func(ctx context.Context, token uint64, slot int) error, opts ...Option) error {
	o, err := s.opts(opts)
	if err != nil {
		return err
	}
	return s.c.do(ctx, s.name, o, func(ctx context.Context, l *Lease) error { return fn(ctx, l.Token(), l.Slot()) })
}

// RWLock is a read-write lock: readers (RLock) hold it together, a writer
// (Lock) alone. Grants are FIFO: a reader that comes while a writer waits
// queues behind it, so writers are never starved; when a writer leaves,
// the readers at the head of the queue go in together, up to the next
// writer. Every grant has its own token, from the one global counter, so a
// writer's token is larger than every reader's granted before it: storage
// that checks fence <= $token refuses a reader's write after a writer's.
//
// A writer's grant is the same as Client.Lock's on the name: a plain Lock
// is a writer of the read-write lock of its name. A Semaphore of the name
// is refused (ErrPermits). Callers of one Client that read at once each
// use a server lease of their own. An RWLock is a handle with no state.
type RWLock struct {
	c    *Client
	name string
}

// RWLock returns a handle on the read-write lock name.
func (c *Client) RWLock(name string) *RWLock { return &RWLock{c: c, name: name} }

// Name returns the lock's name.
func (rw *RWLock) Name() string { return rw.name }

func shared(opts []Option) []Option {
	return append(opts[:len(opts):len(opts)], func(o *options) { o.permits, o.shared = 0, true })
}

func exclusive(opts []Option) []Option {
	return append(opts[:len(opts):len(opts)], func(o *options) { o.permits, o.shared = 0, false })
}

// RLock blocks until a reader's grant is made (FIFO) or ctx ends.
func (rw *RWLock) RLock(ctx context.Context, opts ...Option) (*Lease, error) {
	return rw.c.Lock(ctx, rw.name, shared(opts)...)
}

// TryRLock takes a reader's grant if no writer holds or waits, and
// returns at once otherwise with a *LockedError (ErrLocked).
func (rw *RWLock) TryRLock(ctx context.Context, opts ...Option) (*Lease, error) {
	return rw.c.TryLock(ctx, rw.name, shared(opts)...)
}

// Lock blocks until the writer's grant is made (FIFO) or ctx ends.
func (rw *RWLock) Lock(ctx context.Context, opts ...Option) (*Lease, error) {
	return rw.c.Lock(ctx, rw.name, exclusive(opts)...)
}

// TryLock takes the writer's grant if nobody holds or waits, and returns
// at once otherwise with a *LockedError (ErrLocked).
func (rw *RWLock) TryLock(ctx context.Context, opts ...Option) (*Lease, error) {
	return rw.c.TryLock(ctx, rw.name, exclusive(opts)...)
}

// RDo runs fn once while holding a reader's grant, as Client.Do does.
func (rw *RWLock) RDo(ctx context.Context, fn func(ctx context.Context, token uint64) error, opts ...Option) error {
	return rw.c.Do(ctx, rw.name, fn, shared(opts)...)
}

// Do runs fn once while holding the writer's grant, as Client.Do does.
func (rw *RWLock) Do(ctx context.Context, fn func(ctx context.Context, token uint64) error, opts ...Option) error {
	return rw.c.Do(ctx, rw.name, fn, exclusive(opts)...)
}

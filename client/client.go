package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/fencing"
)

// Client talks to a fence server. It is safe for concurrent use. It holds one
// lease (session) per TTL in use, renewed in the background; Close revokes them.
type Client struct {
	conn *grpc.ClientConn
	api  api.FenceClient
	opts options

	mu       sync.Mutex
	sessions map[time.Duration]*session // guarded by mu; live sessions by TTL
	creating map[time.Duration]chan struct{}
	closed   bool
}

// Dial connects to the fence server at one of targets (host:port). It waits
// until a connection is up or ctx ends. Later, the connection is re-made with
// backoff whenever it breaks; calls wait for it within their context.
func Dial(ctx context.Context, targets []string, opts ...Option) (*Client, error) {
	o := defaults()
	o.apply(opts)
	if len(targets) == 0 {
		return nil, errors.New("fence: no server address given (for example 127.0.0.1:7300)")
	}
	if o.ttl <= 0 {
		return nil, fmt.Errorf("fence: TTL %v must be positive", o.ttl)
	}
	r := manual.NewBuilderWithScheme("fence")
	addrs := make([]resolver.Address, len(targets))
	for i, t := range targets {
		addrs[i] = resolver.Address{Addr: t}
	}
	r.InitialState(resolver.State{Addresses: addrs})
	dial := append([]grpc.DialOption{
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)),
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 2 * time.Second,
			Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}}),
	}, o.dialOpts...)
	conn, err := grpc.NewClient(r.Scheme()+":///fence", dial...)
	if err != nil {
		return nil, fmt.Errorf("fence: %w", err)
	}
	conn.Connect()
	for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			conn.Close()
			return nil, fmt.Errorf("fence: cannot reach a server at %s: %w (is 'fence serve' running there?)", strings.Join(targets, ", "), ctx.Err())
		}
	}
	return &Client{conn: conn, api: api.NewFenceClient(conn), opts: o,
		sessions: map[time.Duration]*session{}, creating: map[time.Duration]chan struct{}{}}, nil
}

// Close revokes every lease the client holds (their Done channels close with
// ErrClosed) and closes the connection.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	sessions := make([]*session, 0, len(c.sessions))
	for _, s := range c.sessions {
		sessions = append(sessions, s)
	}
	c.mu.Unlock()
	var errs []error
	for _, s := range sessions {
		s.end(fmt.Errorf("%w: lease #%d revoked", ErrClosed, s.number))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.api.Revoke(ctx, &api.RevokeRequest{RequestId: newRequestID(), LeaseId: s.id})
		cancel()
		if err != nil && status.Code(err) != codes.NotFound {
			errs = append(errs, fmt.Errorf("revoke lease #%d: %w", s.number, err))
		}
	}
	errs = append(errs, c.conn.Close())
	return errors.Join(errs...)
}

// session returns the live session for ttl, creating it if needed.
func (c *Client) session(ctx context.Context, ttl time.Duration) (*session, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		if s := c.sessions[ttl]; s != nil {
			c.mu.Unlock()
			if s.endErr() == nil {
				return s, nil
			}
			continue // it just ended; forget made room
		}
		if wait, busy := c.creating[ttl]; busy {
			c.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		c.creating[ttl] = done
		c.mu.Unlock()

		s, err := c.newSession(ctx, ttl)
		c.mu.Lock()
		delete(c.creating, ttl)
		close(done)
		if err == nil {
			if c.closed {
				c.mu.Unlock()
				s.end(ErrClosed)
				return nil, ErrClosed
			}
			c.sessions[ttl] = s
		}
		c.mu.Unlock()
		return s, err
	}
}

// forget drops an ended session so the next lock makes a fresh one.
func (c *Client) forget(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sessions[s.ttl] == s {
		delete(c.sessions, s.ttl)
	}
}

// Lock blocks until the lock is granted (in FIFO order with other waiters) or
// ctx ends. The returned Lease carries the fencing token; pass it to every
// write, and stop when Lease.Done closes.
func (c *Client) Lock(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	return c.acquire(ctx, name, true, opts)
}

// TryLock takes the lock if it is free and returns at once otherwise, with a
// *LockedError (errors.Is(err, ErrLocked)) naming the holder.
func (c *Client) TryLock(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	return c.acquire(ctx, name, false, opts)
}

func (c *Client) acquire(ctx context.Context, name string, wait bool, opts []Option) (*Lease, error) {
	o := c.opts
	o.apply(opts)
	start := time.Now()
	l, err := c.acquireOnce(ctx, name, wait, &o)
	c.opts.observer.AcquireWait(time.Since(start), err == nil)
	return l, err
}

func (c *Client) acquireOnce(ctx context.Context, name string, wait bool, o *options) (*Lease, error) {
	for {
		s, err := c.session(ctx, o.ttl)
		if err != nil {
			return nil, err
		}
		unclaim, err := s.claim(ctx, name)
		if err != nil {
			if errors.Is(err, ErrExpired) {
				continue // the session died while we waited locally; start over
			}
			return nil, err
		}
		req := &api.AcquireRequest{RequestId: newRequestID(), LeaseId: s.id, Name: name, Wait: wait}
		if o.lockDelay != nil {
			req.LockDelay = durationpb.New(*o.lockDelay)
		}
		var resp *api.AcquireResponse
		// Retries reuse the request id: a grant whose reply was lost comes back
		// as the same grant, never a second one.
		err = c.retry(ctx, func(ctx context.Context) (err error) {
			resp, err = c.api.Acquire(ctx, req)
			return err
		})
		if err == nil {
			return newLease(s, name, resp.Token, unclaim), nil
		}
		if ctx.Err() != nil && wait {
			c.undo(s, name) // before unclaim: no other local caller can hold name yet
		}
		unclaim()
		switch st, _ := status.FromError(err); {
		case st.Code() == codes.NotFound && s.endErr() == nil:
			// The server ended our session while we waited; end it here too and retry.
			s.end(fmt.Errorf("%w: the server ended lease #%d", ErrExpired, s.number))
			continue
		case st.Code() == codes.NotFound:
			continue
		case st.Code() == codes.Aborted:
			return nil, lockedError(name, st)
		case ctx.Err() != nil:
			return nil, fmt.Errorf("fence: lock %q: %w", name, ctx.Err())
		}
		return nil, fmt.Errorf("fence: lock %q: %w", name, err)
	}
}

// undo gives back a grant that raced with the caller's deadline: the server
// leaves the queue when the call ends, but the grant may have come first. The
// caller still holds the local claim on name, so if this session holds the
// lock now, it is that grant.
func (c *Client) undo(s *session, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.api.GetLock(ctx, &api.GetLockRequest{Name: name})
	if err == nil && resp.GetLock().GetHolderLease() == s.number {
		c.api.Release(ctx, &api.ReleaseRequest{RequestId: newRequestID(), LeaseId: s.id, Name: name})
	}
}

func lockedError(name string, st *status.Status) error {
	e := &LockedError{Name: name}
	for _, d := range st.Details() {
		if h, ok := d.(*api.LockHeld); ok {
			e.HolderLease, e.HolderOwner, e.Token, e.Delayed = h.HolderLease, h.HolderOwner, h.Token, h.Delayed
		}
	}
	return e
}

// Do runs fn once while holding the lock: it waits for the lock, calls fn
// with a context that is cancelled the moment the lease can no longer be
// trusted, and releases the lock afterwards. fn must pass token to every
// write. If fn returns an error matching fencing.ErrStale, a newer holder has
// written: Do stops and returns it (it never retries with the same token).
func (c *Client) Do(ctx context.Context, name string, fn func(ctx context.Context, token uint64) error, opts ...Option) error {
	l, err := c.Lock(ctx, name, opts...)
	if err != nil {
		return err
	}
	workCtx := l.contextFrom(ctx)
	fnErr := fn(workCtx, l.Token())
	relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	relErr := l.Release(relCtx)
	switch {
	case errors.Is(fnErr, fencing.ErrStale):
		return fmt.Errorf("fence: %q: a newer holder has written; stopped: %w", name, fnErr)
	case fnErr != nil:
		return fnErr
	case relErr != nil && !errors.Is(relErr, ErrReleased):
		// The work finished, but the lease was lost on the way: tell the caller,
		// whose writes were only safe if they were fenced.
		return relErr
	}
	return nil
}

// retry runs call until it succeeds, fails for good, or ctx ends. It retries
// UNAVAILABLE (server down, no leader yet, outcome unknown), and CANCELLED or
// DEADLINE_EXCEEDED while ctx itself is still alive (the server aborted the
// call, e.g. while shutting down). The caller reuses its request id, so a
// retry cannot act twice.
func (c *Client) retry(ctx context.Context, call func(context.Context) error) error {
	delay := 20 * time.Millisecond
	for {
		err := call(ctx)
		switch status.Code(err) {
		case codes.Unavailable:
		case codes.Canceled, codes.DeadlineExceeded:
			if ctx.Err() != nil {
				return err
			}
		default:
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w (last error: %v)", ErrIndeterminate, ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

func newRequestID() []byte {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic("fence: no randomness: " + err.Error())
	}
	return b
}

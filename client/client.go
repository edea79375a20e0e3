package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/clock"
)

// realClock times the transport (connect polling, retry backoff): real
// waits, even when a test drives the lease clock by hand.
var realClock clock.Real

// Client talks to a fence server or cluster. It is safe for concurrent use.
// It holds one lease (session) per TTL and safety margin in use, renewed in
// the background;
// Close revokes them.
type Client struct {
	ms    atomic.Pointer[[]*member] // copy-on-write; grows when a follower names an unknown leader
	addMu sync.Mutex                // serialises growing ms
	cur   atomic.Int32              // index into ms of the member believed to lead
	opts  options
	creds credentials.TransportCredentials // TLS, or plaintext with WithInsecure
	// hungUp: Close is closing (or has closed) the connections; a call
	// that fails then is not retried (ErrClosed).
	hungUp atomic.Bool

	mu       sync.Mutex
	sessions map[sessionKey]*session      // guarded by mu; live sessions by TTL and margin
	creating map[sessionKey]chan struct{} // guarded by mu; sessions being created
	closed   bool
}

// Dial connects to a fence server, or to the members of a cluster (one
// host:port per member; any subset will do while one of them leads). It waits
// until one member is reachable or ctx ends (with [WithFailFast], only until
// every member has failed once); its error then matches ErrUnreachable and
// says why each member failed: its name does not resolve, the connection was
// refused or not answered, the TLS handshake failed, or the port does not
// speak fence's gRPC. Calls go to the member believed
// to lead; a member that is not the leader or cannot be reached sends the
// call to the next one, transparently. Broken connections are re-made with
// backoff.
func Dial(ctx context.Context, targets []string, opts ...Option) (*Client, error) {
	o := defaults()
	o.apply(opts)
	if len(targets) == 0 {
		return nil, errors.New("fence: no server address given (for example 127.0.0.1:7300)")
	}
	if _, err := o.sessionKey(); err != nil {
		return nil, err
	}
	tlsCfg, err := o.transportTLS()
	if err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	if o.token != "" {
		o.dialOpts = append([]grpc.DialOption{grpc.WithPerRPCCredentials(bearerToken(o.token))}, o.dialOpts...)
	}
	if o.tracer != nil {
		o.dialOpts = append(tracingDialOptions(), o.dialOpts...)
	}
	c := &Client{opts: o, creds: creds, sessions: map[sessionKey]*session{}, creating: map[sessionKey]chan struct{}{}}
	var ms []*member
	for _, t := range targets {
		m, err := c.connect(t)
		if err != nil {
			closeMembers(ms)
			return nil, err
		}
		ms = append(ms, m)
	}
	c.ms.Store(&ms)
	start := realClock.Now()
	reaches := make([]*reach, len(ms))
	for i, m := range ms {
		reaches[i] = m.reach
	}
	for {
		for i, m := range ms {
			if m.conn.GetState() == connectivity.Ready {
				c.cur.Store(int32(i))
				return c, nil
			}
		}
		if o.failFast && allAnswered(reaches) {
			closeMembers(ms)
			return nil, unreachable(reaches, clock.Since(realClock, start), nil)
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			closeMembers(ms)
			return nil, unreachable(reaches, clock.Since(realClock, start), err)
		}
	}
}

// member is one server the client can call.
type member struct {
	addr  string
	conn  *grpc.ClientConn
	api   api.FenceServiceClient
	reach *reach // why connecting to it last failed
	// unaryUntil: it answered the Session stream UNIMPLEMENTED (an older
	// fence); until then (on the client's clock) Acquire and Release go to
	// it as unary calls. Nil: it never did.
	unaryUntil atomic.Pointer[time.Time]
}

// sessionRetry is how long the client uses unary calls with a member that
// has no Session stream before it tries the stream there again: a rolling
// upgrade gives it one, and another member's age says nothing of its own.
const sessionRetry = time.Minute

// hasSession reports whether member idx may have the Session stream: it
// did not answer UNIMPLEMENTED within sessionRetry.
func (c *Client) hasSession(idx int32) bool {
	until := c.memberAt(idx).unaryUntil.Load()
	return until == nil || !c.opts.clock.Now().Before(*until)
}

// noSession records that member idx answered the Session stream
// UNIMPLEMENTED.
func (c *Client) noSession(idx int32) {
	until := c.opts.clock.Now().Add(sessionRetry)
	c.memberAt(idx).unaryUntil.Store(&until)
}

func (c *Client) connect(addr string) (*member, error) {
	r := &reach{addr: addr, tls: c.creds.Info().SecurityProtocol == "tls"}
	// passthrough: the name is resolved by r's dialer, which can tell a name
	// that does not exist from a server that does not answer.
	opts := append(r.dialOptions(c.creds),
		// A member cut off without a TCP reset leaves a connection that looks
		// fine; pings find it dead within ~3s, its calls fail UNAVAILABLE and
		// the client moves on to the next member.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 2 * time.Second, Timeout: time.Second, PermitWithoutStream: true}),
		// No BDP ping per call (see api.StreamWindow).
		grpc.WithStaticStreamWindowSize(api.StreamWindow), grpc.WithStaticConnWindowSize(api.ConnWindow),
		// The standard proto encoding without protobuf's reflection.
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(api.Codec)),
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 2 * time.Second,
			Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}}))
	conn, err := grpc.NewClient("passthrough:///"+addr, append(opts, c.opts.dialOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("fence: %s: %w", addr, err)
	}
	conn.Connect()
	return &member{addr: addr, conn: conn, api: api.NewFenceServiceClient(conn), reach: r}, nil
}

func closeMembers(ms []*member) error {
	var errs []error
	for _, m := range ms {
		errs = append(errs, m.conn.Close())
	}
	return errors.Join(errs...)
}

func (c *Client) members() []*member { return *c.ms.Load() }

// leader returns the member calls go to now.
func (c *Client) leader() api.FenceServiceClient { return c.memberAt(c.cur.Load()).api }

func (c *Client) memberAt(idx int32) *member {
	ms := c.members()
	return ms[int(idx)%len(ms)]
}

// moveOn sends later calls away from member idx after err (UNAVAILABLE): to
// the leader a follower named, or else to the next member. If another call
// moved them already, it does nothing.
func (c *Client) moveOn(idx int32, err error) {
	for _, d := range status.Convert(err).Details() {
		if nl, ok := d.(*api.NotLeader); ok && nl.LeaderAddr != "" {
			if to, ok := c.indexOf(nl.LeaderAddr); ok {
				c.cur.CompareAndSwap(idx, to)
				return
			}
		}
	}
	c.cur.CompareAndSwap(idx, (idx+1)%int32(len(c.members())))
}

// indexOf finds addr among the members, adding it if it is new.
func (c *Client) indexOf(addr string) (int32, bool) {
	c.addMu.Lock()
	defer c.addMu.Unlock()
	ms := c.members()
	for i, m := range ms {
		if m.addr == addr {
			return int32(i), true
		}
	}
	m, err := c.connect(addr)
	if err != nil {
		return 0, false
	}
	grown := append(append([]*member(nil), ms...), m)
	c.ms.Store(&grown)
	return int32(len(grown) - 1), true
}

// isClosed reports whether Close was called.
func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
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
		if err := c.revoke(s); err != nil {
			errs = append(errs, err)
		}
	}
	c.hungUp.Store(true)
	errs = append(errs, closeMembers(c.members()))
	return errors.Join(errs...)
}

// revoke ends s on the server (s has ended here already).
func (c *Client) revoke(s *session) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := &api.RevokeRequest{RequestId: newRequestID(), LeaseSecret: s.id}
	err := c.retry(ctx, func(ctx context.Context) error {
		_, err := c.leader().Revoke(ctx, req)
		return err
	})
	if err != nil && status.Code(err) != codes.NotFound {
		return fmt.Errorf("revoke lease #%d: %w", s.number, err)
	}
	return nil
}

// session returns the live session for key, creating it if needed.
func (c *Client) session(ctx context.Context, key sessionKey) (*session, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		if s := c.sessions[key]; s != nil {
			c.mu.Unlock()
			if s.endErr() == nil {
				return s, nil
			}
			continue // it just ended; forget made room
		}
		if wait, busy := c.creating[key]; busy {
			c.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		c.creating[key] = done
		c.mu.Unlock()

		s, err := c.newSession(ctx, key)
		c.mu.Lock()
		delete(c.creating, key)
		close(done)
		if err == nil {
			if c.closed {
				c.mu.Unlock()
				s.end(ErrClosed)
				return nil, ErrClosed
			}
			c.sessions[key] = s
		}
		c.mu.Unlock()
		return s, err
	}
}

// forget drops an ended session so the next lock makes a fresh one.
func (c *Client) forget(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k := (sessionKey{s.ttl, s.margin, s.lane}); c.sessions[k] == s {
		delete(c.sessions, k)
	}
}

// Lock blocks until the lock is granted (in FIFO order with other waiters) or
// ctx ends. The returned Lease carries the fencing token; pass it to every
// write, and stop when Lease.Done closes.
func (c *Client) Lock(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	return c.acquire(ctx, name, true, opts)
}

// TryLock takes the lock if it is free and returns at once otherwise, with a
// *LockedError (errors.Is(err, ErrLocked)) naming the holder. That includes
// a name held by another caller of this Client (LockedError.Local): TryLock
// never waits for it.
func (c *Client) TryLock(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	return c.acquire(ctx, name, false, opts)
}

func (c *Client) acquire(ctx context.Context, name string, wait bool, opts []Option) (*Lease, error) {
	o := c.opts
	o.apply(opts)
	ctx, span := o.startSpan(ctx, spanAcquire, func() []attribute.KeyValue {
		return []attribute.KeyValue{attrLock.String(name), attrWait.Bool(wait)}
	})
	start := o.clock.Now()
	l, err := c.acquireOnce(ctx, name, wait, &o)
	c.opts.observer.AcquireWait(clock.Since(o.clock, start), err == nil)
	if err == nil && span.IsRecording() {
		span.SetAttributes(leaseAttrs(l)...)
	}
	endSpan(span, err)
	return l, err
}

// maxNameLen is the longest lock name the server takes (its fsm.MaxNameLen,
// which package client may not import; TestMaxNameLen keeps them equal).
// A longer one is refused before it is sent: on the session's stream a
// message above the server's size limit would end the stream, and with it
// every call of the session waiting there.
const maxNameLen = 256

func (c *Client) acquireOnce(ctx context.Context, name string, wait bool, o *options) (*Lease, error) {
	if len(name) > maxNameLen {
		return nil, fmt.Errorf("fence: lock %.64q…: %w: the name is %d bytes, the limit is %d", name, ErrInvalid, len(name), maxNameLen)
	}
	key, err := o.sessionKey()
	if err != nil {
		return nil, fmt.Errorf("fence: lock %q: %w", name, err)
	}
	for {
		s, err := c.session(ctx, key)
		if err != nil {
			return nil, err
		}
		multi := o.permits > 1 || o.shared
		unclaim, granted, err := s.claim(ctx, name, wait, multi)
		if errors.Is(err, errNextLane) {
			key.lane++ // this session holds a permit (a read) of name, or a writer asks beside a local reader: the next one may ask
			continue
		}
		if err != nil {
			if errors.Is(err, ErrExpired) {
				continue // the session died while we waited locally; start over
			}
			return nil, err
		}
		req := acquireRequest(s.id, s.calls.begin(), name, wait, o)
		if wait && o.waiting != nil {
			o.waiting(s.number)
		}
		resp, err := c.sendAcquire(ctx, s, req)
		if err == nil {
			return newLease(s, name, resp, unclaim, granted, o), nil
		}
		if outcomeUnknown(err) {
			c.settleAcquire(s, req) // before unclaim: no other local caller can hold name yet
		}
		unclaim()
		switch st, _ := status.FromError(err); {
		case st.Code() == codes.NotFound && s.endErr() == nil:
			// The server ended our session while we waited; end it here too and retry.
			s.end(fmt.Errorf("%w: the server ended lease #%d", ErrExpired, s.number))
			continue
		case st.Code() == codes.NotFound:
			continue
		case st.Code() == codes.Aborted && !hasLockHeld(st) && ctx.Err() == nil:
			continue // the server ended this wait (it stopped, say): wait again with a new call
		case st.Code() == codes.Aborted:
			return nil, lockedError(name, st)
		case st.Code() == codes.FailedPrecondition && ranError(name, st) != nil:
			return nil, ranError(name, st)
		case st.Code() == codes.FailedPrecondition && permitsError(name, st) != nil:
			return nil, permitsError(name, st)
		case ctx.Err() != nil:
			return nil, fmt.Errorf("fence: lock %q: %w", name, ctx.Err())
		}
		return nil, fmt.Errorf("fence: lock %q: %w", name, err)
	}
}

// Settling unknown outcomes. A call whose context ended (or whose answer was
// lost) may still have acted. The client then re-sends the SAME request (same
// request id, so the server answers with the first outcome, and a grant
// released since never answers OK) with a fresh context, settleAttempt at a
// time, for up to settleFor (default defaultSettleFor). A grant made is given
// back. If the outcome is still unknown at the bound, the client gives up the
// whole session: it stops renewing and revokes it (or the server expires it),
// so no grant outlives its holder's knowledge of it.
const (
	defaultSettleFor = 5 * time.Second
	settleAttempt    = time.Second
)

// outcomeUnknown reports whether err leaves open whether the server acted.
func outcomeUnknown(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrIndeterminate) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Canceled, codes.DeadlineExceeded, codes.Unknown, codes.Internal:
		return true
	}
	return false
}

// settle re-sends call until its outcome is known (nil or a definitive
// refusal) or the settle bound passes; it returns the last error.
func (c *Client) settle(s *session, call func(context.Context) error) error {
	bound := c.opts.settleFor
	if bound <= 0 {
		bound = defaultSettleFor
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, settleAttempt)
		err := c.retry(actx, call)
		acancel()
		if !outcomeUnknown(err) || ctx.Err() != nil || s.endErr() != nil {
			return err
		}
	}
}

// settleAcquire settles an Acquire whose outcome is unknown and gives back a
// grant it made. The caller still holds the local claim on the name. The
// retries of a plain Acquire do not wait: the server takes a call still
// queued out of the queue and answers how it ended (a retry that waited
// would keep it queued while the next retry overlapped it). A relock's
// retries still wait: the server takes release_token only with wait.
func (c *Client) settleAcquire(s *session, req *api.AcquireRequest) {
	settling := req
	if req.GetReleaseToken() == 0 {
		settling = proto.Clone(req).(*api.AcquireRequest)
		settling.Wait = false
	}
	err := c.settle(s, func(ctx context.Context) error {
		_, err := s.acquire(ctx, settling)
		return err
	})
	if !outcomeUnknown(err) {
		s.calls.answered(req.Seq)
	}
	switch {
	case err == nil: // granted after all: nobody will use it
		c.giveBack(s, req.Name)
	case outcomeUnknown(err):
		c.abandon(s, fmt.Sprintf("acquire of %q", req.Name), err)
	}
}

// giveBack releases a grant no caller holds, settling the outcome.
func (c *Client) giveBack(s *session, name string) {
	req := s.releaseRequest(name)
	call := func(ctx context.Context) error { return s.release(ctx, req) }
	ctx, cancel := context.WithTimeout(context.Background(), settleAttempt)
	err := c.retry(ctx, call)
	cancel()
	if outcomeUnknown(err) {
		err = c.settle(s, call)
	}
	if !outcomeUnknown(err) {
		s.calls.answered(req.Seq)
	}
	if code := status.Code(err); err != nil && code != codes.NotFound && code != codes.FailedPrecondition {
		c.abandon(s, fmt.Sprintf("release of %q", name), err)
	}
}

// abandon gives up session s because a call's outcome could not be settled:
// its leases end here at once, and it is revoked (if that fails too, the
// server expires it within the TTL, since nothing renews it any more).
func (c *Client) abandon(s *session, what string, err error) {
	s.end(fmt.Errorf("%w: %w: %s could not be settled (%v); lease #%d was given up so the server ends it",
		ErrExpired, ErrIndeterminate, what, err, s.number))
	go c.revoke(s)
}

// acquireRequest builds an Acquire numbered seq in its lease, with a fresh
// request id (both reused on retries).
func acquireRequest(lease []byte, seq uint64, name string, wait bool, o *options) *api.AcquireRequest {
	req := &api.AcquireRequest{RequestId: newRequestID(), LeaseSecret: lease, Seq: seq, Ack: seq, Name: name, Wait: wait} // a session sets Ack before each send
	if o.lockDelay != nil {
		req.LockDelay = durationpb.New(*o.lockDelay)
	}
	if o.oncePer != 0 {
		req.OncePer = durationpb.New(o.oncePer)
	}
	req.Permits, req.Shared = o.permits, o.shared
	return req
}

// hasLockHeld reports whether st carries a LockHeld detail (a refusal
// because the lock is taken, rather than a wait the server ended).
func hasLockHeld(st *status.Status) bool {
	return slices.ContainsFunc(st.Details(), func(d any) bool { _, ok := d.(*api.LockHeld); return ok })
}

func lockedError(name string, st *status.Status) error {
	e := &LockedError{Name: name}
	for _, d := range st.Details() {
		if h, ok := d.(*api.LockHeld); ok {
			e.HolderLease, e.HolderOwner, e.Token, e.Delayed = h.HolderLeaseNumber, h.HolderOwner, h.Token, h.Delayed
		}
	}
	return e
}

// Do runs fn once while holding the lock: it waits for the lock, calls fn
// with a context that is cancelled the moment the lease can no longer be
// trusted (context.Cause says why, e.g. ErrExpired), and releases the lock
// afterwards. If the lease ended while fn ran and fn failed, Do's error wraps
// both the lease's reason (errors.Is(err, ErrExpired)) and fn's error. fn must pass token to every
// write. With WithOncePer, Do returns a *RanError without calling fn if the
// job ran inside the window, and when fn returns nil with the lease intact
// the release records the run (Lease.ReleaseRan); a failed fn records
// nothing. If fn returns an error matching fencing.ErrStale, a newer holder has
// written: Do stops and returns it (it never retries with the same token).
// If fn panics, Do releases the lock (recording no run) and panics on.
func (c *Client) Do(ctx context.Context, name string, fn func(ctx context.Context, token uint64) error, opts ...Option) error {
	return c.do(ctx, name, opts, func(ctx context.Context, l *Lease) error { return fn(ctx, l.Token()) })
}

// do is Do with fn given the whole Lease (its slot, say).
func (c *Client) do(ctx context.Context, name string, opts []Option, fn func(ctx context.Context, l *Lease) error) error {
	l, err := c.Lock(ctx, name, opts...)
	if err != nil {
		return err
	}
	release := func(ran bool) error {
		relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return l.release(relCtx, ran)
	}
	panicked := true
	defer func() {
		if panicked { // unwinding: a lease left held would be kept alive for the life of the process
			release(false)
		}
	}()
	workCtx := l.contextFrom(ctx)
	fnErr := fn(workCtx, l)
	panicked = false
	lost := l.Err() // before Release: why the lease ended, if it did
	relErr := release(fnErr == nil)
	switch {
	case errors.Is(fnErr, fencing.ErrStale):
		return fmt.Errorf("fence: %q: a newer holder has written; stopped: %w", name, fnErr)
	case fnErr != nil && lost != nil && !errors.Is(fnErr, lost):
		// fn most likely returned its context's Canceled: say why.
		return fmt.Errorf("fence: %q: the lease ended while fn ran: %w (fn returned: %w)", name, lost, fnErr)
	case fnErr != nil:
		return fnErr
	case relErr != nil && !errors.Is(relErr, ErrReleased):
		// The work finished, but the lease was lost on the way: tell the caller,
		// whose writes were only safe if they were fenced.
		return relErr
	}
	return nil
}

// retry runs call until it succeeds, fails for good, or ctx ends. On
// UNAVAILABLE (this member is not the leader, is down, or the outcome is
// unknown) it moves to the next member, sweeping all of them before it backs
// off. It also retries CANCELLED and DEADLINE_EXCEEDED while ctx itself is
// still alive (the server aborted the call, e.g. while shutting down). The
// caller reuses its request id, so a retry cannot act twice. Once Close
// closes the connections, a failed call ends it with ErrClosed.
func (c *Client) retry(ctx context.Context, call func(context.Context) error) error {
	delay := 20 * time.Millisecond
	for tried := 1; ; tried++ {
		idx := c.cur.Load()
		err := call(ctx)
		if err != nil && c.hungUp.Load() { // the closed connections fail every attempt
			return fmt.Errorf("%w (the call failed: %v)", ErrClosed, err)
		}
		switch status.Code(err) {
		case codes.OK:
			return nil
		case codes.Unavailable:
			c.moveOn(idx, err)
		case codes.Canceled, codes.DeadlineExceeded:
			if ctx.Err() != nil {
				return refusal(err, c.memberAt(idx).addr, ctx.Err())
			}
		case codes.InvalidArgument:
			return refusal(err, c.memberAt(idx).addr, ErrInvalid)
		case codes.Unimplemented: // not a fence gRPC port (or an older fence)
			return refusal(err, c.memberAt(idx).addr, ErrUnreachable)
		default:
			return refusal(err, c.memberAt(idx).addr, nil)
		}
		if tried < len(c.members()) {
			continue // try the next member at once
		}
		tried = 0
		if serr := sleep(ctx, delay); serr != nil {
			return fmt.Errorf("%w: %w (last error: %v)", ErrIndeterminate, serr, err)
		}
		delay = min(2*delay, time.Second)
	}
}

// sleep waits d of real time, or until ctx ends (then it returns ctx.Err()).
func sleep(ctx context.Context, d time.Duration) error { return clock.Sleep(ctx, realClock, d) }

func newRequestID() []byte {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic("fence: no randomness: " + err.Error())
	}
	return b
}

// bearerToken sends a WithToken token with every call.
type bearerToken string

func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity is true: a token never travels in plaintext
// (Dial with WithInsecure and WithToken fails on the first call).
func (bearerToken) RequireTransportSecurity() bool { return true }

package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/clock"
)

// sessionKey picks the session a lock joins: locks share a server lease only
// when both its TTL and its safety margin agree. A server lease holds at
// most one grant of a name, so callers of one Client that hold permits of
// one semaphore, or read one read-write lock, at the same time each use a
// session of their own: lane 0, 1, 2 … (a mutex's local callers take turns
// in one lane; a writer behind a local reader or permit moves on, see
// errNextLane).
type sessionKey struct {
	ttl, margin time.Duration
	lane        int
}

// sessionKey returns the key for o's TTL and (effective) margin.
func (o *options) sessionKey() (sessionKey, error) {
	if o.ttl <= 0 {
		return sessionKey{}, fmt.Errorf("%w: TTL %v must be positive", ErrInvalid, o.ttl)
	}
	m, err := o.safetyMargin()
	return sessionKey{ttl: o.ttl, margin: m}, err
}

// session is one server lease (a session) shared by the locks a Client holds
// with the same TTL and safety margin. It renews itself every TTL/3 on its
// Session stream (a KeepAlive stream on an older server) and
// ends at its local deadline unless a renewal succeeded: deadline = the time
// the last successful renewal was SENT + TTL − safety margin, on the client's
// clock (CLOCK_BOOTTIME: it counts while the host is suspended).
type session struct {
	c      *Client
	clk    clock.Clock
	ttl    time.Duration
	margin time.Duration
	lane   int // see sessionKey
	id     []byte
	number uint64

	mu       sync.Mutex
	deadline time.Time     // guarded by mu
	failing  error         // guarded by mu; the last renewal error, nil while renewals succeed
	err      error         // guarded by mu; why the session ended
	ended    chan struct{} // closed when the session ends
	timer    clock.Timer   // fires at deadline
	stop     context.CancelFunc
	names    map[string]*localClaim // guarded by mu; one local holder per lock name
	grants   map[*Lease]time.Time   // guarded by mu; live grants, by when their answer arrived
	calls    calls

	life     context.Context // ends with the session: its Session stream's parent
	streamMu sync.Mutex
	stream   *callStream // guarded by streamMu; the Session stream of its Acquire and Release calls, nil until the first
}

// newSession creates the server lease. Its deadline counts from before the
// CreateLease call was sent.
func (c *Client) newSession(ctx context.Context, key sessionKey) (*session, error) {
	ttl := key.ttl
	req := newRequestID()
	clk := c.opts.clock
	sent := clk.Now()
	var resp *api.CreateLeaseResponse
	err := c.retry(ctx, func(ctx context.Context) (err error) {
		resp, err = c.leader().CreateLease(ctx, &api.CreateLeaseRequest{RequestId: req, Ttl: durationpb.New(ttl), Owner: c.opts.owner})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("fence: create lease: %w", err)
	}
	s := &session{c: c, clk: clk, ttl: ttl, margin: key.margin, lane: key.lane, id: resp.LeaseSecret, number: resp.LeaseNumber,
		deadline: sent.Add(ttl - key.margin), ended: make(chan struct{}), names: map[string]*localClaim{}, grants: map[*Lease]time.Time{}}
	s.timer = clk.AfterFunc(clock.Until(clk, s.deadline), s.check)
	loop, stop := context.WithCancel(context.Background())
	s.stop, s.life = stop, loop
	go s.renew(loop)
	return s, nil
}

// check ends the session if its deadline has passed. Called by the deadline
// timer and synchronously by Lease.Err, so a process that was paused learns
// of the expiry on its first look, before the timer goroutine runs.
func (s *session) check() {
	s.mu.Lock()
	if s.err != nil || s.clk.Now().Before(s.deadline) {
		s.mu.Unlock()
		return
	}
	err := fmt.Errorf("%w: no renewal succeeded within the TTL (%v)", ErrExpired, s.ttl)
	if s.failing != nil {
		err = fmt.Errorf("%w: %w: last renewal error: %v", ErrExpired, ErrLostContact, s.failing)
	}
	s.mu.Unlock()
	s.end(err)
}

// end stops the session for good and tells its leases why.
func (s *session) end(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	s.timer.Stop()
	s.stop()
	close(s.ended)
	live := make([]*Lease, 0, len(s.grants))
	for l := range s.grants {
		live = append(live, l)
	}
	s.mu.Unlock()
	for _, l := range live {
		l.finish()
	}
	s.c.forget(s)
	if !errors.Is(err, ErrClosed) {
		s.c.opts.observer.LeaseLost(err)
	}
}

// endErr returns why the session ended, checking the deadline first.
func (s *session) endErr() error {
	s.check()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// jeopardy reports a failing renewal while the deadline has not passed.
func (s *session) jeopardy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failing
}

func (s *session) renewed(sent time.Time, ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil || !s.clk.Now().Before(s.deadline) {
		return // too late: the deadline passed while the renewal was in flight
	}
	if d := sent.Add(ttl - s.margin); d.After(s.deadline) {
		s.deadline = d
		s.timer.Reset(clock.Until(s.clk, d))
	}
	s.failing = nil
}

// checkHeld ends the leases of grants an admin ended: a grant whose answer
// arrived before the renewal was sent, and whose token the renewal's answer
// (the lease's holdings when it was applied, after it was sent) lacks.
func (s *session) checkHeld(sent time.Time, held []uint64) {
	s.mu.Lock()
	var gone []*Lease
	for l, at := range s.grants {
		if at.Before(sent) && !slices.Contains(held, l.token) {
			gone = append(gone, l)
		}
	}
	s.mu.Unlock()
	for _, l := range gone {
		l.revoke(fmt.Errorf("%w: an admin force-released lock %q (token %d); lease #%d lives on", ErrRevoked, l.name, l.token, s.number))
	}
}

// track and untrack keep s.grants: the leases checkHeld looks at, and end
// finishes. A lease tracked after the session ended is finished at once.
func (s *session) track(l *Lease) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		l.finish()
		return
	}
	s.grants[l] = s.clk.Now()
	s.mu.Unlock()
}

func (s *session) untrack(l *Lease) {
	s.mu.Lock()
	delete(s.grants, l)
	s.mu.Unlock()
}

func (s *session) renewFailed(err error) {
	s.mu.Lock()
	s.failing = err
	s.mu.Unlock()
	s.c.opts.observer.RenewalSent(false)
}

// renew runs until the session ends: a renewal every TTL/3 after the last
// success, and every retryEvery while failing.
func (s *session) renew(ctx context.Context) {
	interval := s.ttl / 3
	retryEvery := min(interval, 250*time.Millisecond)
	var (
		rs  *renewStream
		seq uint64
	)
	defer func() { rs.close() }()
	fail := func(err error) { // drop the stream; the next one goes to the next member
		if rs != nil {
			rs.close()
			if !errors.Is(err, errUseUnary) { // else: the member has no Session stream; it may lead
				s.c.moveOn(rs.member, err)
			}
		}
		rs = nil
		s.renewFailed(err)
	}
	wake := s.clk.NewTimer(interval) // the next renewal
	defer wake.Stop()
	patience := s.clk.NewTimer(interval) // how long to wait for an answer
	patience.Stop()
	defer patience.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake.C():
		}
		wake.Reset(retryEvery) // unless the renewal below succeeds
		// The session's calls went on to another stream: so do its renewals.
		if rs != nil && rs.moved != nil && rs.moved() {
			rs.close()
			rs = nil
		}
		if rs == nil {
			var err error
			if rs, err = s.openStream(ctx); err != nil {
				s.renewFailed(err)
				continue
			}
		}
		seq++
		patience.Reset(interval)
		sent := s.clk.Now()
		_, span := s.c.opts.startSpan(context.Background(), spanRenew, func() []attribute.KeyValue {
			return []attribute.KeyValue{attrLease.Int64(int64(s.number))}
		})
		if err := rs.send(&api.KeepAliveRequest{LeaseSecret: s.id, Seq: seq}); err != nil {
			endSpan(span, err)
			fail(err)
			continue
		}
	wait:
		select {
		case r := <-rs.resps:
			if r.Seq != seq {
				goto wait // the answer to an earlier renewal that timed out
			}
			s.c.opts.observer.RenewalSent(true)
			if !r.Ok {
				err := fmt.Errorf("%w: the server ended lease #%d (it expired, or an admin revoked it)", ErrExpired, s.number)
				endSpan(span, err)
				s.end(err)
				return
			}
			endSpan(span, nil)
			wake.Reset(clock.Until(s.clk, sent.Add(interval))) // first: a test that sees the new deadline may move the clock
			s.renewed(sent, r.GetTtl().AsDuration())
			s.checkHeld(sent, r.GetHeldTokens())
		case err := <-rs.errs:
			if errors.Is(err, io.EOF) {
				err = errors.New("renewal stream closed by the server")
			}
			endSpan(span, err)
			fail(err)
		case <-patience.C():
			// A member that cannot commit (a deposed leader cut off from the
			// majority) never answers: try another.
			err := errors.New("no answer to a renewal within TTL/3")
			endSpan(span, err)
			fail(err)
		case <-ctx.Done():
			endSpan(span, ctx.Err())
			return
		}
	}
}

// renewStream is where a session's renewals go, and the goroutine reading
// their answers: its Session stream (stream.go), or a KeepAlive stream of
// its own on an older server.
type renewStream struct {
	member int32 // index of the member it goes to
	send   func(*api.KeepAliveRequest) error
	resps  chan *api.KeepAliveResponse
	errs   chan error
	cancel context.CancelFunc
	moved  func() bool // the session's calls left this stream (a Session stream it retired); nil: a KeepAlive stream
}

func (s *session) openStream(ctx context.Context) (*renewStream, error) {
	if rs, err := s.renewOnSession(ctx); !errors.Is(err, errUseUnary) {
		return rs, err
	}
	sctx, cancel := context.WithCancel(ctx)
	// Calls fail fast while disconnected: each attempt counts as a failed
	// renewal (jeopardy), and the loop retries soon, on the next member.
	idx := s.c.cur.Load()
	st, err := s.c.memberAt(idx).api.KeepAlive(sctx)
	if err != nil {
		cancel()
		s.c.moveOn(idx, err)
		return nil, err
	}
	rs := &renewStream{member: idx, send: st.Send, resps: make(chan *api.KeepAliveResponse, 4), errs: make(chan error, 1), cancel: cancel}
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				rs.errs <- err
				return
			}
			select {
			case rs.resps <- r:
			case <-sctx.Done():
				return
			}
		}
	}()
	return rs, nil
}

func (rs *renewStream) close() {
	if rs != nil {
		rs.cancel()
	}
}

// localClaim marks name as taken by one caller of this session.
type localClaim struct {
	done  chan struct{} // closed when the caller lets go
	multi bool          // a permit of a semaphore or a reader's grant: others of its kind use the next lane
	token uint64        // guarded by session.mu; the grant's token, once granted
}

// errNextLane: name is taken in this session by a caller whose grant may
// be held beside others (a permit, a reader's), so the caller asks in a
// session of the next lane rather than waiting for it locally: a writer
// that waited here for its own Client's reader would not be in the
// server's queue, and readers that came after it would pass it.
var errNextLane = errors.New("fence: name taken in this lane; try the next")

// claim makes this caller the only local holder of name in this session. If
// another caller holds it, claim returns errNextLane when either of the
// two is multi (a permit or a reader's grant); otherwise it waits for it to
// finish, or with wait=false fails at once with a *LockedError (ErrLocked)
// that says so. It returns the release func and a func that records the
// grant's token.
func (s *session) claim(ctx context.Context, name string, wait, multi bool) (unclaim func(), granted func(uint64), err error) {
	for {
		s.mu.Lock()
		busy, taken := s.names[name]
		if taken && (multi || busy.multi) {
			s.mu.Unlock()
			return nil, nil, errNextLane
		}
		if !taken {
			mine := &localClaim{done: make(chan struct{}), multi: multi}
			s.names[name] = mine
			s.mu.Unlock()
			unclaim = sync.OnceFunc(func() { // a Relock's new grant shares it with the old
				s.mu.Lock()
				if s.names[name] == mine {
					delete(s.names, name)
				}
				s.mu.Unlock()
				close(mine.done)
			})
			granted = func(tok uint64) {
				s.mu.Lock()
				mine.token = tok
				s.mu.Unlock()
			}
			return unclaim, granted, nil
		}
		tok := busy.token
		s.mu.Unlock()
		if !wait {
			return nil, nil, &LockedError{Name: name, HolderLease: s.number, HolderOwner: s.c.opts.owner, Token: tok, Local: true}
		}
		select {
		case <-busy.done:
		case <-s.ended:
			return nil, nil, s.endErr()
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/fencing"
)

// An election is a lock and the fenced key of the same name: the lock's
// holder leads, its grant's token is the term, and the leader's value (an
// address, say) is the key's value written with that token. Nothing else
// is stored, so no fsm command is needed (docs/design.md, "Elections").
// Writing the value with the term's token makes the value fenced too: a
// deposed leader's Proclaim is refused, because its successor wrote (or
// will write) the key with a larger token.
//
// Leadership is announced in two steps (the grant, then the value), so for
// one commit a new leader holds the lock without a value; Leader and
// Observe report a leader only once its value is written.

// Leadership is this caller's term as the leader of an election (see
// Campaign). Like a Lease, it can end at any moment without the leader
// doing anything: pass Token to every write, stop when Done closes. It is
// safe for concurrent use.
type Leadership struct {
	lease *Lease

	mu    sync.Mutex
	value string // guarded by mu; the value last proclaimed
}

// Leader is an election's leader as the cluster sees it.
type Leader struct {
	Name  string // the election
	Value string // what the leader proclaimed (Campaign, Proclaim)
	Token uint64 // the leader's fencing token: its term, larger for every later leader
	Lease uint64 // the public number of the leader's lease
	Owner string // that lease's owner label
}

// Campaign waits until this caller leads the election name (in FIFO order
// with the other candidates), then proclaims value: it writes it to the
// election's fenced key with the term's token, so Leader and Observe show
// it. It returns when the value is written, or when ctx ends (the lock is
// then given back; if the value's write may have landed, the error matches
// ErrIndeterminate). The options are Lock's (WithTTL, WithLockDelay, ...).
//
// The election's name is a lock name and a fenced key (Client.Put); write
// that key only through Campaign and Proclaim.
func (c *Client) Campaign(ctx context.Context, name, value string, opts ...Option) (*Leadership, error) {
	if len(value) > maxValueLen { // refused before it waits in line for a grant it could not use
		return nil, fmt.Errorf("fence: campaign %q: %w: value is %d bytes; the limit is %d", name, ErrInvalid, len(value), maxValueLen)
	}
	l, err := c.Lock(ctx, name, opts...)
	if err != nil {
		return nil, fmt.Errorf("fence: campaign %q: %w", name, err)
	}
	ld := &Leadership{lease: l}
	if err := ld.Proclaim(ctx, value); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = l.Release(rctx) // best effort: the grant without a value helps nobody
		return nil, fmt.Errorf("fence: campaign %q: won the lock (token %d) but could not write the value: %w", name, l.Token(), err)
	}
	return ld, nil
}

// maxValueLen is the largest value the server stores (its fsm.MaxValueLen,
// which package client may not import; TestMaxValueLen keeps them equal).
const maxValueLen = 1 << 20

// Name returns the election's name.
func (ld *Leadership) Name() string { return ld.lease.Name() }

// Token returns the fencing token of this term: larger than every earlier
// leader's. Pass it to every write the leader makes.
func (ld *Leadership) Token() uint64 { return ld.lease.Token() }

// Value returns the value last proclaimed.
func (ld *Leadership) Value() string {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.value
}

// Lease returns the lock grant behind this leadership (its SignedToken,
// Deadline, LeaseNumber, Context).
func (ld *Leadership) Lease() *Lease { return ld.lease }

// Done is closed when the leadership can no longer be trusted (see Err).
func (ld *Leadership) Done() <-chan struct{} { return ld.lease.Done() }

// Err returns nil while this caller leads, else why it stopped (as
// Lease.Err: ErrReleased after Resign, ErrExpired, ErrRevoked, ErrClosed).
func (ld *Leadership) Err() error { return ld.lease.Err() }

// Jeopardy returns the last renewal error while renewals are failing but
// the leadership has not ended yet (see Lease.Jeopardy).
func (ld *Leadership) Jeopardy() error { return ld.lease.Jeopardy() }

// Proclaim changes the leader's value without an election. It is a fenced
// write with this term's token: once a newer leader has written its value
// (Campaign writes it as soon as it wins), it is refused with an error
// matching ErrDeposed (and fencing.ErrStale) and changes nothing. In the
// moment between a newer leader's grant and its write, a Proclaim still
// passes — and is overwritten by that write: success does not prove this
// caller still leads (Done and Err say that). An error matching
// ErrIndeterminate means the value may have been written (with ErrDeposed
// too: an attempt whose answer was lost may have written it before the
// newer leader's write refused the retry). Like every Put it is not
// remembered: a late duplicate of an earlier Proclaim of the same term can
// arrive after a later one; proclaim from one goroutine and put a version
// in the value if the order matters.
func (ld *Leadership) Proclaim(ctx context.Context, value string) error {
	if err := ld.Err(); err != nil {
		return fmt.Errorf("fence: proclaim in %q: %w", ld.Name(), err)
	}
	c := ld.lease.s.c
	err := c.Put(ctx, ld.Name(), []byte(value), ld.Token())
	var stale *fencing.StaleError
	if errors.As(err, &stale) {
		return fmt.Errorf("%w: election %q has a leader with token %d (this one's is %d): %w", ErrDeposed, ld.Name(), stale.Highest, ld.Token(), err)
	}
	if outcomeUnknown(err) && !errors.Is(err, ErrIndeterminate) {
		return fmt.Errorf("%w: %w", ErrIndeterminate, err) // the value may have been written
	}
	if err != nil {
		return err
	}
	ld.mu.Lock()
	ld.value = value
	ld.mu.Unlock()
	return nil
}

// Resign gives the leadership up (Lease.Release): the next candidate leads
// at once. The value stays written under the old token, so Leader reports
// no leader until the next one proclaims.
func (ld *Leadership) Resign(ctx context.Context) error { return ld.lease.Release(ctx) }

// Leader returns the current leader of the election name. With no leader,
// or a new one that has not written its value yet, the error matches
// ErrNoLeader.
//
// It reads the lock, the value, and the lock again: when both reads of the
// lock show the same grant, that grant held the lock throughout (a token
// is never granted twice), so the answer was true at the moment the value
// was read — what it returns held at one instant, never a mix of two.
func (c *Client) Leader(ctx context.Context, name string) (Leader, error) {
	for {
		before, err := c.Status(ctx, name)
		if err != nil {
			return Leader{}, err
		}
		if !before.Held() {
			return Leader{}, fmt.Errorf("%w: election %q: nobody holds its lock", ErrNoLeader, name)
		}
		value, token, err := c.Get(ctx, name)
		switch {
		case status.Code(err) == codes.NotFound:
			token = 0
		case err != nil:
			return Leader{}, err
		}
		after, err := c.Status(ctx, name)
		if err != nil {
			return Leader{}, err
		}
		if after.Token != before.Token || !after.Held() {
			continue // the lock changed hands while we read: read again
		}
		switch {
		case token == before.Token:
			return Leader{Name: name, Value: string(value), Token: token, Lease: before.HolderLease, Owner: before.HolderOwner}, nil
		case token < before.Token:
			return Leader{}, fmt.Errorf("%w: election %q: lease #%d (%s) won it with token %d and has not written its value yet",
				ErrNoLeader, name, before.HolderLease, before.HolderOwner, before.Token)
		}
		return Leader{}, fmt.Errorf("%w: election %q: its key was written with token %d, which is not its lock's (%d): write an election's key only through Campaign and Proclaim",
			ErrNoLeader, name, token, before.Token)
	}
}

// Observation follows an election's leaders (see Client.Observe).
type Observation struct {
	leaders chan Leader
	cancel  context.CancelFunc
	done    chan struct{}

	mu  sync.Mutex
	err error // guarded by mu
}

// Observe follows the leaders of the election name: Leaders delivers the
// current leader (if there is one) and then each new leader and each new
// value, in order; the token of what it delivers never goes down, so an
// observer never sees an older term after a newer one. Each value is read
// when the watch reports it written, so a leader or value that was already
// replaced by then is skipped (the observer lags, it never goes back). It
// delivers only leaders that have written their value, and not the moments
// without a leader (Leader tells whether there is one now). It follows the election
// across member failures as a Watch does; Leaders closes when ctx ends, on
// Close, or on an error resuming cannot mend (Err says which).
func (c *Client) Observe(ctx context.Context, name string) (*Observation, error) {
	ctx, cancel := context.WithCancel(ctx)
	o := &Observation{leaders: make(chan Leader, 16), cancel: cancel, done: make(chan struct{})}
	st, w, err := c.startObserving(ctx, name)
	if err != nil {
		cancel()
		return nil, err
	}
	go o.run(ctx, c, name, st, w)
	return o, nil
}

// Leaders delivers the leaders; it is closed when the observer ends (see Err).
func (o *Observation) Leaders() <-chan Leader { return o.leaders }

// Err says why Leaders closed: nil while it runs.
func (o *Observation) Err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// Close ends the observer; Leaders closes soon after.
func (o *Observation) Close() {
	o.cancel()
	<-o.done
}

// observed is what an observer knows of its election.
type observed struct {
	grant   Leader // the current grant (Token 0: none); Value unused
	last    Leader // the last leader delivered (Token 0: none yet)
	pending bool   // the grant's value may be newer than last: read it
}

// startObserving reads the election's lock and starts a watch right after
// the state it read, so no later change is missed.
func (c *Client) startObserving(ctx context.Context, name string) (observed, *Watch, error) {
	info, err := c.Status(ctx, name)
	if err != nil {
		return observed{}, nil, fmt.Errorf("fence: observe %q: %w", name, err)
	}
	var st observed
	if info.Held() {
		st.grant = Leader{Name: name, Token: info.Token, Lease: info.HolderLease, Owner: info.HolderOwner}
		st.pending = true
	}
	w, err := c.Watch(ctx, name, WatchFrom(info.Index+1))
	if err != nil {
		return observed{}, nil, fmt.Errorf("fence: observe %q: %w", name, err)
	}
	return st, w, nil
}

// run applies the watch's events to what the observer knows, reading the
// value whenever the current grant may have written a new one. The value is
// read (linearizably) rather than taken from the event, so a later read
// never returns an older value than an earlier one.
func (o *Observation) run(ctx context.Context, c *Client, name string, st observed, w *Watch) {
	defer close(o.done)
	defer close(o.leaders)
	var err error
	for err == nil {
		if st.pending {
			if err = o.readValue(ctx, c, name, &st); err != nil {
				break
			}
		}
		select {
		case e, ok := <-w.Events():
			if !ok {
				err = w.Err()
				// Fell behind: read the state again and watch from there —
				// again if the history moved past that read meanwhile.
				for errors.Is(err, ErrCompacted) {
					var (
						again observed
						w2    *Watch
					)
					if again, w2, err = c.startObserving(ctx, name); err == nil {
						again.last, st, w = st.last, again, w2
					}
				}
				continue
			}
			switch {
			case e.Type == Granted:
				st.grant, st.pending = Leader{Name: name, Token: e.Token, Lease: e.Lease, Owner: e.Owner}, false
			case e.Type == Released && e.Token == st.grant.Token:
				st.grant, st.pending = Leader{}, false
			case e.Type == Written && e.Token == st.grant.Token && e.Token != 0:
				st.pending = true
			}
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	w.Close()
	o.mu.Lock()
	o.err = fmt.Errorf("fence: observe %q: %w", name, err)
	o.mu.Unlock()
}

// readValue reads the election's value and delivers the current grant's
// leader if the value is its own and newer than the last delivered.
func (o *Observation) readValue(ctx context.Context, c *Client, name string, st *observed) error {
	value, token, err := c.Get(ctx, name)
	if status.Code(err) == codes.NotFound {
		st.pending = false
		return nil
	}
	if err != nil {
		return err
	}
	st.pending = false
	if token != st.grant.Token || token < st.last.Token || (token == st.last.Token && string(value) == st.last.Value) {
		return nil // another grant's value (the watch will bring that grant), or nothing new
	}
	l := st.grant
	l.Value = string(value)
	select {
	case o.leaders <- l:
		st.last = l
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

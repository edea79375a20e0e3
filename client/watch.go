package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencehq/fence/api"
)

// EventType says what happened to a watched lock.
type EventType int

// Event types.
const (
	// Granted: the lock was granted to Lease (Owner) with Token.
	Granted EventType = iota + 1
	// Released: the grant with Token ended (Cause says why: released,
	// expired, revoked, force-released). The next waiter's Granted, if any,
	// follows at the same Index, unless a lock-delay starts.
	Released
	// WaiterJoined: Lease (Owner) joined the lock's queue.
	WaiterJoined
	// WaiterLeft: Lease (Owner) left the queue without the lock (Cause:
	// cancelled, expired or revoked).
	WaiterLeft
	// LockDelayStarted: the holder's lease (Token) expired; the lock stays
	// free for LockDelay.
	LockDelayStarted
	// LockDelayEnded: the lock-delay after Token ended.
	LockDelayEnded
	// Written: the fenced key of the same name was written (Client.Put)
	// with Token; Value is what it holds now. An election keeps its
	// leader's value this way (see Campaign).
	Written
)

var eventTypeNames = map[EventType]string{Granted: "granted", Released: "released", WaiterJoined: "waiter-joined",
	WaiterLeft: "waiter-left", LockDelayStarted: "lock-delay-started", LockDelayEnded: "lock-delay-ended",
	Written: "written"}

func (t EventType) String() string {
	if s, ok := eventTypeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("event(%d)", int(t))
}

// Cause says why a grant or a wait ended.
type Cause int

// Causes.
const (
	CauseReleased      Cause = iota + 1 // the holder released the lock
	CauseExpired                        // the lease expired
	CauseRevoked                        // the lease was revoked (or its Client closed)
	CauseForceReleased                  // an admin force-released the grant
	CauseCancelled                      // the waiting call was cancelled
)

var causeNames = map[Cause]string{CauseReleased: "released", CauseExpired: "expired", CauseRevoked: "revoked",
	CauseForceReleased: "force-released", CauseCancelled: "cancelled"}

func (c Cause) String() string {
	if s, ok := causeNames[c]; ok {
		return s
	}
	if c == 0 {
		return ""
	}
	return fmt.Sprintf("cause(%d)", int(c))
}

// LockEvent is one change of a watched lock.
type LockEvent struct {
	// Index is the raft index the change was applied at: events at one
	// index happened at once (a release and the next grant).
	Index     uint64
	Type      EventType
	Name      string
	Lease     uint64 // the public number of the lease granted, released or waiting
	Owner     string // that lease's owner label
	Token     uint64 // the grant's token (Granted, Released, LockDelay*); the write's (Written)
	Cause     Cause  // Released, WaiterLeft
	LockDelay time.Duration
	Value     []byte // Written
	// Slot and Shared: the grant's permit of a semaphore (0…n−1; 0 for a
	// mutex) and whether it is a reader's (Granted, Released, LockDelayStarted).
	Slot   int
	Shared bool
}

// WatchOption changes a Watch.
type WatchOption func(*watchOptions)

type watchOptions struct {
	prefix bool
	from   uint64
}

// WatchPrefix makes the name a prefix: every lock whose name starts with it
// is watched ("" watches every lock).
func WatchPrefix() WatchOption { return func(o *watchOptions) { o.prefix = true } }

// WatchFrom starts the watch at a raft index: the events applied there and
// after (the Index of a List or Status + 1 misses nothing after it). Without
// it, the watch starts with the next change.
func WatchFrom(index uint64) WatchOption { return func(o *watchOptions) { o.from = index } }

// Watch follows a lock name (or, with WatchPrefix, every lock under a
// prefix) and delivers its changes on Events, in the order they happened,
// with the writes of the fenced key of the same name (Put).
// Any member serves a watch; when its member fails or is cut off, the
// watch moves to the next one and resumes from the index after the last it
// saw, so no event is lost or repeated. Events closes when ctx ends, when
// the watch is closed, or on an error that resuming cannot mend; Err then
// says which. An error matching ErrCompacted means no member keeps the
// events from that index (each was asked): List again and watch from its
// Index+1.
func (c *Client) Watch(ctx context.Context, name string, opts ...WatchOption) (*Watch, error) {
	var o watchOptions
	for _, opt := range opts {
		opt(&o)
	}
	if name == "" && !o.prefix {
		return nil, fmt.Errorf("%w: watch: empty lock name (a prefix watch of \"\" watches every lock: WatchPrefix, fence watch --prefix '')", ErrInvalid)
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &Watch{c: c, cancel: cancel, events: make(chan LockEvent, 256), done: make(chan struct{}),
		req: &api.WatchRequest{Name: name, Prefix: o.prefix}}
	if o.from > 0 {
		w.last, w.placed = o.from-1, true
	}
	started := make(chan error, 1)
	go w.run(ctx, started)
	select {
	case err := <-started:
		if err != nil {
			cancel()
			<-w.done
			return nil, err
		}
		return w, nil
	case <-ctx.Done():
		<-w.done
		return nil, fmt.Errorf("fence: watch %q: %w", name, ctx.Err())
	}
}

// Watch is a running watch (see Client.Watch).
type Watch struct {
	c      *Client
	req    *api.WatchRequest
	cancel context.CancelFunc
	events chan LockEvent
	done   chan struct{}

	mu     sync.Mutex
	last   uint64 // the last index looked at: the watch resumes after it
	placed bool   // last is set (a member answered, or WatchFrom): resume after it even if it is 0
	err    error
}

// Events delivers the changes; it is closed when the watch ends (see Err).
func (w *Watch) Events() <-chan LockEvent { return w.events }

// Err says why Events closed: nil while it runs, the context's error after
// Close or when ctx ended, else what ended it.
func (w *Watch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Index returns the last raft index whose events the watch has delivered
// in full (or looked at: progress): a new watch from Index()+1 continues
// where this one is. Events of one index are delivered one by one, so a
// watch closed in the middle of an index's events (a release and the next
// grant) has Index() before it, and a new watch from there delivers that
// index's events again: skip those whose Index you have already handled.
func (w *Watch) Index() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// Close ends the watch; Events closes soon after.
func (w *Watch) Close() {
	w.cancel()
	<-w.done
}

// run keeps one stream open at a time, resuming after the last index seen,
// until ctx ends or an error that moving on cannot mend.
func (w *Watch) run(ctx context.Context, started chan<- error) {
	defer close(w.done)
	defer close(w.events)
	first := true
	compacted := 0 // members in a row that keep no events from the index asked
	err := w.c.retry(ctx, func(ctx context.Context) error {
		if w.c.isClosed() { // its connections are closed: every stream would fail at once, forever
			return ErrClosed
		}
		answered := false
		err := w.stream(ctx, func() {
			answered = true
			if first {
				first = false
				started <- nil
			}
		})
		if answered {
			compacted = 0
		}
		if errors.Is(err, io.EOF) {
			// The member ended the stream without a status: move on.
			return status.Error(codes.Unavailable, "the member ended the watch")
		}
		if status.Code(err) == codes.FailedPrecondition {
			// This member no longer keeps the index (it restarted from a
			// snapshot since, say); another may: ErrCompacted only when none does.
			if compacted++; compacted < len(w.c.members()) {
				return status.Error(codes.Unavailable, status.Convert(err).Message())
			}
		}
		return err
	})
	if status.Code(err) == codes.FailedPrecondition {
		err = fmt.Errorf("%w: %w", ErrCompacted, err)
	}
	err = fmt.Errorf("fence: watch %q: %w", w.req.GetName(), err)
	w.mu.Lock()
	w.err = err
	w.mu.Unlock()
	if first {
		started <- err
	}
}

// maxWatchMessage bounds one Watch message: the events of one raft entry,
// whose fenced writes alone may carry over 4 MiB of values (the leader packs
// about 4 MiB of commands into an entry, values up to 1 MiB each), above
// gRPC's default 4 MiB. An entry never exceeds the 64 MiB the raft
// transport sends, nor do the values written in it.
const maxWatchMessage = 64 << 20

// stream runs one Watch stream from the index after the last seen; opened
// is called once the member has answered.
func (w *Watch) stream(ctx context.Context, opened func()) error {
	req := &api.WatchRequest{Name: w.req.GetName(), Prefix: w.req.GetPrefix()}
	w.mu.Lock()
	if w.placed {
		req.FromIndex = w.last + 1
	}
	w.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := w.c.leader().Watch(ctx, req, grpc.MaxCallRecvMsgSize(maxWatchMessage))
	if err != nil {
		return err
	}
	for {
		r, err := s.Recv()
		if err != nil {
			return err
		}
		opened()
		for _, e := range r.GetEvents() {
			select {
			case w.events <- watchEvent(r.GetIndex(), e):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		w.mu.Lock()
		w.last, w.placed = r.GetIndex(), true
		w.mu.Unlock()
	}
}

func watchEvent(index uint64, e *api.LockEvent) LockEvent {
	return LockEvent{Index: index, Type: EventType(e.GetType()), Name: e.GetName(), Lease: e.GetLeaseNumber(), Owner: e.GetOwner(),
		Token: e.GetToken(), Cause: Cause(e.GetCause()), LockDelay: e.GetLockDelay().AsDuration(), Value: e.GetValue(),
		Slot: int(e.GetSlot()), Shared: e.GetShared()}
}

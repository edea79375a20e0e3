package server

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/policy"
	"github.com/fencehq/fence/internal/watch"
)

// watchProgressEvery is how long a Watch goes without events before it
// sends a progress mark (when entries were applied meanwhile).
const watchProgressEvery = time.Second

// Watch streams the lock events this node applies (see the proto). Any
// member serves it, from its own history of applied entries.
func (v *service) Watch(r *api.WatchRequest, stream api.FenceService_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	go func() { // a closing server ends its watches at once: they hold GracefulStop up
		select {
		case <-v.s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	if r.GetName() != "" || !r.GetPrefix() {
		what := "lock name"
		if r.GetPrefix() {
			what = "prefix"
		}
		if err := name(what, r.GetName()); err != nil {
			return err
		}
	}
	// Under a policy, a watch of one lock needs the read right on it; a
	// prefix watch reports only the names the caller may read (judged
	// again at every event: a policy reload applies at once).
	visible := func(string) bool { return true }
	if c := callerOf(ctx); v.s.policy.Load() != nil && !c.admin {
		visible = func(name string) bool {
			p := v.s.policy.Load()
			return p == nil || p.Allows(c.identity, policy.Read, name)
		}
		if !r.GetPrefix() && !visible(r.GetName()) {
			return v.s.refused(ctx, api.FenceService_Watch_FullMethodName, c.identity, status.Errorf(codes.PermissionDenied,
				"Watch %q: identity %q has no read right on it", r.GetName(), c.identity))
		}
	}
	w, err := v.s.node.Watch(r.GetName(), r.GetPrefix(), r.GetFromIndex())
	if err == nil { // the start: where a client resumes if the stream breaks before any event
		err = stream.Send(&api.WatchResponse{Index: w.From() - 1})
	}
	for err == nil {
		var b watch.Batch
		if b, err = w.Next(ctx, watchProgressEvery); err != nil {
			break
		}
		resp := &api.WatchResponse{Index: b.Index}
		for _, e := range b.Events {
			if visible(e.Name) {
				resp.Events = append(resp.Events, lockEvent(e))
			}
		}
		if len(b.Events) > 0 && len(resp.Events) == 0 {
			continue // nothing the caller may see: no message (its next progress mark moves on)
		}
		err = stream.Send(resp)
	}
	select {
	case <-v.s.closing:
		if stream.Context().Err() == nil {
			return status.Error(codes.Unavailable, "this member is shutting down: watch again on another member")
		}
	default:
	}
	return watchErr(err)
}

// watchErr is the status a Watch ends with.
func watchErr(err error) error {
	var ce *watch.CompactedError
	if errors.As(err, &ce) {
		return withDetail(status.New(codes.FailedPrecondition, ce.Error()),
			&api.WatchCompacted{FromIndex: ce.From, OldestIndex: ce.Oldest})
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.FromContextError(err).Err()
}

var eventTypes = map[fsm.EventKind]api.LockEvent_Type{
	fsm.Granted: api.LockEvent_TYPE_GRANTED, fsm.Released: api.LockEvent_TYPE_RELEASED,
	fsm.WaitStarted: api.LockEvent_TYPE_WAITER_JOINED, fsm.WaitCancelled: api.LockEvent_TYPE_WAITER_LEFT,
	fsm.WaitEnded: api.LockEvent_TYPE_WAITER_LEFT, fsm.DelayStarted: api.LockEvent_TYPE_LOCK_DELAY_STARTED,
	fsm.DelayEnded: api.LockEvent_TYPE_LOCK_DELAY_ENDED, fsm.Written: api.LockEvent_TYPE_WRITTEN,
}

var eventCauses = map[fsm.Cause]api.LockEvent_Cause{
	fsm.CauseReleased: api.LockEvent_CAUSE_RELEASED, fsm.CauseExpired: api.LockEvent_CAUSE_EXPIRED,
	fsm.CauseRevoked: api.LockEvent_CAUSE_REVOKED, fsm.CauseForced: api.LockEvent_CAUSE_FORCE_RELEASED,
}

// lockEvent is the API's form of a lock event.
func lockEvent(e fsm.Event) *api.LockEvent {
	le := &api.LockEvent{Type: eventTypes[e.Kind], Name: e.Name, LeaseNumber: e.Number, Owner: e.Owner, Token: e.Token,
		Cause: eventCauses[e.Cause], Slot: e.Slot, Shared: e.Shared}
	if e.Kind == fsm.WaitCancelled {
		le.Cause = api.LockEvent_CAUSE_CANCELLED
	}
	if e.Kind == fsm.DelayStarted {
		le.LockDelay = durationpb.New(e.Delay)
	}
	le.Value = e.Value
	return le
}

// maxWatchHistory bounds --watch-history: about 1 GB of events.
const maxWatchHistory = 10_000_000

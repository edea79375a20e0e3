package client

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
)

// callStream is one Session stream of a session to one member: each
// Acquire and Release goes out as a SessionRequest with a call id of this
// stream, and its answer comes back under that id. A call whose context
// ends sends a cancel for its id (the server withdraws it, as a cancelled
// unary call). When the stream breaks, every call on it fails with the
// stream's error (UNAVAILABLE, say) and is retried, on a new stream, with
// its request id: the server answers the first outcome. When the session's
// calls move on to another member, the stream is retired: its calls still
// running (an Acquire waiting in the queue) go on, and it closes when the
// last is answered, as waiting unary calls keep their place.
type callStream struct {
	member int32 // index of the member it goes to
	st     api.FenceService_SessionClient
	cancel context.CancelFunc
	done   chan struct{} // closed when the stream has ended

	sendMu sync.Mutex // serialises Send

	mu      sync.Mutex
	next    uint64                               // guarded by mu; the last call id given
	waiting map[uint64]chan *api.SessionResponse // guarded by mu; calls without an answer
	err     error                                // guarded by mu; why the stream ended, once done
	retired bool                                 // guarded by mu; the session opened another: close when no call waits
}

// errUseUnary: the member has no Session rpc (an older fence): the call
// goes as a unary call instead.
var errUseUnary = errors.New("fence: the server has no Session stream")

// onStream runs one call (req without its call id) on s's Session stream,
// or returns errUseUnary when the unary call must be used: the server is
// older than the Session rpc, or s has ended (its last calls, giving a
// grant back, go out as unary calls).
func (s *session) onStream(ctx context.Context, req *api.SessionRequest) (*api.SessionResponse, error) {
	cs, err := s.sessionStream()
	if err != nil {
		return nil, err
	}
	return s.onCallStream(ctx, cs, req)
}

// onCallStream runs req on cs, as onStream. The end of the stream is no
// refusal of the call: unless the stream was refused as it opened (no call
// on it ran), a call it ended has an unknown outcome (UNKNOWN if the
// stream's status would read as a refusal), which the caller settles.
func (s *session) onCallStream(ctx context.Context, cs *callStream, req *api.SessionRequest) (*api.SessionResponse, error) {
	resp, err := cs.call(ctx, req)
	if !errors.Is(err, errStreamEnded) {
		return resp, err
	}
	s.dropStream(cs)
	switch status.Code(err) {
	case codes.Unimplemented: // a server answers it at the stream's first message
		s.c.noSession(cs.member)
		return nil, errUseUnary
	case codes.Unauthenticated, codes.PermissionDenied: // the stream's own refusal, before any call
		return nil, err
	}
	if !outcomeUnknown(err) {
		return nil, status.Errorf(codes.Unknown, "the Session stream ended (%s: %s): the call's outcome is unknown", status.Code(err), status.Convert(err).Message())
	}
	return nil, err
}

// sessionStream returns the session's stream as callStream does, or
// errUseUnary (the server is older than it, or s has ended).
func (s *session) sessionStream() (*callStream, error) {
	idx := s.c.cur.Load()
	if !s.c.hasSession(idx) {
		return nil, errUseUnary
	}
	cs, err := s.callStream(idx)
	if status.Code(err) == codes.Unimplemented {
		s.c.noSession(idx)
		return nil, errUseUnary
	}
	return cs, err
}

// renewOnSession makes the session's stream carry its renewals: each is a
// call of its own, answered into the renewStream's channels.
func (s *session) renewOnSession(ctx context.Context) (*renewStream, error) {
	cs, err := s.sessionStream()
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	rs := &renewStream{member: cs.member, resps: make(chan *api.KeepAliveResponse, 4), errs: make(chan error, 1), cancel: cancel, moved: cs.isRetired}
	rs.send = func(req *api.KeepAliveRequest) error {
		go func() {
			r, err := s.onCallStream(sctx, cs, &api.SessionRequest{Call: &api.SessionRequest_KeepAlive{KeepAlive: req}})
			if err != nil {
				select { // the renewal loop takes one error, then drops rs
				case rs.errs <- err:
				default:
				}
				return
			}
			select {
			case rs.resps <- r.GetKeepAlive():
			case <-sctx.Done():
			}
		}()
		return nil
	}
	return rs, nil
}

// callStream returns the session's stream to member idx (where calls go now),
// opening it if need be (and retiring one to another member).
func (s *session) callStream(idx int32) (*callStream, error) {
	s.streamMu.Lock()
	defer s.streamMu.Unlock()
	if cs := s.stream; cs != nil {
		select {
		case <-cs.done:
		default:
			if cs.member == idx {
				return cs, nil
			}
		}
		cs.retire()
	}
	if s.life.Err() != nil {
		return nil, errUseUnary
	}
	sctx, cancel := context.WithCancel(s.life)
	st, err := s.c.memberAt(idx).api.Session(sctx)
	if err != nil {
		cancel()
		return nil, err
	}
	cs := &callStream{member: idx, st: st, cancel: cancel, done: make(chan struct{}), waiting: map[uint64]chan *api.SessionResponse{}}
	go cs.read()
	s.stream = cs
	return cs, nil
}

// dropStream forgets cs once it has ended.
func (s *session) dropStream(cs *callStream) {
	s.streamMu.Lock()
	defer s.streamMu.Unlock()
	if s.stream == cs {
		s.stream = nil
	}
}

// errStreamEnded marks a call's failure as the end of its stream (not a
// refusal of the call).
var errStreamEnded = errors.New("session stream ended")

// read hands each answer to its call until the stream ends.
func (cs *callStream) read() {
	for {
		r, err := cs.st.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = status.Error(codes.Unavailable, "the server ended the session stream")
			}
			cs.mu.Lock()
			cs.err = err
			cs.mu.Unlock()
			close(cs.done)
			cs.cancel()
			return
		}
		ch := cs.take(r.CallId)
		if ch != nil { // else: a call that gave up (cancelled) was answered still
			ch <- r
		}
	}
}

// take removes call id from the calls waiting for an answer and returns
// its channel (nil: it is not waiting); a retired stream closes when no
// call waits.
func (cs *callStream) take(id uint64) chan *api.SessionResponse {
	cs.mu.Lock()
	ch := cs.waiting[id]
	delete(cs.waiting, id)
	idle := cs.retired && len(cs.waiting) == 0
	cs.mu.Unlock()
	if idle {
		cs.cancel()
	}
	return ch
}

// isRetired reports whether the session's calls moved on from cs.
func (cs *callStream) isRetired() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.retired
}

// retire closes cs once no call waits on it (now, if none does).
func (cs *callStream) retire() {
	cs.mu.Lock()
	cs.retired = true
	idle := len(cs.waiting) == 0
	cs.mu.Unlock()
	if idle {
		cs.cancel()
	}
}

// call sends req under a new call id, with ctx's deadline as its timeout
// and its span's trace context,
// and waits for its answer. A refusal is returned as the status the unary
// call gives; the end of the stream as its status, wrapping errStreamEnded.
func (cs *callStream) call(ctx context.Context, req *api.SessionRequest) (*api.SessionResponse, error) {
	ch := make(chan *api.SessionResponse, 1)
	cs.mu.Lock()
	cs.next++
	id := cs.next
	cs.waiting[id] = ch
	cs.mu.Unlock()
	out := &api.SessionRequest{CallId: id, Call: req.Call, Traceparent: traceparent(ctx)}
	if d, ok := ctx.Deadline(); ok {
		out.Timeout = durationpb.New(max(time.Until(d), time.Millisecond)) // Go's clock, as context deadlines are: the grpc-timeout a unary call would send
	}
	if err := cs.send(out); err != nil {
		cs.take(id)
		return nil, cs.ended()
	}
	select {
	case r := <-ch:
		if e, ok := r.Result.(*api.SessionResponse_Error); ok {
			var st spb.Status
			if err := proto.Unmarshal(e.Error, &st); err != nil {
				return nil, status.Errorf(codes.Internal, "the server's refusal does not decode: %v", err)
			}
			return nil, status.FromProto(&st).Err()
		}
		return r, nil
	case <-cs.done:
		return nil, cs.ended()
	case <-ctx.Done():
		cs.take(id)
		_ = cs.send(&api.SessionRequest{CallId: id, Call: &api.SessionRequest_Cancel{Cancel: &api.SessionCancel{}}})
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

func (cs *callStream) send(req *api.SessionRequest) error {
	cs.sendMu.Lock()
	defer cs.sendMu.Unlock()
	return cs.st.Send(req)
}

// ended waits for the stream's end and returns its status, wrapping
// errStreamEnded.
func (cs *callStream) ended() error {
	<-cs.done
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return &streamEnd{st: status.Convert(cs.err)}
}

// streamEnd is the end of a Session stream as a call's error: its status
// (for the retry's codes), and errStreamEnded.
type streamEnd struct{ st *status.Status }

func (e *streamEnd) Error() string              { return e.st.Err().Error() }
func (e *streamEnd) GRPCStatus() *status.Status { return e.st }
func (e *streamEnd) Unwrap() error              { return errStreamEnded }

// traceparent is the W3C trace context of ctx's span ("" without one), as
// a unary call would carry it.
func traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	m := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, m)
	return m["traceparent"]
}

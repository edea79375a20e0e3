package server

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/api"
)

// maxSessionCalls bounds the Acquire and Release calls one Session stream
// runs at once; one more is refused with RESOURCE_EXHAUSTED. Renewals are
// not counted: the KeepAlive handler's backpressure bounds them, and a
// session whose every call waits (a lease may have MaxCallsInFlight) must
// still renew.
const maxSessionCalls = 1024

// sessionCall is how a Session stream runs one kind of call: as the unary
// call method, through the unary interceptor (identity, the policy on the
// request's name, the admin rule) and the unary handler run.
type sessionCall struct {
	method string
	run    func(v *service, ctx context.Context, req any) (any, error)
	wrap   func(resp any) *api.SessionResponse
}

var (
	sessionAcquire = sessionCall{api.FenceService_Acquire_FullMethodName,
		func(v *service, ctx context.Context, req any) (any, error) {
			return v.Acquire(ctx, req.(*api.AcquireRequest))
		},
		func(resp any) *api.SessionResponse {
			return &api.SessionResponse{Result: &api.SessionResponse_Acquire{Acquire: resp.(*api.AcquireResponse)}}
		}}
	sessionRelease = sessionCall{api.FenceService_Release_FullMethodName,
		func(v *service, ctx context.Context, req any) (any, error) {
			return v.Release(ctx, req.(*api.ReleaseRequest))
		},
		func(resp any) *api.SessionResponse {
			return &api.SessionResponse{Result: &api.SessionResponse_Release{Release: resp.(*api.ReleaseResponse)}}
		}}
)

// Session serves a Session stream (api/fence/v1/fence.proto): each Acquire
// and Release runs on a goroutine of its own exactly as the unary call
// would (s.unaryAuth, then the handler), with a context of its own that its
// timeout, a cancel message or the end of the stream ends; renewals go to
// a KeepAlive handler fed from the stream (through s.streamAuth, as the
// gateway's renewals), whose end — this node stopped leading, a round did
// not commit — ends the stream. The handler returns once every call has
// ended, so no answer is sent after it.
func (v *service) Session(stream api.FenceService_SessionServer) error {
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	ss := &sessionStream{v: v, stream: stream, ctx: ctx, fail: cancel, running: map[uint64]context.CancelFunc{},
		renewIn: make(chan *api.KeepAliveRequest, 64), unsent: make(chan struct{}, maxSessionCalls), intakeDone: make(chan struct{})}
	ss.calls.Add(1)
	go ss.renewals()
	go ss.intake()
	select {
	case <-ss.intakeDone: // half-closed: answer every call received
	case <-ctx.Done():
	}
	ss.mu.Lock()
	ss.stopped = true // the intake starts no call after this
	ss.mu.Unlock()
	ss.calls.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if err := stream.Context().Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	return nil
}

// sessionStream is one Session stream's state, shared by its intake, its
// calls and its renewals.
type sessionStream struct {
	v      *service
	stream api.FenceService_SessionServer
	ctx    context.Context // ends with the stream, or at fail
	fail   context.CancelCauseFunc
	calls  sync.WaitGroup // the running calls, and the renewals' handler

	sendMu sync.Mutex // serialises Send

	renewIn    chan *api.KeepAliveRequest // to the KeepAlive handler; closed at the half-close
	unsent     chan struct{}              // a token per started call whose answer is not sent yet: at most maxSessionCalls
	intakeDone chan struct{}              // closed when the intake has read the last request

	mu      sync.Mutex
	running map[uint64]context.CancelFunc // guarded by mu; running calls by call id (renewals: nil)
	calling int                           // guarded by mu; the Acquire and Release calls in running
	renewal []uint64                      // guarded by mu; call ids of the renewals sent to the handler, in order
	stopped bool                          // guarded by mu; the handler is returning: no new call
}

// intake reads the stream's requests and starts a call for each.
func (ss *sessionStream) intake() {
	defer close(ss.intakeDone)
	for {
		req, err := ss.stream.Recv()
		if errors.Is(err, io.EOF) {
			close(ss.renewIn)
			return
		}
		if err != nil {
			ss.fail(err)
			return
		}
		if err := ss.start(req); err != nil {
			ss.fail(err)
			return
		}
	}
}

// start starts the call req carries (or cancels one). An error is a
// request that breaks the stream's rules: it ends the stream.
func (ss *sessionStream) start(req *api.SessionRequest) error {
	id := req.GetCallId()
	if id == 0 {
		return status.Error(grpccodes.InvalidArgument, "session: call_id 0: number the calls from 1")
	}
	if _, ok := req.GetCall().(*api.SessionRequest_Cancel); ok {
		ss.mu.Lock()
		stop := ss.running[id]
		ss.mu.Unlock()
		if stop != nil {
			stop()
		}
		return nil
	}
	call, body, ok, err := ss.admit(id, req)
	if !ok || err != nil {
		return err
	}
	// A slot for the call's answer, before its goroutine starts: while
	// maxSessionCalls answers wait to be sent (the client reads none), the
	// intake waits, so a client that does not read holds no more goroutines.
	select {
	case ss.unsent <- struct{}{}:
	case <-ss.ctx.Done():
		return nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.stopped {
		<-ss.unsent
		return nil
	}
	ctx, cancel := context.WithCancel(ss.ctx)
	if t := req.GetTimeout(); t != nil {
		cancel()
		ctx, cancel = context.WithTimeout(ss.ctx, t.AsDuration())
	}
	ss.running[id] = cancel
	ss.calling++
	ss.calls.Add(1)
	go ss.serve(ctx, id, call, body, req.GetTraceparent())
	return nil
}

// admit checks call req under the stream's rules: ok is an Acquire or a
// Release to start; a renewal is passed on here, a refused call answered
// (ok false). An error breaks the stream's rules: it ends the stream.
func (ss *sessionStream) admit(id uint64, req *api.SessionRequest) (call sessionCall, body any, ok bool, err error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.stopped {
		return call, nil, false, nil
	}
	if _, busy := ss.running[id]; busy {
		return call, nil, false, status.Errorf(grpccodes.InvalidArgument, "session: call_id %d is reused while its call runs: each running call needs an id of its own", id)
	}
	switch c := req.GetCall().(type) {
	case *api.SessionRequest_Acquire:
		call, body = sessionAcquire, c.Acquire
	case *api.SessionRequest_Release:
		call, body = sessionRelease, c.Release
	case *api.SessionRequest_KeepAlive:
		return call, nil, false, ss.renewLocked(id, c.KeepAlive)
	default:
		ss.answerErr(id, invalid("session: call %d carries no call (acquire, release, keep_alive or cancel)", id))
		return call, nil, false, nil
	}
	if ss.fullLocked(id) {
		return call, nil, false, nil
	}
	if t := req.GetTimeout(); t != nil {
		if err := t.CheckValid(); err != nil || t.AsDuration() <= 0 {
			ss.answerErr(id, invalid("session: call %d: timeout %v: give a duration above 0, or none", id, t.AsDuration()))
			return call, nil, false, nil
		}
	}
	return call, body, true, nil
}

// serve runs one call as its unary counterpart and answers it; its span
// (when the server traces) is the child of the trace context parent.
func (ss *sessionStream) serve(ctx context.Context, id uint64, call sessionCall, req any, parent string) {
	defer ss.calls.Done()
	defer func() { <-ss.unsent }() // the answer is sent (or the stream failed)
	ctx = grpc.NewContextWithServerTransportStream(ctx, methodStream(call.method))
	var span trace.Span
	if tp := ss.v.s.cfg.TracerProvider; tp != nil {
		if parent != "" {
			ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": parent})
		}
		ctx, span = tp.Tracer(tracerName).Start(ctx, strings.TrimPrefix(call.method, "/"), trace.WithSpanKind(trace.SpanKindServer))
	}
	resp, err := ss.v.s.unaryAuth(ctx, req, &grpc.UnaryServerInfo{Server: ss.v, FullMethod: call.method},
		func(ctx context.Context, req any) (any, error) { return call.run(ss.v, ctx, req) })
	if span != nil {
		if err != nil {
			span.SetStatus(codes.Error, status.Convert(err).Message())
		}
		span.End()
	}
	ss.mu.Lock()
	ss.running[id]()
	delete(ss.running, id)
	ss.calling--
	ss.mu.Unlock()
	if err != nil {
		ss.answerErr(id, err)
		return
	}
	out := call.wrap(resp)
	out.CallId = id
	ss.send(out)
}

// fullLocked refuses call id if maxSessionCalls run already (ss.mu held).
func (ss *sessionStream) fullLocked(id uint64) bool {
	if ss.calling < maxSessionCalls {
		return false
	}
	ss.answerErr(id, status.Errorf(grpccodes.ResourceExhausted, "session: %d calls run on this stream already; call %d was not executed", maxSessionCalls, id))
	return true
}

// answerErr answers call id with the refusal err.
func (ss *sessionStream) answerErr(id uint64, err error) {
	b, merr := proto.Marshal(status.Convert(err).Proto())
	if merr != nil {
		b, _ = proto.Marshal(status.New(grpccodes.Internal, "encoding the refusal: "+merr.Error()).Proto())
	}
	ss.send(&api.SessionResponse{CallId: id, Result: &api.SessionResponse_Error{Error: b}})
}

// send sends one answer; a failed send ends the stream.
func (ss *sessionStream) send(resp *api.SessionResponse) {
	ss.sendMu.Lock()
	defer ss.sendMu.Unlock()
	if err := ss.stream.Send(resp); err != nil {
		ss.fail(err)
	}
}

// renewLocked passes a renewal to the KeepAlive handler (ss.mu held).
func (ss *sessionStream) renewLocked(id uint64, req *api.KeepAliveRequest) error {
	ss.running[id] = nil
	ss.renewal = append(ss.renewal, id)
	select { // the handler reads at once unless maxRenewalsInFlight are pending
	case ss.renewIn <- req:
		return nil
	default:
	}
	ss.mu.Unlock()
	defer ss.mu.Lock()
	select {
	case ss.renewIn <- req:
	case <-ss.ctx.Done():
	}
	return nil
}

// renewals runs the KeepAlive handler on the stream's renewals until the
// client half-closes (nil) or it fails, which ends the stream.
func (ss *sessionStream) renewals() {
	defer ss.calls.Done()
	info := &grpc.StreamServerInfo{FullMethod: api.FenceService_KeepAlive_FullMethodName, IsClientStream: true, IsServerStream: true}
	pipe := &renewalPipe{ss: ss, ctx: grpc.NewContextWithServerTransportStream(ss.ctx, methodStream(info.FullMethod))}
	if err := ss.v.s.streamAuth(ss.v, pipe, info, keepAliveHandler); err != nil {
		ss.fail(err)
	}
}

// keepAliveHandler is the generated handler of KeepAlive.
var keepAliveHandler = streamHandler("KeepAlive")

// renewalPipe is the KeepAlive stream a Session stream's renewals travel
// on: it reads them from the session's intake and answers each under the
// call id it came with (the handler answers in arrival order).
type renewalPipe struct {
	ss  *sessionStream
	ctx context.Context
}

func (p *renewalPipe) Context() context.Context     { return p.ctx }
func (p *renewalPipe) SetHeader(metadata.MD) error  { return nil }
func (p *renewalPipe) SendHeader(metadata.MD) error { return nil }
func (p *renewalPipe) SetTrailer(metadata.MD)       {}

func (p *renewalPipe) RecvMsg(m any) error {
	select {
	case req, ok := <-p.ss.renewIn:
		if !ok {
			return io.EOF
		}
		proto.Merge(m.(proto.Message), req)
		return nil
	case <-p.ctx.Done():
		return status.FromContextError(p.ctx.Err()).Err()
	}
}

func (p *renewalPipe) SendMsg(m any) error {
	ss := p.ss
	ss.mu.Lock()
	id := ss.renewal[0]
	ss.renewal = ss.renewal[1:]
	delete(ss.running, id)
	ss.mu.Unlock()
	ss.send(&api.SessionResponse{CallId: id, Result: &api.SessionResponse_KeepAlive{KeepAlive: m.(*api.KeepAliveResponse)}})
	return ss.ctx.Err()
}

package server

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	rpccode "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/fsm"
)

// The HTTP/JSON gateway (Config.GatewayAddr) serves the unary calls of
// fence.v1.FenceService as POST /v1/<Call> with the request as the body, in
// the proto's JSON mapping (protojson: field names as in the proto, bytes
// in base64; the body is read as JSON whatever Content-Type says, so a
// plain curl -d works), and one renewal as POST /v1/KeepAlive. It is a small layer of
// our own over the same service rather than grpc-gateway: every call runs
// through the generated handler with the server's own interceptor, so the
// policy, the admin rule and the validation are exactly the gRPC port's,
// with no second connection and no HTTP annotations in the proto. The
// caller's identity comes from the TLS connection and the Authorization
// headers, as on the gRPC port. A refusal is the gRPC status in Google's
// JSON error form: {"error": {"code": <HTTP>, "status": "<gRPC code>",
// "message": …, "details": [{"@type": …, …}]}}.

// gatewayMaxBody bounds a request body: a Put of the largest value, in
// base64 (4 bytes per 3), and room for the rest.
const gatewayMaxBody = (fsm.MaxValueLen+2)/3*4 + 64<<10

// gatewayBodyTimeout bounds the time to send the headers and the body, so
// an unfinished request (read before anyone is judged) cannot hold a
// connection: the gRPC port's 10 s for a handshake.
const gatewayBodyTimeout = 10 * time.Second

// gatewayMaxTimeout bounds ?timeout= (a waiting Acquire's deadline).
const gatewayMaxTimeout = time.Hour

var (
	gatewayOut = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}
	gatewayIn  = protojson.UnmarshalOptions{}
)

// gateway returns the gateway's handler over svc.
func (s *Server) gateway(svc *service) http.Handler {
	unary := map[string]grpc.MethodDesc{}
	var names []string
	for _, m := range api.FenceService_ServiceDesc.Methods {
		unary[m.MethodName] = m
		names = append(names, m.MethodName)
	}
	names = append(names, "KeepAlive")
	keepAlive := streamHandler("KeepAlive")
	slices.Sort(names)
	// A browser's cross-site POST (a form or text/plain fetch, sent
	// without asking first) is refused: on a plaintext loopback gateway the
	// admin rule would otherwise let any web page make admin calls.
	return http.NewCrossOriginProtection().Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call, under := strings.CutPrefix(r.URL.Path, "/v1/")
		m, isUnary := unary[call]
		if !under || (!isUnary && call != "KeepAlive") {
			writeStatus(w, status.Newf(codes.Unimplemented, "no call %q: POST /v1/<call> with one of %s (Backup: use fence snapshot save; Watch, a stream: gRPC or fence watch)", call, strings.Join(names, ", ")))
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, status.Newf(codes.Unimplemented, "%s /v1/%s: send POST with the request as JSON", r.Method, call))
			return
		}
		ctx, cancel, body, err := gatewayRequest(w, r, api.FenceService_ServiceDesc.ServiceName+"/"+call)
		if err != nil {
			writeStatus(w, status.Convert(err))
			return
		}
		defer cancel()
		var resp any
		if isUnary {
			resp, err = m.Handler(svc, ctx, decodeJSON(body), s.unaryAuth)
		} else {
			resp, err = s.renewOnce(ctx, svc, keepAlive, body)
		}
		if err != nil {
			writeStatus(w, status.Convert(err))
			return
		}
		out, err := gatewayOut.Marshal(resp.(proto.Message))
		if err != nil {
			writeStatus(w, status.Newf(codes.Internal, "encoding the answer: %v", err))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(out, '\n'))
	}))
}

// streamHandler is the generated handler of the service's stream name.
func streamHandler(name string) grpc.StreamHandler {
	streams := api.FenceService_ServiceDesc.Streams
	return streams[slices.IndexFunc(streams, func(d grpc.StreamDesc) bool { return d.StreamName == name })].Handler
}

// gatewayRequest reads the body and builds the call's context: the
// caller's TLS state and address (peer), its Authorization headers (the
// "authorization" metadata), the method, and ?timeout= as its deadline.
func gatewayRequest(w http.ResponseWriter, r *http.Request, method string) (context.Context, context.CancelFunc, []byte, error) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(gatewayBodyTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, gatewayMaxBody))
	if err != nil { // the deadline stays: the connection is dropped
		return nil, nil, nil, status.Errorf(codes.InvalidArgument, "reading the body: %v (at most %d bytes, within %v)", err, gatewayMaxBody, gatewayBodyTimeout)
	}
	_ = rc.SetReadDeadline(time.Time{}) // a waiting Acquire may take long; the body is in
	ctx, cancel := r.Context(), context.CancelFunc(func() {})
	if t := r.URL.Query().Get("timeout"); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 || d > gatewayMaxTimeout {
			return nil, nil, nil, status.Errorf(codes.InvalidArgument, "timeout=%q: give a duration above 0 and at most %v, e.g. timeout=30s", t, gatewayMaxTimeout)
		}
		ctx, cancel = context.WithTimeout(ctx, d)
	}
	ctx = grpc.NewContextWithServerTransportStream(callContext(ctx, r), methodStream("/"+method))
	return ctx, cancel, body, nil
}

// callContext is ctx with what identifies the caller of r as on the gRPC
// port: its TLS state and address (peer) and its Authorization headers
// (the "authorization" metadata).
func callContext(ctx context.Context, r *http.Request) context.Context {
	p := &peer.Peer{Addr: gatewayAddr(r.RemoteAddr)}
	if r.TLS != nil {
		p.AuthInfo = credentials.TLSInfo{State: *r.TLS}
	}
	ctx = peer.NewContext(ctx, p)
	return metadata.NewIncomingContext(ctx, metadata.MD{AdminHeader: r.Header.Values("Authorization")})
}

// gatewayAddr parses the caller's address (a TCP address, so the admin
// rule sees whether it is loopback).
func gatewayAddr(remote string) net.Addr {
	if a, err := net.ResolveTCPAddr("tcp", remote); err == nil {
		return a
	}
	return &net.TCPAddr{}
}

// decodeJSON decodes body (empty: {}) into a call's request.
func decodeJSON(body []byte) func(any) error {
	return func(v any) error {
		if len(body) == 0 {
			body = []byte("{}")
		}
		m := v.(proto.Message)
		if err := gatewayIn.Unmarshal(body, m); err != nil {
			return status.Errorf(codes.InvalidArgument, "the body is not a %s in JSON: %v", m.ProtoReflect().Descriptor().Name(), err)
		}
		return nil
	}
}

// renewOnce renews one lease (a KeepAliveRequest in body) through the
// KeepAlive handler and its interceptor, on a stream that carries that one
// request and is half-closed after it.
func (s *Server) renewOnce(ctx context.Context, svc *service, keepAlive grpc.StreamHandler, body []byte) (*api.KeepAliveResponse, error) {
	req := new(api.KeepAliveRequest)
	if err := decodeJSON(body)(req); err != nil {
		return nil, err
	}
	var resp *api.KeepAliveResponse
	st := &oneRequest{ctx: ctx, req: req, send: func(m proto.Message) error { resp = m.(*api.KeepAliveResponse); return nil }}
	info := &grpc.StreamServerInfo{FullMethod: api.FenceService_KeepAlive_FullMethodName, IsClientStream: true, IsServerStream: true}
	if err := s.streamAuth(svc, st, info, keepAlive); err != nil {
		return nil, err
	}
	if resp == nil {
		return nil, status.Error(codes.Internal, "the renewal was not answered")
	}
	return resp, nil
}

// oneRequest is a stream of one request (a renewal, a Watch): it is read
// once, then the stream is half-closed; each answer goes to send.
type oneRequest struct {
	ctx  context.Context
	req  proto.Message
	read bool
	send func(proto.Message) error
}

func (o *oneRequest) Context() context.Context     { return o.ctx }
func (o *oneRequest) SetHeader(metadata.MD) error  { return nil }
func (o *oneRequest) SendHeader(metadata.MD) error { return nil }
func (o *oneRequest) SetTrailer(metadata.MD)       {}

func (o *oneRequest) RecvMsg(m any) error {
	if o.read {
		return io.EOF
	}
	o.read = true
	proto.Merge(m.(proto.Message), o.req)
	return nil
}

func (o *oneRequest) SendMsg(m any) error { return o.send(m.(proto.Message)) }

// methodStream names a call that did not come as a gRPC call of its own
// (a gateway request, a call on a Session stream) for grpc.Method; it sends
// no headers.
type methodStream string

func (g methodStream) Method() string             { return string(g) }
func (methodStream) SetHeader(metadata.MD) error  { return nil }
func (methodStream) SendHeader(metadata.MD) error { return nil }
func (methodStream) SetTrailer(metadata.MD) error { return nil }

// httpStatus is the HTTP status of a gRPC code (grpc-gateway's mapping).
var httpStatus = map[codes.Code]int{
	codes.OK: http.StatusOK, codes.Canceled: 499, codes.Unknown: http.StatusInternalServerError,
	codes.InvalidArgument: http.StatusBadRequest, codes.DeadlineExceeded: http.StatusGatewayTimeout,
	codes.NotFound: http.StatusNotFound, codes.AlreadyExists: http.StatusConflict,
	codes.PermissionDenied: http.StatusForbidden, codes.Unauthenticated: http.StatusUnauthorized,
	codes.ResourceExhausted: http.StatusTooManyRequests, codes.FailedPrecondition: http.StatusBadRequest,
	codes.Aborted: http.StatusConflict, codes.OutOfRange: http.StatusBadRequest,
	codes.Unimplemented: http.StatusNotImplemented, codes.Internal: http.StatusInternalServerError,
	codes.Unavailable: http.StatusServiceUnavailable, codes.DataLoss: http.StatusInternalServerError,
}

// writeStatus writes a refusal in Google's JSON error form, with the HTTP
// status of its code.
func writeStatus(w http.ResponseWriter, st *status.Status) {
	code, ok := httpStatus[st.Code()]
	if !ok {
		code = http.StatusInternalServerError
	}
	writeError(w, code, st)
}

// writeError writes st in Google's JSON error form with HTTP status code.
func writeError(w http.ResponseWriter, code int, st *status.Status) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(statusBody(code, st))
}

// statusBody is st in Google's JSON error form, with HTTP status code.
func statusBody(code int, st *status.Status) map[string]any {
	details := []json.RawMessage{}
	for _, d := range st.Proto().GetDetails() {
		b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(d)
		if err != nil {
			b, _ = json.Marshal(map[string]string{"@type": d.GetTypeUrl(), "error": err.Error()})
		}
		details = append(details, b)
	}
	return map[string]any{"error": map[string]any{
		"code": code, "status": rpccode.Code_name[int32(st.Code())], "message": st.Message(), "details": details}}
}

// Package relay forwards gRPC calls to fence members byte for byte, from
// loopback listeners of its own (one per member), with hooks through which
// a test sees and changes what passes: the chaos harness captures the
// mutating calls to replay them later; the conformance suite loses
// replies, ends streams early and slips requests into a stream. A
// NotLeader detail (also in a Session stream's refusals) and Members'
// grpc_addr are rewritten to the relay's
// address for that member, so a client that follows them stays behind the
// relay.
package relay

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"

	"github.com/fencehq/fence/api"
)

// rawCodec passes messages through as bytes. Its name is "proto", so the
// content type on both sides stays application/grpc+proto.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// Dial connects to each address as fence's client does (keepalive pings
// find a blackholed member within ~3 s, a restarted one is reconnected to
// within a second); messages on the connections are raw bytes (*[]byte).
func Dial(addrs []string, creds credentials.TransportCredentials) ([]*grpc.ClientConn, error) {
	var conns []*grpc.ClientConn
	for _, addr := range addrs {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 2 * time.Second, Timeout: time.Second, PermitWithoutStream: true}),
			// Reconnect to a restarted member within a second, as the client
			// does (gRPC's default backoff grows to 2 minutes).
			grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 2 * time.Second,
				Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}}),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
		if err != nil {
			Close(conns)
			return nil, err
		}
		conn.Connect()
		conns = append(conns, conn)
	}
	return conns, nil
}

// Close closes conns.
func Close(conns []*grpc.ClientConn) {
	for _, c := range conns {
		c.Close()
	}
}

// Call is one call crossing the relay.
type Call struct {
	Member int    // index of the member it goes to
	Method string // full method name, e.g. /fence.v1.FenceService/Acquire
}

// Hooks see and change a call's messages. Each may be nil (pass
// everything). They run on the call's goroutines: Up on the one reading the
// caller, Down and Done on the one answering it.
type Hooks struct {
	// Up gets each message the caller sends and returns what the member
	// gets instead (none: the message is dropped).
	Up func(c *Call, msg []byte) [][]byte
	// Down gets each message the member answers and returns what the
	// caller gets instead; with end set, the call ends after those with
	// status end (nil: OK), and the member's side of it is cancelled.
	Down func(c *Call, msg []byte) (out [][]byte, end bool, status error)
	// Done gets the call's first request, its last answer from the member
	// and the status the caller is about to get, and returns the status the
	// caller gets.
	Done func(c *Call, first, last []byte, err error) error
}

// Relay listens on one loopback address per member and forwards each call
// to that member.
type Relay struct {
	members  []string // the members' own addresses
	addrs    []string // the relay's, one per member
	backends []*grpc.ClientConn
	servers  []*grpc.Server
	hooks    Hooks
}

// New listens on 127.0.0.1 (with serverCreds: what callers dial) and
// dials the members with clientCreds.
func New(members []string, clientCreds, serverCreds credentials.TransportCredentials, h Hooks) (*Relay, error) {
	r := &Relay{members: members, hooks: h}
	var err error
	if r.backends, err = Dial(members, clientCreds); err != nil {
		return nil, err
	}
	var lns []net.Listener
	for i := range members {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			Close(r.backends)
			return nil, err
		}
		lns = append(lns, ln)
		r.addrs = append(r.addrs, ln.Addr().String())
		r.servers = append(r.servers, grpc.NewServer(grpc.Creds(serverCreds), grpc.ForceServerCodecV2(rawCodec{}),
			grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
			grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error { return r.forward(i, ss) })))
	}
	for i, srv := range r.servers { // once every address is known (rewrites read them)
		go func() { _ = srv.Serve(lns[i]) }()
	}
	return r, nil
}

// Addrs returns the relay's addresses, one per member, in the members'
// order.
func (r *Relay) Addrs() []string { return r.addrs }

// Close stops the listeners and the calls under way, and closes the
// connections to the members.
func (r *Relay) Close() {
	for _, s := range r.servers {
		s.Stop()
	}
	Close(r.backends)
}

// forward relays one call to member i: messages both ways (through the
// hooks), headers, trailers, the deadline (through the context) and the
// final status.
func (r *Relay) forward(i int, ss grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(ss)
	if !ok {
		return status.Error(codes.Internal, "relay: no method")
	}
	call := &Call{Member: i, Method: method}
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	if md, ok := metadata.FromIncomingContext(ss.Context()); ok {
		ctx = metadata.NewOutgoingContext(ctx, md.Copy())
	}
	cs, err := r.backends[i].NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		return err
	}
	firstc := make(chan []byte, 1) // the first request, once read
	go func() {
		first := true
		for {
			var m []byte
			if err := ss.RecvMsg(&m); err != nil {
				if first {
					close(firstc)
				}
				if errors.Is(err, io.EOF) {
					_ = cs.CloseSend()
				} else {
					cancel()
				}
				return
			}
			if first {
				firstc <- m
				first = false
			}
			out := [][]byte{m}
			if r.hooks.Up != nil {
				out = r.hooks.Up(call, m)
			}
			for _, o := range out {
				if err := cs.SendMsg(&o); err != nil {
					return // the member's status comes from RecvMsg below
				}
			}
		}
	}()
	if md, err := cs.Header(); err == nil && md != nil {
		_ = ss.SendHeader(md)
	}
	var last []byte
	var rerr error
	ended := false
	for !ended {
		var m []byte
		if rerr = cs.RecvMsg(&m); rerr != nil {
			break
		}
		m = r.rewriteMembers(method, m)
		m = r.rewriteSession(method, m)
		last = m
		out := [][]byte{m}
		if r.hooks.Down != nil {
			out, ended, rerr = r.hooks.Down(call, m)
		}
		for _, o := range out {
			if err := ss.SendMsg(&o); err != nil {
				rerr, ended = err, true
				break
			}
		}
	}
	cancel()
	if !ended {
		ss.SetTrailer(cs.Trailer())
		if errors.Is(rerr, io.EOF) {
			rerr = nil
		}
	}
	rerr = r.redirect(rerr)
	if r.hooks.Done != nil {
		var first []byte
		select {
		case first = <-firstc:
		case <-time.After(time.Second): // a caller that never sent one
		}
		rerr = r.hooks.Done(call, first, last, rerr)
	}
	return rerr
}

// rewriteMembers points a Members answer's grpc_addr at the relay.
func (r *Relay) rewriteMembers(method string, msg []byte) []byte {
	if method != api.FenceService_Members_FullMethodName {
		return msg
	}
	var resp api.MembersResponse
	if proto.Unmarshal(msg, &resp) != nil {
		return msg
	}
	for _, m := range resp.Members {
		m.GrpcAddr = r.relayed(m.GrpcAddr)
	}
	out, err := proto.Marshal(&resp)
	if err != nil {
		return msg
	}
	return out
}

// relayed returns the relay's address for member address addr (addr if
// it is no member's).
func (r *Relay) relayed(addr string) string {
	for i, m := range r.members {
		if addr == m {
			return r.addrs[i]
		}
	}
	return addr
}

// rewriteSession points the NotLeader detail of a refusal a Session
// stream carries (SessionResponse.error, a google.rpc.Status) at the relay,
// as redirect does for a call's status.
func (r *Relay) rewriteSession(method string, msg []byte) []byte {
	if method != api.FenceService_Session_FullMethodName {
		return msg
	}
	var resp api.SessionResponse
	if proto.Unmarshal(msg, &resp) != nil {
		return msg
	}
	e, ok := resp.Result.(*api.SessionResponse_Error)
	if !ok {
		return msg
	}
	var st spb.Status
	if proto.Unmarshal(e.Error, &st) != nil {
		return msg
	}
	b, err := proto.Marshal(status.Convert(r.redirect(status.FromProto(&st).Err())).Proto())
	if err != nil {
		return msg
	}
	e.Error = b
	if out, err := proto.Marshal(&resp); err == nil {
		return out
	}
	return msg
}

// redirect rewrites a NotLeader detail's leader address to the relay's
// for that member: the client follows the hint and would otherwise connect
// to the leader directly, around the relay.
func (r *Relay) redirect(err error) error {
	st, ok := status.FromError(err)
	if err == nil || !ok || len(st.Details()) == 0 {
		return err
	}
	out := status.New(st.Code(), st.Message())
	for _, d := range st.Details() {
		if nl, ok := d.(*api.NotLeader); ok {
			nl = proto.Clone(nl).(*api.NotLeader)
			nl.LeaderAddr = r.relayed(nl.LeaderAddr)
			d = nl
		}
		m, ok := d.(protoadapt.MessageV1)
		if !ok {
			return err
		}
		var werr error
		if out, werr = out.WithDetails(m); werr != nil {
			return err
		}
	}
	return out.Err()
}

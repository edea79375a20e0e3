package chaos

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

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

// The proxy sits between the workers and the servers: one listener per
// member, in the harness process, forwarding every call (unary or stream)
// byte for byte to the member the worker dialled. It sees every request and
// answer as the wire carries them, so it can capture the mutating ones for
// the replayer (replay.go) and learn each lease's TTL as the server granted
// it (CreateLease's answer), which the checks use instead of what a worker
// asked for. It lives outside the workers so that a paused or killed worker
// does not stop its requests from being replayed later, as a real network
// duplicate outlives its sender.

// Methods of the Fence service the proxy knows by name.
const (
	methodPrefix      = "/fence.v1.FenceService/"
	methodCreateLease = methodPrefix + "CreateLease"
	methodAcquire     = methodPrefix + "Acquire"
	methodRelease     = methodPrefix + "Release"
	methodRevoke      = methodPrefix + "Revoke"
	methodPut         = methodPrefix + "Put"
	methodForce       = methodPrefix + "ForceRelease"
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

// capture is one mutating call as it crossed the proxy: the request bytes
// exactly as the worker sent them, and the first answer the worker got.
type capture struct {
	member int
	method string
	req    []byte
	ok     bool // the answer was OK: resp, else err
	resp   []byte
	err    *status.Status
	at     int64 // Mono when the answer passed
}

// proxy forwards to the cluster's members.
type proxy struct {
	members  []string // the members' own addresses
	addrs    []string // what workers dial, one per member
	backends []*grpc.ClientConn
	servers  []*grpc.Server
	captured chan<- capture // non-blocking sends; nil: capture nothing

	mu   sync.Mutex
	ttls map[uint64]time.Duration // guarded by mu; lease number → TTL the server granted
}

// dialMembers connects to each member as the client does (keepalive pings
// find a blackholed member within ~3 s, a restarted one is reconnected to
// within a second), passing messages through as bytes.
func dialMembers(addrs []string, creds credentials.TransportCredentials) ([]*grpc.ClientConn, error) {
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
			closeConns(conns)
			return nil, err
		}
		conn.Connect()
		conns = append(conns, conn)
	}
	return conns, nil
}

func closeConns(conns []*grpc.ClientConn) {
	for _, c := range conns {
		c.Close()
	}
}

// newProxy listens on 127.0.0.1 with TLS (serverCreds: workers present
// the client certificate) and dials the members with clientCreds.
func newProxy(members []string, captured chan<- capture, clientCreds, serverCreds credentials.TransportCredentials) (*proxy, error) {
	p := &proxy{members: members, captured: captured, ttls: map[uint64]time.Duration{}}
	var err error
	if p.backends, err = dialMembers(members, clientCreds); err != nil {
		return nil, err
	}
	var lns []net.Listener
	for i := range members {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			closeConns(p.backends)
			return nil, err
		}
		lns = append(lns, ln)
		p.addrs = append(p.addrs, ln.Addr().String())
		p.servers = append(p.servers, grpc.NewServer(grpc.Creds(serverCreds), grpc.ForceServerCodecV2(rawCodec{}),
			grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
			grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error { return p.forward(i, ss) })))
	}
	for i, srv := range p.servers { // once every address is known (redirect reads them)
		go func() { _ = srv.Serve(lns[i]) }()
	}
	return p, nil
}

// forward relays one call to member i: messages both ways, headers,
// trailers, the deadline (through the context) and the final status.
func (p *proxy) forward(i int, ss grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(ss)
	if !ok {
		return status.Error(codes.Internal, "chaos proxy: no method")
	}
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	if md, ok := metadata.FromIncomingContext(ss.Context()); ok {
		ctx = metadata.NewOutgoingContext(ctx, md.Copy())
	}
	cs, err := p.backends[i].NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		return err
	}
	var first []byte // the request of a unary call
	up := make(chan error, 1)
	go func() {
		for {
			var m []byte
			if err := ss.RecvMsg(&m); err != nil {
				if errors.Is(err, io.EOF) {
					up <- cs.CloseSend()
					return
				}
				cancel()
				up <- err
				return
			}
			if first == nil {
				first = m
			}
			if err := cs.SendMsg(&m); err != nil {
				up <- nil // the backend's status comes from RecvMsg below
				return
			}
		}
	}()
	if md, err := cs.Header(); err == nil && md != nil {
		_ = ss.SendHeader(md)
	}
	var last []byte
	var rerr error
	for {
		var m []byte
		if rerr = cs.RecvMsg(&m); rerr != nil {
			break
		}
		last = m
		if err := ss.SendMsg(&m); err != nil {
			cancel()
			rerr = err
			break
		}
	}
	ss.SetTrailer(cs.Trailer())
	if errors.Is(rerr, io.EOF) {
		rerr = nil
	}
	rerr = p.redirect(rerr)
	if _, mutating := newRequest[method]; mutating { // a duplicate of it must never be acted on twice
		<-up // the one request has been read
		p.observe(i, method, first, last, rerr)
	}
	return rerr
}

// redirect rewrites a NotLeader detail's leader address to the proxy's for
// that member: the client follows the hint and would otherwise connect to
// the leader directly, around the proxy.
func (p *proxy) redirect(err error) error {
	st, ok := status.FromError(err)
	if err == nil || !ok || len(st.Details()) == 0 {
		return err
	}
	out := status.New(st.Code(), st.Message())
	for _, d := range st.Details() {
		if nl, ok := d.(*api.NotLeader); ok {
			for i, m := range p.members {
				if nl.LeaderAddr == m {
					nl = proto.Clone(nl).(*api.NotLeader)
					nl.LeaderAddr = p.addrs[i]
					d = nl
				}
			}
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

// observe learns lease TTLs and hands the call to the replayer.
func (p *proxy) observe(member int, method string, req, resp []byte, err error) {
	if req == nil {
		return
	}
	c := capture{member: member, method: method, req: req, at: Mono()}
	if err == nil {
		c.ok, c.resp = true, resp
		if method == methodCreateLease {
			var r api.CreateLeaseResponse
			if proto.Unmarshal(resp, &r) == nil && r.Ttl != nil {
				p.mu.Lock()
				p.ttls[r.LeaseNumber] = r.Ttl.AsDuration()
				p.mu.Unlock()
			}
		}
	} else {
		c.err, _ = status.FromError(err) // also a call the worker gave up on: it may have been acted on
	}
	if p.captured != nil {
		select {
		case p.captured <- c:
		default: // the replayer is behind: skip this one
		}
	}
}

// leaseTTLs returns the TTLs the servers granted, by lease number.
func (p *proxy) leaseTTLs() map[uint64]time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[uint64]time.Duration, len(p.ttls))
	for k, v := range p.ttls {
		out[k] = v
	}
	return out
}

func (p *proxy) close() {
	for _, s := range p.servers {
		s.Stop()
	}
	closeConns(p.backends)
}

package chaos

import (
	"sync"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/relay"
)

// The proxy sits between the workers and the servers: a relay (one
// listener per member, in the harness process) forwarding every call
// (unary or stream) byte for byte to the member the worker dialled. It sees every request and
// answer as the wire carries them, so it can capture the mutating ones (also
// the Acquire and Release calls a Session stream carries, as the unary
// calls they stand for) for
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
	methodSession     = methodPrefix + "Session"
)

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

// proxy forwards to the cluster's members through a relay.
type proxy struct {
	relay    *relay.Relay
	addrs    []string       // what workers dial, one per member
	captured chan<- capture // non-blocking sends; nil: capture nothing

	mu      sync.Mutex
	ttls    map[uint64]time.Duration               // guarded by mu; lease number → TTL the server granted
	pending map[*relay.Call]map[uint64]sessionCall // guarded by mu; a Session stream's calls without an answer, by call id
}

// sessionCall is an Acquire or Release a Session stream carries: captured
// as the unary call it stands for, with its answer.
type sessionCall struct {
	method string
	req    []byte
}

// newProxy listens on 127.0.0.1 with TLS (serverCreds: workers present
// the client certificate) and dials the members with clientCreds.
func newProxy(members []string, captured chan<- capture, clientCreds, serverCreds credentials.TransportCredentials) (*proxy, error) {
	p := &proxy{captured: captured, ttls: map[uint64]time.Duration{}, pending: map[*relay.Call]map[uint64]sessionCall{}}
	r, err := relay.New(members, clientCreds, serverCreds, relay.Hooks{Up: p.up, Down: p.down, Done: p.done})
	if err != nil {
		return nil, err
	}
	p.relay, p.addrs = r, r.Addrs()
	return p, nil
}

// done hands each mutating call to observe: a duplicate of it must never
// be acted on twice. The calls of a Session stream left without an answer
// are observed as failed (their outcome is unknown).
func (p *proxy) done(c *relay.Call, first, last []byte, err error) error {
	if _, mutating := newRequest[c.Method]; mutating {
		p.observe(c.Member, c.Method, first, last, err)
	}
	if c.Method == methodSession {
		p.mu.Lock()
		left := p.pending[c]
		delete(p.pending, c)
		p.mu.Unlock()
		end := err
		if end == nil {
			end = status.Error(codes.Unavailable, "the Session stream ended before the answer")
		}
		for _, sc := range left {
			p.observe(c.Member, sc.method, sc.req, nil, end)
		}
	}
	return err
}

// up notes each Acquire and Release a Session stream carries.
func (p *proxy) up(c *relay.Call, msg []byte) [][]byte {
	if c.Method != methodSession {
		return [][]byte{msg}
	}
	var r api.SessionRequest
	if proto.Unmarshal(msg, &r) != nil {
		return [][]byte{msg}
	}
	var sc sessionCall
	switch r.Call.(type) {
	case *api.SessionRequest_Acquire:
		sc = sessionCall{methodAcquire, field(msg, 3)}
	case *api.SessionRequest_Release:
		sc = sessionCall{methodRelease, field(msg, 4)}
	default:
		return [][]byte{msg}
	}
	p.mu.Lock()
	if p.pending[c] == nil {
		p.pending[c] = map[uint64]sessionCall{}
	}
	p.pending[c][r.CallId] = sc
	p.mu.Unlock()
	return [][]byte{msg}
}

// field returns the bytes of message field num of msg as the wire carries
// them (the request or answer a Session message holds, byte for byte).
func field(msg []byte, num protowire.Number) []byte {
	for len(msg) > 0 {
		n, typ, l := protowire.ConsumeTag(msg)
		if l < 0 {
			return nil
		}
		msg = msg[l:]
		if n == num && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(msg)
			if l < 0 {
				return nil
			}
			return v
		}
		l = protowire.ConsumeFieldValue(n, typ, msg)
		if l < 0 {
			return nil
		}
		msg = msg[l:]
	}
	return nil
}

// down observes each answer of a Session stream's Acquire or Release as
// the unary call's.
func (p *proxy) down(c *relay.Call, msg []byte) ([][]byte, bool, error) {
	if c.Method != methodSession {
		return [][]byte{msg}, false, nil
	}
	var r api.SessionResponse
	if proto.Unmarshal(msg, &r) != nil {
		return [][]byte{msg}, false, nil
	}
	p.mu.Lock()
	sc, ok := p.pending[c][r.CallId]
	delete(p.pending[c], r.CallId)
	p.mu.Unlock()
	if !ok {
		return [][]byte{msg}, false, nil
	}
	var resp []byte
	var err error
	switch res := r.Result.(type) {
	case *api.SessionResponse_Acquire:
		resp = field(msg, 2)
	case *api.SessionResponse_Release:
		resp = field(msg, 3)
	case *api.SessionResponse_Error:
		var st spb.Status
		if err = proto.Unmarshal(res.Error, &st); err == nil {
			err = status.FromProto(&st).Err()
		}
	}
	p.observe(c.Member, sc.method, sc.req, resp, err)
	return [][]byte{msg}, false, nil
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

func (p *proxy) close() { p.relay.Close() }

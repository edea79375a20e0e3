package chaos

import (
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/internal/relay"
)

// The proxy sits between the workers and the servers: a relay (one
// listener per member, in the harness process) forwarding every call
// (unary or stream) byte for byte to the member the worker dialled. It sees every request and
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

	mu   sync.Mutex
	ttls map[uint64]time.Duration // guarded by mu; lease number → TTL the server granted
}

// newProxy listens on 127.0.0.1 with TLS (serverCreds: workers present
// the client certificate) and dials the members with clientCreds.
func newProxy(members []string, captured chan<- capture, clientCreds, serverCreds credentials.TransportCredentials) (*proxy, error) {
	p := &proxy{captured: captured, ttls: map[uint64]time.Duration{}}
	r, err := relay.New(members, clientCreds, serverCreds, relay.Hooks{Done: p.done})
	if err != nil {
		return nil, err
	}
	p.relay, p.addrs = r, r.Addrs()
	return p, nil
}

// done hands each mutating call to observe: a duplicate of it must never
// be acted on twice.
func (p *proxy) done(c *relay.Call, first, last []byte, err error) error {
	if _, mutating := newRequest[c.Method]; mutating {
		p.observe(c.Member, c.Method, first, last, err)
	}
	return err
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

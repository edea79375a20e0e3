package client

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/fencehq/fence/api"
)

// calls numbers the Acquire and Release calls of one server lease and keeps
// the numbers whose answers have not arrived. Every request carries its own
// number (seq, the same on its retries), the lowest number still unanswered
// (ack) and the other unanswered numbers below its own (open): the server
// forgets the answers of every other call and refuses those calls if they
// arrive again, so a late duplicate is never acted on and the server's
// memory stays bounded by what is in flight, even while one call waits long
// in a queue (api/fence/v1/fence.proto; Raft thesis §6.3). A call whose outcome
// cannot be settled stays unanswered: its session is given up then, and ends.
type calls struct {
	mu   sync.Mutex
	last uint64              // guarded by mu; the last number given
	open map[uint64]struct{} // guarded by mu; numbers given and not yet answered
}

// begin numbers a new call.
func (n *calls) begin() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.last++
	if n.open == nil {
		n.open = map[uint64]struct{}{}
	}
	n.open[n.last] = struct{}{}
	return n.last
}

// answered records that the outcome of call seq is known.
func (n *calls) answered(seq uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.open, seq)
}

// acks returns what a request of call seq acknowledges: ack, the lowest
// number not answered yet, and open, the other unanswered numbers between
// ack and seq, in order.
func (n *calls) acks(seq uint64) (ack uint64, open []uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ack = seq
	for o := range n.open {
		ack = min(ack, o)
	}
	for o := range n.open {
		if o > ack && o < seq {
			open = append(open, o)
		}
	}
	slices.Sort(open)
	return ack, open
}

// acquire sends req, a numbered Acquire of s, with what it acknowledges now:
// on the session's stream (stream.go), or as a unary call to an older server.
func (s *session) acquire(ctx context.Context, req *api.AcquireRequest) (*api.AcquireResponse, error) {
	req.Ack, req.Open = s.calls.acks(req.Seq)
	r, err := s.onStream(ctx, &api.SessionRequest{Call: &api.SessionRequest_Acquire{Acquire: req}})
	if errors.Is(err, errUseUnary) {
		return s.c.leader().Acquire(ctx, req)
	}
	return r.GetAcquire(), err
}

// sendAcquire sends req, a numbered Acquire of s, retrying with the same
// request id and number: the server answers the first outcome, so a grant
// whose reply was lost comes back as the same grant, and a relock never
// releases or grants twice. A call whose outcome is known is answered.
func (c *Client) sendAcquire(ctx context.Context, s *session, req *api.AcquireRequest) (*api.AcquireResponse, error) {
	var resp *api.AcquireResponse
	err := c.retry(ctx, func(ctx context.Context) (err error) {
		resp, err = s.acquire(ctx, req)
		return err
	})
	if !outcomeUnknown(err) {
		s.calls.answered(req.Seq)
	}
	return resp, err
}

// releaseRequest builds a numbered Release of name (reused on its retries).
func (s *session) releaseRequest(name string) *api.ReleaseRequest {
	return &api.ReleaseRequest{RequestId: newRequestID(), LeaseSecret: s.id, Name: name, Seq: s.calls.begin()}
}

// release sends req, a numbered Release of s, with what it acknowledges now.
func (s *session) release(ctx context.Context, req *api.ReleaseRequest) error {
	req.Ack, req.Open = s.calls.acks(req.Seq)
	_, err := s.onStream(ctx, &api.SessionRequest{Call: &api.SessionRequest_Release{Release: req}})
	if errors.Is(err, errUseUnary) {
		_, err = s.c.leader().Release(ctx, req)
	}
	return err
}

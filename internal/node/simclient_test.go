package node

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/histcheck"
)

// simClient is one client of the simulation: one call at a time, to the node
// it believes leads; a call whose outcome is unknown is retried (same
// request id and call number) until answered or given up, and a client that
// gives up abandons its lease, as the real client does. Now and then it
// also replays a call it has long had the answer to, as a late duplicate
// from the network would.
type simClient struct {
	s     *sim
	i     int
	lease fsm.LeaseID
	seq   uint64
	held  map[string]uint64
	past  []fsm.Command // answered lease calls, for late replays
	op    *simOp
}

// simOp is the call in flight.
type simOp struct {
	cmd      fsm.Command
	read     *simRead // a linearizable read instead of a command
	req      *request
	node     *simNode
	call     int64
	deadline time.Duration // give up (unknown outcome) after this
	queued   time.Duration // when a waiting Acquire was first answered Queued
}

// simRead is a read of one lock's holder or one key.
type simRead struct {
	lock, key string
}

var simLocks = []string{"a", "b", "c"}

func newSimClient(s *sim, i int) *simClient { return &simClient{s: s, i: i, held: map[string]uint64{}} }

func (c *simClient) rid() (r fsm.RequestID) {
	for i := range r {
		r[i] = byte(c.s.rng.Uint32())
	}
	return r
}

// next starts the client's next call.
func (c *simClient) next() {
	s := c.s
	if s.now > s.cfg.duration+3*time.Second {
		return
	}
	if len(c.past) > 0 && s.rng.Float64() < 0.05 {
		c.replay()
	}
	op := &simOp{call: int64(s.now), deadline: s.now + 2*time.Second}
	switch r := s.rng.IntN(100); {
	case c.lease.IsZero():
		var id fsm.LeaseID
		for i := range id {
			id[i] = byte(s.rng.Uint32())
		}
		op.cmd = fsm.Command{Kind: fsm.KindCreateLease, RequestID: c.rid(), Lease: id, TTL: time.Hour, Owner: fmt.Sprintf("c%d", c.i)}
	case r < 35:
		c.seq++
		name := simLocks[s.rng.IntN(len(simLocks))]
		op.cmd = fsm.Command{Kind: fsm.KindAcquire, RequestID: c.rid(), Lease: c.lease, Seq: c.seq, Ack: c.seq, Name: name,
			Wait: s.rng.IntN(2) == 0}
	case r < 60 && len(c.held) > 0:
		c.seq++
		op.cmd = fsm.Command{Kind: fsm.KindRelease, RequestID: c.rid(), Lease: c.lease, Seq: c.seq, Ack: c.seq, Name: c.someHeld()}
	case r < 75 && len(c.held) > 0:
		name := c.someHeld()
		op.cmd = fsm.Command{Kind: fsm.KindPut, RequestID: c.rid(), Name: "k" + name, Value: []byte(fmt.Sprintf("c%d@%d", c.i, s.now)), Token: c.held[name]}
	case r < 80:
		op.cmd = fsm.Command{Kind: fsm.KindRenew, Lease: c.lease}
	case r < 90:
		op.read = &simRead{lock: simLocks[s.rng.IntN(len(simLocks))]}
	default:
		op.read = &simRead{key: "k" + simLocks[s.rng.IntN(len(simLocks))]}
	}
	c.op = op
	c.send()
}

// someHeld returns the held lock that comes first by name.
func (c *simClient) someHeld() string {
	best := ""
	for name := range c.held {
		if best == "" || name < best {
			best = name
		}
	}
	return best
}

// send sends the call in flight to the node the client believes leads.
// Late in the quiet period a client stops (its call's outcome unknown), so
// that the members have time to apply everything acknowledged before the
// end of the run is checked.
func (c *simClient) send() {
	s, op := c.s, c.op
	if s.now > s.cfg.duration+3*time.Second {
		c.finish(nil, true)
		return
	}
	n := s.leader()
	if n == nil || s.rng.Float64() < 0.1 {
		up := s.up()
		if len(up) == 0 {
			s.after(10*time.Millisecond, c.send)
			return
		}
		n = up[s.rng.IntN(len(up))]
	}
	op.node, op.req = n, newRequest()
	if op.read != nil {
		n.c.read(op.req)
	} else {
		op.req.data = fsm.EncodeBatch(nil, []fsm.Command{op.cmd})
		n.c.propose(op.req)
	}
	s.process(n)
	c.wait()
}

// wait polls for the outcome (the core answers on a buffered channel).
func (c *simClient) wait() {
	s, op := c.s, c.op
	select {
	case o := <-op.req.done:
		c.outcome(o)
	default:
		s.after(time.Millisecond, c.wait)
	}
}

func (c *simClient) outcome(o outcome) {
	s, op := c.s, c.op
	if o.err != nil {
		if s.now > op.deadline {
			c.finish(nil, true)
			return
		}
		if errors.Is(o.err, ErrNotLeader) || errors.Is(o.err, ErrIndeterminate) || errors.Is(o.err, ErrStopped) {
			s.after(s.between(time.Millisecond, 20*time.Millisecond), c.send)
			return
		}
		s.check.fail("client %d: unexpected error %v", c.i, o.err)
		return
	}
	if op.read != nil {
		if op.node.c == nil || op.node.rep == nil {
			s.after(time.Millisecond, c.send)
			return
		}
		c.finish(nil, false)
		return
	}
	res, ok := o.result.([]fsm.Result)
	if !ok || len(res) != 1 {
		s.check.fail("client %d: result %v", c.i, o.result)
		return
	}
	s.check.acked(op.node, o.index, op.cmd, res[0])
	if res[0].Code == fsm.Queued { // wait: ask again (a retry answers the grant once made), cancel after a while
		if op.queued == 0 {
			op.queued = s.now
		}
		op.deadline = s.now + 2*time.Second
		if s.now-op.queued > time.Second && s.rng.IntN(4) == 0 {
			c.propose(fsm.Command{Kind: fsm.KindCancelWait, Lease: op.cmd.Lease, Name: op.cmd.Name, Seq: op.cmd.Seq})
		}
		s.after(s.between(10*time.Millisecond, 50*time.Millisecond), c.send)
		return
	}
	c.finish(&res[0], false)
}

// propose sends cmd to the leader without waiting for its outcome.
func (c *simClient) propose(cmd fsm.Command) {
	n := c.s.leader()
	if n == nil {
		return
	}
	req := newRequest()
	req.data = fsm.EncodeBatch(nil, []fsm.Command{cmd})
	n.c.propose(req)
	c.s.process(n)
}

// finish records the call in the history and starts the next one.
func (c *simClient) finish(res *fsm.Result, unknown bool) {
	s, op := c.s, c.op
	ret := int64(s.now)
	if unknown {
		ret = math.MaxInt64
	}
	add := func(in, out any) { // reads ret when called: a case below may change it
		s.check.history = append(s.check.history, porcupine.Operation{ClientId: c.i, Input: in, Output: out, Call: op.call, Return: ret})
	}
	switch {
	case op.read != nil && unknown: // a read that never answered did nothing
	case op.read != nil && op.read.lock != "":
		var tok uint64
		op.node.rep.read(func(st *fsm.State) {
			if k, ok := st.Lock(op.read.lock); ok && !k.Holder.IsZero() {
				tok = k.Token
			}
		})
		add(histcheck.LockInput{Name: op.read.lock, Op: histcheck.Status}, histcheck.LockOutput{Token: tok})
	case op.read != nil:
		var out histcheck.KVOutput
		op.node.rep.read(func(st *fsm.State) {
			v, tok, ok := st.Get(op.read.key)
			out = histcheck.KVOutput{Found: ok, Value: string(v), Token: tok}
		})
		add(histcheck.KVInput{Key: op.read.key}, out)
	case op.cmd.Kind == fsm.KindCreateLease:
		if res != nil && res.Code == fsm.OK {
			c.lease, c.seq, c.held, c.past = op.cmd.Lease, 0, map[string]uint64{}, nil
		}
	case op.cmd.Kind == fsm.KindAcquire:
		out := histcheck.LockOutput{Unknown: unknown}
		switch {
		case res != nil && res.Code == fsm.OK:
			out.OK, out.Token = true, res.Token
			c.held[op.cmd.Name] = res.Token
		case op.queued != 0 && res != nil && res.Code != fsm.Cancelled:
			// It waited, and was perhaps granted and then lost the grant
			// (its lease ended, say) before it asked again.
			out.Unknown, ret = true, math.MaxInt64
		}
		add(histcheck.LockInput{Name: op.cmd.Name, Op: histcheck.Acquire}, out)
	case op.cmd.Kind == fsm.KindRelease:
		tok := c.held[op.cmd.Name]
		delete(c.held, op.cmd.Name)
		add(histcheck.LockInput{Name: op.cmd.Name, Op: histcheck.Release, Token: tok},
			histcheck.LockOutput{Unknown: unknown, OK: res != nil && res.Code == fsm.OK})
	case op.cmd.Kind == fsm.KindPut:
		out := histcheck.KVOutput{Unknown: unknown}
		if res != nil && res.Code == fsm.Stale {
			out.Stale, out.Token = true, res.Token
		}
		add(histcheck.KVInput{Key: op.cmd.Name, Put: true, Value: string(op.cmd.Value), Token: op.cmd.Token}, out)
	}
	if op.cmd.Seq != 0 && !unknown {
		c.past = append(c.past, op.cmd)
	}
	if unknown && op.cmd.Seq != 0 || res != nil && res.Code == fsm.LeaseNotFound {
		c.lease = fsm.LeaseID{} // abandon the lease: a new one next
	}
	c.op = nil
	s.after(s.between(0, 20*time.Millisecond), c.next)
}

// replay proposes an answered call again, as a late duplicate: the state
// must refuse it (its number is below the lease's acknowledged floor).
func (c *simClient) replay() {
	s := c.s
	cmd := c.past[s.rng.IntN(len(c.past))]
	if cmd.Seq >= c.seq { // not yet acknowledged by a later call
		return
	}
	s.logf("client %d replays call %d (%v %s) late", c.i, cmd.Seq, cmd.Kind, cmd.Name)
	c.propose(cmd)
}

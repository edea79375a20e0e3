package fsm

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// Red team 2 (selective acknowledgement). Each test states the hole it shows.

// rt2Client emulates client/calls.go: numbers handed out and not yet
// answered; every request carries ack = lowest open (or its own seq) and
// open = the other open numbers below its seq.
type rt2Client struct {
	lease byte
	last  uint64
	open  map[uint64]bool
}

func newRT2Client(lease byte) *rt2Client { return &rt2Client{lease: lease, open: map[uint64]bool{}} }

func (c *rt2Client) begin() uint64 { c.last++; c.open[c.last] = true; return c.last }

func (c *rt2Client) answered(seq uint64) { delete(c.open, seq) }

// req builds an attempt of call seq with what the client acknowledges now.
func (c *rt2Client) req(kind Kind, seq uint64, name string, wait bool) Command {
	ack := seq
	for o := range c.open {
		ack = min(ack, o)
	}
	var open []uint64
	for o := range c.open {
		if o > ack && o < seq {
			open = append(open, o)
		}
	}
	slices.Sort(open)
	cmd := rtCall(kind, c.lease, seq, ack, name, wait)
	cmd.Open = open
	return cmd
}

// Spans are added by acknowledge BEFORE the TooManyCalls check (and on the
// recall path with no check at all): one request of a fresh lease whose open
// list names every other number below its seq (1024 numbers it never made,
// which Validate accepts) leaves 1025 spans. The state is what Apply made,
// yet the snapshot Marshal writes is one Unmarshal refuses ("lease
// remembers 1025 calls, limit 1024"): a follower cannot install the leader's
// snapshot and a restarted node cannot load its own. (The growth is bounded
// — the request with the highest seq acknowledges every gap below it that
// its open list does not name — but not by MaxCallsInFlight.)
func TestRedteam2OneRequestOverfillsMemory(t *testing.T) {
	s := New()
	applyAll(s, cmdCreate(1, 1))
	var open []uint64
	for i := uint64(0); i < MaxCallsInFlight; i++ {
		open = append(open, 3+2*i)
	}
	seq := open[len(open)-1] + 2
	c := rtCall(KindAcquire, 1, seq, 1, "x", false)
	c.Open = open
	r := s.Apply(&c)
	checkMemoryBound(t, s, id(1), r.Code)
}

// checkMemoryBound: a lease's memory stays within its stated bound
// (MaxCallsInFlight answers, MaxCallsInFlight+1 gaps) and the state's
// snapshot restores.
func checkMemoryBound(t *testing.T, s *State, lease LeaseID, last Code) {
	t.Helper()
	m := &s.leases[lease].calls
	if _, err := Unmarshal(s.Marshal(nil)); err != nil || len(m.answers) > MaxCallsInFlight || len(m.gaps) > MaxCallsInFlight+1 {
		t.Fatalf("after %v the lease remembers %d answers and %d gaps (limits %d, %d); Unmarshal of the snapshot: %v",
			last, len(m.answers), len(m.gaps), MaxCallsInFlight, MaxCallsInFlight+1, err)
	}
}

// The same limit broken by a client that follows the protocol: waits (kept
// open, never forgotten) alternate with answered try-locks, so every answer
// becomes a span between two waits; at 1023, two calls race (the later one,
// a wait, arrives first and fills the memory; the earlier one is refused
// TooManyCalls). The next call acknowledges the refused one: a new span
// between two waits, added before that call is refused too. 1025 entries:
// the state is valid by the fsm's own rules and its snapshot is refused.
func TestRedteam2BenignClientSnapshotRefused(t *testing.T) {
	s := New()
	applyAll(s, cmdCreate(1, 1), cmdCreate(2, 2))
	h := uint64(0)
	hold := func(name string) { // lease 2 takes name
		h++
		mustCode(t, s, rtCall(KindAcquire, 2, h, h, name, false), OK)
	}
	hold("busy")
	c := newRT2Client(1)
	wait := func(i int) uint64 {
		name := fmt.Sprintf("h%d", i)
		hold(name)
		seq := c.begin()
		mustCode(t, s, c.req(KindAcquire, seq, name, true), Queued) // stays open
		return seq
	}
	try := func() {
		seq := c.begin()
		mustCode(t, s, c.req(KindAcquire, seq, "busy", false), LockHeld)
		c.answered(seq)
	}
	for i := 0; i <= 510; i++ {
		wait(i)
		try()
	}
	wait(511)
	// Two concurrent calls: a+1 (a try-lock) and a+2 (a wait); a+2 arrives first.
	a1, a2 := c.begin(), c.begin()
	hold("h512")
	mustCode(t, s, c.req(KindAcquire, a2, "h512", true), Queued)
	r := mustCode(t, s, c.req(KindAcquire, a1, "busy", false), LockHeld)
	c.answered(a1)
	next := c.begin()
	r = mustCode(t, s, c.req(KindAcquire, next, "busy", false), LockHeld)
	c.answered(next)
	checkMemoryBound(t, s, id(1), r.Code)
}

// A call refused TooManyCalls is not remembered; the fix relies on "later
// requests acknowledge it". But the memory can drain before any later call
// arrives: a retry of an EARLIER call (its reply was lost) acknowledges the
// answers below it, and says nothing about calls above its own number. A
// late first attempt of the refused call then finds room and is executed:
// here a try-lock the client was told was not executed is granted; nobody
// holds the grant (the client forgot the call), the session keeps renewing,
// and the lock is stuck with a ghost holder.
func TestRedteam2RefusedCallActsAfterOlderRetryDrains(t *testing.T) {
	s := New()
	applyAll(s, cmdCreate(1, 1), cmdCreate(2, 2))
	for i := range uint64(MaxCallsInFlight) { // lease 2 holds q1…q1024
		mustCode(t, s, rtCall(KindAcquire, 2, i+1, i+1, fmt.Sprintf("q%d", i+1), false), OK)
	}
	c := newRT2Client(1)
	for i := 1; i <= MaxCallsInFlight; i++ { // lease 1 waits for each: 1024 calls open
		seq := c.begin()
		mustCode(t, s, c.req(KindAcquire, seq, fmt.Sprintf("q%d", i), true), Queued)
	}
	x := c.begin()
	late := c.req(KindAcquire, x, "b", false) // first attempt: delayed in the network
	mustCode(t, s, c.req(KindAcquire, x, "b", false), TooManyCalls)
	c.answered(x) // definitive: not executed
	// Lease 2 releases q2…q1024 (q1 stays held: call 1 keeps waiting).
	for i := uint64(2); i <= MaxCallsInFlight; i++ {
		h := MaxCallsInFlight + i
		mustCode(t, s, rtCall(KindRelease, 2, h, h, fmt.Sprintf("q%d", i), false), OK)
	}
	// The answers of calls 2…1023 reach the client; call 1024's reply is lost and it retries.
	for seq := uint64(2); seq < MaxCallsInFlight; seq++ {
		c.answered(seq)
	}
	mustCode(t, s, c.req(KindAcquire, MaxCallsInFlight, fmt.Sprintf("q%d", MaxCallsInFlight), true), OK)
	c.answered(MaxCallsInFlight)
	if r := s.Apply(&late); r.Code == OK {
		k, _ := s.Lock("b")
		t.Fatalf("late first attempt of call %d (its client was told TooManyCalls: not executed) was executed: %v, token %d; lock b is held by lease #%d, a grant nobody knows of",
			x, r.Code, r.Token, k.HolderNum)
	}
}

// "Memory is bounded by what is in flight": but a span costs as much as an
// answer, and every answered call between two waiting ones leaves one. A
// client with 512 Lock calls waiting (one session, 512 names) that makes a
// try-lock between each — 513 calls in flight at most, half the limit — has
// its memory full: its Release of a lock it holds is refused TooManyCalls
// (and client/lease.go then abandons the whole session: ResourceExhausted is
// neither NotFound nor FailedPrecondition).
func TestRedteam2HalfTheLimitInFlightFillsMemory(t *testing.T) {
	s := New()
	applyAll(s, cmdCreate(1, 1), cmdCreate(2, 2))
	h := uint64(0)
	hold := func(name string) {
		h++
		mustCode(t, s, rtCall(KindAcquire, 2, h, h, name, false), OK)
	}
	hold("busy")
	c := newRT2Client(1)
	mine := c.begin()
	mustCode(t, s, c.req(KindAcquire, mine, "mine", false), OK)
	c.answered(mine)
	inFlight := 0
	for i := 0; i < 512; i++ {
		name := fmt.Sprintf("h%d", i)
		hold(name)
		seq := c.begin()
		mustCode(t, s, c.req(KindAcquire, seq, name, true), Queued)
		inFlight++
		try := c.begin()
		mustCode(t, s, c.req(KindAcquire, try, "busy", false), LockHeld)
		c.answered(try)
	}
	rel := c.begin()
	if r := s.Apply(ptr(c.req(KindRelease, rel, "mine", false))); r.Code != OK {
		m := &s.leases[id(1)].calls
		t.Fatalf("release of a held lock with %d calls in flight (limit %d) answered %v: the lease remembers %d answers and %d spans",
			inFlight+1, MaxCallsInFlight, r.Code, len(m.answers), len(m.gaps))
	}
}

func ptr(c Command) *Command { return &c }

// BenchmarkAcknowledgeWithWaits: the cost of a call of a session that has
// 0 or 400 calls waiting in queues (acknowledging is linear in the lease's
// memory). The red team measured 7.6 ms per call with 400 waits on the span
// representation (O(open × memory)); see the numbers in the commit log.
func BenchmarkAcknowledgeWithWaits(b *testing.B) {
	for _, waits := range []int{0, 400} {
		b.Run(fmt.Sprintf("waits=%d", waits), func(b *testing.B) {
			s := New()
			applyAll(s, cmdCreate(1, 1), cmdCreate(2, 2))
			h := uint64(0)
			hold := func(name string) {
				h++
				c := rtCall(KindAcquire, 2, h, h, name, false)
				s.Apply(&c)
			}
			hold("busy")
			c := newRT2Client(1)
			for i := 0; i < waits; i++ {
				name := fmt.Sprintf("h%d", i)
				hold(name)
				mustCode(b, s, c.req(KindAcquire, c.begin(), name, true), Queued)
				try := c.begin()
				mustCode(b, s, c.req(KindAcquire, try, "busy", false), LockHeld)
				c.answered(try)
			}
			b.ResetTimer()
			for range b.N {
				try := c.begin()
				cmd := c.req(KindAcquire, try, "busy", false)
				if r := s.Apply(&cmd); r.Code != LockHeld {
					b.Fatal(r.Code)
				}
				c.answered(try)
			}
		})
	}
}

// A protocol-following model of two sessions (client/calls.go semantics):
// new calls, lost replies, retries with fresh ack/open, late duplicates of
// old attempts (their old ack/open), cancelled waits, releases by the other
// lease. After every command: the snapshot round-trips to the same bytes
// and the restored state answers the next command identically; a late
// duplicate or retry of a call never changes anything but the memory; a
// retry's OK is a grant still held.
func TestRedteam2ProtocolModelSnapshotsAndExactlyOnce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := New()
		applyAll(s, cmdCreate(1, 1), cmdCreate(2, 2))
		clients := []*rt2Client{newRT2Client(1), newRT2Client(2)}
		sent := map[[2]uint64]Command{} // (lease, seq) → its first attempt
		var attempts []Command          // every attempt sent, for late duplicates
		names := []string{"a", "b", "c"}
		n := rapid.IntRange(1, 120).Draw(t, "n")
		var prev *State // restored from the snapshot taken before this command
		for i := 0; i < n; i++ {
			ci := rapid.IntRange(0, 1).Draw(t, "client")
			c := clients[ci]
			var cmd Command
			dup := false
			switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
			case op <= 4 || len(c.open) == 0: // a new call
				seq := c.begin()
				kind := KindAcquire
				if rapid.IntRange(0, 2).Draw(t, "rel") == 0 {
					kind = KindRelease
				}
				cmd = c.req(kind, seq, rapid.SampledFrom(names).Draw(t, "name"), rapid.Bool().Draw(t, "wait"))
				sent[[2]uint64{uint64(c.lease), seq}] = cmd
			case op <= 6: // a retry of an open call, with what the client acknowledges now
				var open []uint64
				for o := range c.open {
					open = append(open, o)
				}
				slices.Sort(open)
				seq := rapid.SampledFrom(open).Draw(t, "retry")
				first := sent[[2]uint64{uint64(c.lease), seq}]
				cmd = c.req(first.Kind, seq, first.Name, first.Wait)
				dup = true
			case op == 7 && len(attempts) > 0: // a late duplicate of any earlier attempt
				cmd = rapid.SampledFrom(attempts).Draw(t, "late")
				cmd.Open = slices.Clone(cmd.Open)
				dup = true
			case op == 8: // a waiting call's handler gives up
				var open []uint64
				for o := range c.open {
					open = append(open, o)
				}
				slices.Sort(open)
				seq := rapid.SampledFrom(open).Draw(t, "cancel")
				first := sent[[2]uint64{uint64(c.lease), seq}]
				cmd = Command{Kind: KindCancelWait, Lease: id(c.lease), Seq: seq, Name: first.Name}
			default: // time passes
				cmd = Command{Kind: KindTick, Elapsed: time.Millisecond}
			}
			before := withoutCalls(s)
			heldBefore := map[string]uint64{}
			for _, k := range s.locks {
				if g := k.grants[0]; !g.delayed() {
					heldBefore[k.name] = g.token
				}
			}
			cmd2 := cmd
			cmd2.Open = slices.Clone(cmd.Open)
			r := s.Apply(&cmd)
			if prev != nil {
				if r2 := prev.Apply(&cmd2); !reflect.DeepEqual(r, r2) {
					t.Fatalf("%+v: original answers %+v, the restored state %+v", cmd, r, r2)
				}
			}
			if cmd.Kind == KindAcquire || cmd.Kind == KindRelease {
				attempts = append(attempts, cmd)
				// The reply arrives, or is lost (the call stays open).
				if r.Code != Queued && r.Code != Invalid && r.Code != LeaseNotFound && rapid.IntRange(0, 2).Draw(t, "delivered") > 0 {
					c.answered(cmd.Seq)
				}
			}
			if dup && !bytes.Equal(before, withoutCalls(s)) {
				t.Fatalf("a retry or late duplicate %+v acted: %v", cmd, r.Code)
			}
			if dup && cmd.Kind == KindAcquire && r.Code == OK {
				if k := s.locks[cmd.Name]; k == nil || k.grants[0].holder != cmd.Lease || k.grants[0].token != r.Token || heldBefore[cmd.Name] != r.Token {
					t.Fatalf("retry %+v answered OK with token %d, not a grant still held", cmd, r.Token)
				}
			}
			checkInvariants(t, s)
			b := s.Marshal(nil)
			restored, err := Unmarshal(b)
			if err != nil {
				t.Fatalf("after %+v (%v): Unmarshal of Marshal: %v", cmd, r.Code, err)
			}
			if !bytes.Equal(b, restored.Marshal(nil)) {
				t.Fatalf("after %+v: snapshot does not round-trip", cmd)
			}
			prev = restored
		}
	})
}

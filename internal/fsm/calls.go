package fsm

import (
	"cmp"
	"slices"

	"github.com/fencehq/fence/internal/planted"
)

// calls is a lease's memory of its clients' calls (Acquire, Release), so
// that every call is executed at most once however often it arrives (Raft
// thesis §6.3, with selective acknowledgement). It tracks the call numbers
// below top (every number a request has carried or covered):
//   - answers: the remembered answer of each call not yet acknowledged;
//   - gaps: numbers the client said were still unanswered (its ack and open
//     calls) that have not arrived here yet;
//   - every other number below top is acknowledged: its answer reached the
//     client, and a call with that number that arrives again is refused
//     (Answered), never executed.
//
// A client acknowledges with each request: Ack (its lowest unanswered call,
// ≥ 1) and Open (its other unanswered calls between Ack and the request's own
// number); everything else below the request's number it has answers for.
// Acknowledgement only grows, so requests that arrive out of order cannot
// un-acknowledge anything. A call waiting in a queue is never forgotten,
// whatever a client claims. Memory is bounded: at most MaxCallsInFlight
// answers, and gaps only among the latest top-raising request's ack and
// open calls, so at most MaxCallsInFlight+1.
type calls struct {
	top     uint64   // every call number below it has been seen or covered
	gaps    []uint64 // increasing, below top, not among answers
	answers []call   // by seq, below top
}

// call remembers the answer to one Acquire or Release, so that a retry gets
// the same answer and is never executed twice. An Acquire that was queued is
// updated when its wait ends (granted or cancelled).
type call struct {
	seq   uint64
	req   RequestID
	kind  Kind
	code  Code
	token uint64 // the grant's token (OK), the held lock's (AlreadyHeld), the recorded run's (RanRecently)
}

// find returns the index of call seq in answers, or where it would go.
func (m *calls) find(seq uint64) (int, bool) {
	return slices.BinarySearchFunc(m.answers, seq, func(k call, seq uint64) int { return cmp.Compare(k.seq, seq) })
}

// acknowledged reports whether call seq was acknowledged: a late duplicate.
func (m *calls) acknowledged(seq uint64) bool {
	if seq >= m.top || planted.ReplayExecuted { // planted bug: a late duplicate runs again
		return false
	}
	if _, found := m.find(seq); found {
		return false
	}
	_, gap := slices.BinarySearch(m.gaps, seq)
	return !gap
}

// acknowledge takes in what a request of call seq says: every number below
// seq other than ack and open is answered. The request's own number is
// covered too (it is remembered or refused next). Linear in the memory.
func (m *calls) acknowledge(ack uint64, open []uint64, seq uint64) {
	unanswered := func(n uint64) bool {
		if n == ack || n >= seq {
			return true
		}
		_, found := slices.BinarySearch(open, n)
		return found
	}
	gaps := m.gaps[:0]
	for _, g := range m.gaps {
		if g != seq && unanswered(g) {
			gaps = append(gaps, g)
		}
	}
	if seq >= m.top { // numbers never seen before: the unanswered ones are gaps now
		if ack >= m.top && ack < seq {
			gaps = append(gaps, ack)
		}
		for _, o := range open {
			if o >= m.top {
				gaps = append(gaps, o)
			}
		}
		m.top = seq + 1
	}
	m.gaps = gaps
	m.answers = slices.DeleteFunc(m.answers, func(k call) bool { return k.code != Queued && !unanswered(k.seq) })
}

// remember records the answer to a new call (acknowledge has covered it).
func (m *calls) remember(k call) {
	i, _ := m.find(k.seq)
	m.answers = slices.Insert(m.answers, i, k)
}

// settle records how a queued Acquire ended (granted or cancelled).
func (m *calls) settle(seq uint64, code Code, token uint64) {
	if i, found := m.find(seq); found {
		m.answers[i].code, m.answers[i].token = code, token
	}
}

// outcome returns the remembered answer of call seq, if any.
func (m *calls) outcome(seq uint64) (call, bool) {
	i, found := m.find(seq)
	if !found {
		return call{}, false
	}
	return m.answers[i], true
}

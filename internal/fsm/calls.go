package fsm

import (
	"cmp"
	"slices"
)

// calls is a lease's memory of its clients' calls (Acquire, Release), so
// that every call is executed at most once however often it arrives (Raft
// thesis §6.3, with selective acknowledgement):
//   - answers: the remembered answer of each call not yet acknowledged;
//   - floor: every call numbered below it was acknowledged (its answer reached
//     the client); a call below it that arrives again is refused, not executed;
//   - done: spans of call numbers above the floor that were acknowledged out
//     of order (a call waiting in a queue holds the floor back, while later
//     calls are answered and acknowledged), refused the same way.
//
// A client acknowledges with each request: Ack (its lowest unanswered call)
// and Open (its other unanswered calls between Ack and the request's own
// number); everything else below the request's number it has answers for.
// Acknowledgement only ever grows, so requests that arrive out of order
// cannot un-acknowledge anything. A call waiting in a queue is never
// forgotten, whatever a client claims. Memory is bounded by the calls in
// flight: answers plus spans, at most MaxCallsInFlight.
type calls struct {
	floor   uint64
	answers []call // by seq, all at or above floor
	done    []span // by lo, disjoint, not adjacent, above floor, between answers
}

// call remembers the answer to one Acquire or Release, so that a retry gets
// the same answer and is never executed twice. An Acquire that was queued is
// updated when its wait ends (granted or cancelled).
type call struct {
	seq   uint64
	req   RequestID
	kind  Kind
	code  Code
	token uint64 // the grant's token (OK), or the held lock's (AlreadyHeld)
}

// span is a run of acknowledged call numbers, lo…hi inclusive.
type span struct{ lo, hi uint64 }

// find returns the index of call seq in answers, or where it would go.
func (m *calls) find(seq uint64) (int, bool) {
	return slices.BinarySearchFunc(m.answers, seq, func(k call, seq uint64) int { return cmp.Compare(k.seq, seq) })
}

// acknowledged reports whether call seq was acknowledged: a late duplicate.
func (m *calls) acknowledged(seq uint64) bool {
	if seq < m.floor {
		return true
	}
	i, found := slices.BinarySearchFunc(m.done, seq, func(s span, seq uint64) int { return cmp.Compare(s.lo, seq) })
	if found {
		return true
	}
	return i > 0 && m.done[i-1].hi >= seq
}

// size is what the memory holds, against MaxCallsInFlight.
func (m *calls) size() int { return len(m.answers) + len(m.done) }

// acknowledge takes in what a request of call seq acknowledges: every call
// below ack, and every call between ack and seq that is not in open (sorted,
// each in (ack, seq)). Ack 0 acknowledges nothing. Calls still queued are kept.
func (m *calls) acknowledge(ack uint64, open []uint64, seq uint64) {
	if ack == 0 {
		return
	}
	lo := ack + 1 // ack itself is unanswered
	for _, o := range open {
		if o > lo {
			m.markDone(lo, o-1)
		}
		lo = max(lo, o+1)
	}
	if seq > lo {
		m.markDone(lo, seq-1)
	}
	if ack > m.floor {
		m.markDone(m.floor, ack-1)
	}
	m.compact()
}

// markDone records lo…hi as acknowledged, except calls still queued (a
// wait is answered when granted or cancelled, never forgotten before).
func (m *calls) markDone(lo, hi uint64) {
	lo = max(lo, m.floor)
	for lo <= hi {
		end := hi
		i, _ := m.find(lo)
		for ; i < len(m.answers) && m.answers[i].seq <= hi; i++ {
			if m.answers[i].code == Queued {
				end = m.answers[i].seq - 1
				break
			}
		}
		if end >= lo {
			m.addSpan(span{lo, end})
		}
		if end == hi {
			return
		}
		lo = end + 2 // past the queued call
	}
}

// addSpan merges s into done and drops the answers it covers.
func (m *calls) addSpan(s span) {
	m.answers = slices.DeleteFunc(m.answers, func(k call) bool { return k.seq >= s.lo && k.seq <= s.hi })
	merged := m.done[:0:0]
	for _, d := range m.done {
		switch {
		case d.hi+1 < s.lo || s.hi+1 < d.lo:
			merged = append(merged, d)
		default:
			s = span{min(s.lo, d.lo), max(s.hi, d.hi)}
		}
	}
	i, _ := slices.BinarySearchFunc(merged, s.lo, func(d span, lo uint64) int { return cmp.Compare(d.lo, lo) })
	m.done = slices.Insert(merged, i, s)
}

// compact moves the floor up over the acknowledged spans that start at it.
func (m *calls) compact() {
	for len(m.done) > 0 && m.done[0].lo <= m.floor {
		m.floor = max(m.floor, m.done[0].hi+1)
		m.done = m.done[1:]
	}
	if len(m.done) == 0 {
		m.done = nil
	}
}

// remember records the answer to a new call.
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

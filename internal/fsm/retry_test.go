package fsm

import (
	"fmt"
	"testing"
	"time"
)

// The tests of this file each reproduce a hole of the retry and lock-delay
// rules found in review (safety issue items 3, 4, 5 and 13); each failed on
// the code before call numbers.

func applyAll(s *State, cmds ...Command) Result {
	var r Result
	for i := range cmds {
		r = s.Apply(&cmds[i])
	}
	return r
}

// Item 3: two Acquires without a request id must not share one grant.
func TestEmptyRequestIDRefused(t *testing.T) {
	s := New()
	applyAll(s, cmdCreate(1, 1))
	a := Command{Kind: KindAcquire, Lease: id(1), Seq: 1, Name: "x"}
	if r := s.Apply(&a); r.Code != Invalid {
		t.Fatalf("acquire without a request id: %v token %d, want invalid", r.Code, r.Token)
	}
	if r := s.Apply(&a); r.Code == OK {
		t.Fatalf("second acquire without a request id answered OK with token %d: two callers share one grant", r.Token)
	}
}

// Item 4: a late duplicate of a Release must not release a later grant.
func TestLateReleaseAfterReacquire(t *testing.T) {
	s := New()
	applyAll(s, cmdCreate(1, 1), cmdAcquire(1, 2, "x", false), cmdRelease(1, 3, "x"), cmdAcquire(1, 4, "x", false))
	late := cmdRelease(1, 3, "x")
	s.Apply(&late)
	if k, ok := s.Lock("x"); !ok || k.Holder != id(1) || k.Token != 2 {
		t.Fatalf("late duplicate of a release ended the new grant: lock %+v (held %v)", k, ok)
	}
}

// Item 4: a recalled grant that has since ended never answers OK.
func TestRecalledGrantAfterOthersHold(t *testing.T) {
	s := New()
	applyAll(s, cmdCreate(1, 1), cmdCreate(2, 2), cmdAcquire(1, 3, "x", false), cmdRelease(1, 4, "x"), cmdAcquire(2, 5, "x", false))
	retry := cmdAcquire(1, 3, "x", false)
	if r := s.Apply(&retry); r.Code == OK {
		t.Fatalf("retried acquire answered OK with token %d while lease 2 holds the lock", r.Token)
	}
}

// Item 5: a late duplicate of an early Acquire is never re-executed, however
// many calls came after it, and the memory of answers stays bounded by the
// calls not yet acknowledged.
func TestLateAcquireAfterManyCycles(t *testing.T) {
	s := New()
	applyAll(s, cmdCreate(1, 1))
	first := Command{Kind: KindAcquire, RequestID: RequestID{0xAA}, Lease: id(1), Seq: 1, Name: "x"}
	applyAll(s, first)
	seq := uint64(1)
	call := func(kind Kind) Command {
		seq++
		// the client acknowledges every call before this one: it had their answers
		return Command{Kind: kind, RequestID: RequestID{byte(seq >> 8), byte(seq), 1}, Lease: id(1), Seq: seq, Ack: seq, Name: "x"}
	}
	for range 129 {
		applyAll(s, call(KindRelease), call(KindAcquire))
	}
	applyAll(s, call(KindRelease))
	if n := s.leases[id(1)].calls.size(); n != 1 {
		t.Fatalf("the lease remembers %d answers with one call unacknowledged", n)
	}
	before := s.Token()
	r := s.Apply(&first)
	if s.Token() != before || r.Code == OK {
		t.Fatalf("late duplicate of the first acquire was executed again: %v token %d (counter %d → %d)", r.Code, r.Token, before, s.Token())
	}
}

// Item 13: a GrantNext from an earlier lock-delay must not end a later one.
func TestStaleGrantNextIgnored(t *testing.T) {
	s := New()
	delay := func(l, r byte) Command {
		c := cmdAcquire(l, r, "x", true)
		c.LockDelay = 5 * time.Second
		return c
	}
	applyAll(s, cmdCreate(1, 1), cmdCreate(2, 2), delay(1, 3), delay(2, 4),
		Command{Kind: KindExpire, Lease: id(1)})
	grantNext := Command{Kind: KindGrantNext, Name: "x", Token: 1} // the token whose expiry began the delay
	if r := s.Apply(&grantNext); r.Code != OK {
		t.Fatalf("grant-next after the first delay: %v %s", r.Code, r.Reason)
	}
	applyAll(s, Command{Kind: KindExpire, Lease: id(2)}) // lease 2 held it: a second delay begins
	s.Apply(&grantNext)                                  // the first delay's GrantNext, retried late
	if k, _ := s.Lock("x"); !k.Delayed {
		t.Fatalf("a retried grant-next of the first delay ended the second delay early: %+v", k)
	}
}

// size is what a lease's memory of calls holds: answers and gaps.
func (m *calls) size() int { return len(m.answers) + len(m.gaps) }

// TestRetryAnsweredEveryTime: a call retried twice (both replies lost) gets
// its first answer both times: a retry must not forget the call's own answer.
func TestRetryAnsweredEveryTime(t *testing.T) {
	s := New()
	applyAll(s, cmdCreate(1, 1))
	// call 1 of the lease is still unanswered too (ack 1)
	acq := Command{Kind: KindAcquire, RequestID: RequestID{0xA}, Lease: id(1), Seq: 2, Ack: 1, Name: "x"}
	first := s.Apply(&acq)
	for i := range 2 {
		if r := s.Apply(&acq); r.Code != OK || r.Token != first.Token {
			t.Fatalf("retry %d: %v token %d, want ok token %d", i+1, r.Code, r.Token, first.Token)
		}
	}
}

// TestCallsArrivingOutOfOrderBothRun: call 5 (which names call 4 as its ack:
// still unanswered) arrives before call 4; call 4 is then executed, not
// refused as a late duplicate.
func TestCallsArrivingOutOfOrderBothRun(t *testing.T) {
	s := New()
	applyAll(s, cmdCreate(1, 1))
	for seq := uint64(1); seq <= 3; seq++ { // calls 1–3, each acknowledging the ones before
		c := Command{Kind: KindAcquire, RequestID: RequestID{byte(seq)}, Lease: id(1), Seq: seq, Ack: seq, Name: fmt.Sprintf("l%d", seq)}
		if r := s.Apply(&c); r.Code != OK {
			t.Fatalf("call %d: %v", seq, r.Code)
		}
	}
	five := Command{Kind: KindAcquire, RequestID: RequestID{5}, Lease: id(1), Seq: 5, Ack: 4, Name: "l5"}
	four := Command{Kind: KindAcquire, RequestID: RequestID{4}, Lease: id(1), Seq: 4, Ack: 4, Name: "l4"}
	if r := s.Apply(&five); r.Code != OK {
		t.Fatalf("call 5: %v", r.Code)
	}
	if r := s.Apply(&four); r.Code != OK || r.Token != 5 {
		t.Fatalf("call 4, arriving after call 5 that named it unanswered: %v token %d, want ok token 5", r.Code, r.Token)
	}
}

package fsm

import "testing"

// TestRecallNamesTheHolder: a retried TryLock that was refused LockHeld is
// answered LockHeld again with the holder's lease number and token; a
// retried Acquire that is still queued is answered Queued with the caller's
// own lease number and no token (never the holder's).
func TestRecallNamesTheHolder(t *testing.T) {
	s := New()
	applyAll(s, cmdCreate(1, 1), cmdCreate(2, 2), cmdCreate(3, 3))
	holder := Command{Kind: KindAcquire, RequestID: RequestID{10}, Lease: id(1), Seq: 1, Ack: 1, Name: "a"}
	try := Command{Kind: KindAcquire, RequestID: RequestID{20}, Lease: id(2), Seq: 1, Ack: 1, Name: "a"}
	wait := Command{Kind: KindAcquire, RequestID: RequestID{30}, Lease: id(3), Seq: 1, Ack: 1, Name: "a", Wait: true}
	for _, c := range []Command{holder, try, wait} {
		s.Apply(&c)
	}
	for i := range 2 { // two retries of the refused call
		if r := s.Apply(&try); r.Code != LockHeld || r.LeaseNumber != 1 || r.Token != 1 {
			t.Fatalf("try %d: %v lease #%d token %d, want lock held by #1 with token 1", i, r.Code, r.LeaseNumber, r.Token)
		}
	}
	if r := s.Apply(&wait); r.Code != Queued || r.LeaseNumber != 3 || r.Token != 0 {
		t.Fatalf("retried wait: %v lease #%d token %d, want queued, #3, no token", r.Code, r.LeaseNumber, r.Token)
	}
}

// TestCallsInFlightLimit: a lease remembers at most MaxCallsInFlight (1024)
// unanswered calls: with 1024 open (each request lists the others as open),
// call 1025 is refused TooManyCalls and not executed, and the state with
// 1024 still marshals into a snapshot Unmarshal accepts.
func TestCallsInFlightLimit(t *testing.T) {
	s := New()
	applyAll(s, cmdCreate(1, 1))
	var open []uint64
	release := func(seq uint64) Result {
		c := Command{Kind: KindRelease, RequestID: RequestID{byte(seq), byte(seq >> 8), 0xCA}, Lease: id(1), Seq: seq, Ack: 1, Open: open, Name: "a"}
		return s.Apply(&c)
	}
	for seq := uint64(1); seq <= 1024; seq++ {
		if r := release(seq); r.Code != NotHolder {
			t.Fatalf("call %d: %v, want not holder", seq, r.Code)
		}
		if seq > 1 {
			open = append(open, seq)
		}
	}
	if r := release(1025); r.Code != TooManyCalls {
		t.Fatalf("call 1025 with 1024 unanswered: %v, want too many calls", r.Code)
	}
	if _, err := Unmarshal(s.Marshal(nil)); err != nil {
		t.Fatalf("a lease with 1024 calls in flight does not restore: %v", err)
	}
}

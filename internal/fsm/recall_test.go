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

package fsm

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// Red-team tests: each one reproduced a violation of a stated property (a red
// team on the call-numbering change found them; each failed before its fix).
// The comments describe the hole as it was.

// rtCall is a numbered call of lease l with its own request id (derived
// from seq, so the same seq is a retry) and the given ack.
func rtCall(kind Kind, l byte, seq, ack uint64, name string, wait bool) Command {
	r := RequestID{0xEE, byte(seq), byte(seq >> 8), byte(seq >> 16), l}
	return Command{Kind: kind, RequestID: r, Lease: id(l), Seq: seq, Ack: ack, Name: name, Wait: wait}
}

// A lease with one Acquire waiting in a queue (a Lock blocked on a busy lock,
// for as long as the other holder keeps it) can make only ~1023 more calls:
// every call after the waiting one is remembered until the wait ends, however
// far the client moves its ack (the floor is clamped at the waiting call), so
// the lease's 1025th call, here a Release of a lock it holds, is refused with
// TooManyCalls. The holder cannot release: the client then abandons the whole
// session (Lease.Release: ResourceExhausted is neither NotFound nor
// FailedPrecondition), losing every lock of it.
func TestRedteamLongWaitWedgesLease(t *testing.T) {
	s := New()
	applyAll(s, cmdCreate(1, 1), cmdCreate(2, 2))
	mustCode(t, s, rtCall(KindAcquire, 2, 1, 1, "busy", false), OK)  // lease 2 holds busy
	mustCode(t, s, rtCall(KindAcquire, 2, 2, 2, "other", false), OK) // and other
	mustCode(t, s, rtCall(KindAcquire, 1, 1, 1, "busy", true), Queued)
	mustCode(t, s, rtCall(KindAcquire, 1, 2, 2, "mine", false), OK)
	// Lease 1 keeps trying another lock; it acknowledges each answer at once
	// (ack = its own seq: the most it may acknowledge).
	seq := uint64(3)
	for ; seq < MaxCallsInFlight+1; seq++ {
		mustCode(t, s, rtCall(KindAcquire, 1, seq, seq, "other", false), LockHeld)
	}
	c := rtCall(KindRelease, 1, seq, seq, "mine", false)
	if r := s.Apply(&c); r.Code != OK {
		t.Fatalf("release of a held lock (call %d, every earlier answer but the waiting call's acknowledged) refused: %v; the lease remembers %d calls below top %d",
			seq, r.Code, s.leases[id(1)].calls.size(), s.leases[id(1)].calls.top)
	}
}

// A call refused with TooManyCalls is answered (definitively: not executed)
// but not remembered: the memory is full. A late duplicate of it must still
// never be executed, however the memory drains later: the client's later
// calls acknowledge it (it is not among their open calls).
func TestRedteamRefusedCallActsLate(t *testing.T) {
	s := New()
	applyAll(s, cmdCreate(1, 1), cmdCreate(2, 2))
	for i := range uint64(MaxCallsInFlight) { // lease 2 holds q0…q1023
		mustCode(t, s, rtCall(KindAcquire, 2, i+1, i+1, fmt.Sprintf("q%d", i), false), OK)
	}
	// Lease 1 waits for each of them: 1024 calls truly unanswered.
	open := func(seq uint64) []uint64 { // calls 2…seq−1 are all open (1 is the ack)
		var o []uint64
		for i := uint64(2); i < seq; i++ {
			o = append(o, i)
		}
		return o
	}
	for seq := uint64(1); seq <= MaxCallsInFlight; seq++ {
		c := rtCall(KindAcquire, 1, seq, 1, fmt.Sprintf("q%d", seq-1), true)
		c.Open = open(seq)
		mustCode(t, s, c, Queued)
	}
	refused := uint64(MaxCallsInFlight + 1)
	late := rtCall(KindAcquire, 1, refused, 1, "b", false)
	late.Open = open(refused)
	mustCode(t, s, late, TooManyCalls) // the client is told: not executed
	// Lease 2 ends: every wait of lease 1 is granted and answered.
	mustCode(t, s, Command{Kind: KindRevoke, RequestID: RequestID{0xBB}, Lease: id(2)}, OK)
	// The client's next call acknowledges everything: it has every answer.
	next := refused + 1
	mustCode(t, s, rtCall(KindAcquire, 1, next, next, "h", false), OK)
	if r := s.Apply(&late); r.Code != Answered {
		k, _ := s.Lock("b")
		t.Fatalf("late duplicate of call %d (answered TooManyCalls, not executed) answered %v now (b: %+v, floor %d)",
			refused, r.Code, k, s.leases[id(1)].calls.top)
	}
	if n := s.leases[id(1)].calls.size(); n > 1024/2 {
		t.Fatalf("the lease still remembers %d calls after acknowledging all but its grants", n)
	}
}

func mustCode(t testing.TB, s *State, c Command, want Code) Result {
	t.Helper()
	r := s.Apply(&c)
	if r.Code != want {
		t.Fatalf("%v seq %d of lease %v on %q: %v, want %v (%s)", c.Kind, c.Seq, c.Lease, c.Name, r.Code, want, r.Reason)
	}
	return r
}

var _ = time.Second

// Unmarshal promises to refuse an inconsistent state. These states cannot
// arise from Apply, yet each restores without error and then misbehaves.
func TestRedteamUnmarshalAcceptsInconsistentState(t *testing.T) {
	base := func() *State {
		s := New()
		applyAll(s, cmdCreate(1, 1), cmdCreate(2, 2), cmdCreate(3, 3))
		applyAll(s, rtCall(KindAcquire, 1, 1, 1, "a", false), rtCall(KindAcquire, 1, 2, 2, "b", false))
		applyAll(s, rtCall(KindAcquire, 2, 1, 1, "a", true), rtCall(KindAcquire, 2, 2, 2, "b", true))
		return s
	}
	cases := []struct {
		name   string
		mutate func(s *State)
	}{
		{"two locks with one token (a token granted twice)", func(s *State) { s.locks["b"].grants[0].token = s.locks["a"].grants[0].token }},
		{"a held lock with token 0", func(s *State) { s.locks["a"].grants[0].token = 0 }},
		{"two leases with one create request id", func(s *State) { s.leases[id(2)].createReq = s.leases[id(1)].createReq }},
		{"two leases with one number", func(s *State) { s.leases[id(2)].number = s.leases[id(1)].number }},
		{"a waiter's lock-delay above MaxLockDelay", func(s *State) { s.locks["a"].waiters[0].lockDelay = time.Hour }},
		{"a held lock's lock-delay above MaxLockDelay", func(s *State) { s.locks["a"].grants[0].lockDelay = time.Hour }},
		{"two waits naming one waiting call", func(s *State) { s.locks["b"].waiters[0].seq = s.locks["a"].waiters[0].seq }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := base()
			tc.mutate(s)
			if _, err := Unmarshal(s.Marshal(nil)); err == nil {
				t.Errorf("Unmarshal accepted a state with %s", tc.name)
			}
		})
	}
}

// Restore in the middle of a history, then keep applying the same commands
// to both states: every result and the final bytes must agree.
func TestRedteamRestoredStateContinuesIdentically(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := New()
		n := rapid.IntRange(1, 200).Draw(t, "n")
		cut := rapid.IntRange(0, n).Draw(t, "cut")
		var r *State
		for i := 0; i < n; i++ {
			if i == cut {
				var err error
				if r, err = Unmarshal(s.Marshal(nil)); err != nil {
					t.Fatalf("restore: %v", err)
				}
			}
			c := genCommand(t)
			if rapid.IntRange(0, 3).Draw(t, "bigseq") == 0 && (c.Kind == KindAcquire || c.Kind == KindRelease || c.Kind == KindCancelWait) {
				c.Seq += uint64(rapid.IntRange(0, 30).Draw(t, "seqadd"))
				if c.Kind != KindCancelWait {
					c.Ack = uint64(rapid.IntRange(0, int(c.Seq)).Draw(t, "ack2"))
					c.RequestID = RequestID{byte(c.Seq), c.RequestID[1]}
				}
			}
			c2 := c
			r1 := s.Apply(&c)
			if r != nil {
				if r2 := r.Apply(&c2); !reflect.DeepEqual(r1, r2) {
					t.Fatalf("command %d %+v: original %+v, restored %+v", i, c, r1, r2)
				}
			}
			checkInvariants(t, s)
		}
		if r != nil && !bytes.Equal(s.Marshal(nil), r.Marshal(nil)) {
			t.Fatal("restored state diverged")
		}
	})
}

// A retry gets "the first answer, as things stand now". An Acquire of a lock
// the lease holds is first answered AlreadyHeld with the grant's token (the
// server says "this lease already holds lock x (token 1)"); its retry, with
// nothing changed, loses the token, and the server then says "this lease is
// already waiting for lock x", which is false.
func TestRedteamAlreadyHeldRetryLosesToken(t *testing.T) {
	s := New()
	applyAll(s, cmdCreate(1, 1))
	mustCode(t, s, rtCall(KindAcquire, 1, 1, 1, "x", false), OK)
	first := mustCode(t, s, rtCall(KindAcquire, 1, 2, 2, "x", false), AlreadyHeld)
	retry := mustCode(t, s, rtCall(KindAcquire, 1, 2, 2, "x", false), AlreadyHeld)
	if retry.Token != first.Token {
		t.Fatalf("retry of an AlreadyHeld acquire answers token %d, the first answer had %d (the lock is still held)", retry.Token, first.Token)
	}
}

// A retried try-acquire refused LockHeld re-describes the holder "as things
// stand now", but starts from the caller's own lease number: when the lock is
// free or in lock-delay (no holder), the retry's LockHeld names the CALLER as
// the holder (the first answer named nobody).
func TestRedteamLockHeldRetryNamesCallerAsHolder(t *testing.T) {
	s := New()
	applyAll(s, cmdCreate(1, 1), cmdCreate(2, 2))
	c := rtCall(KindAcquire, 2, 1, 1, "x", false)
	c.LockDelay = time.Second
	mustCode(t, s, c, OK)
	mustCode(t, s, Command{Kind: KindExpire, Lease: id(2)}, OK) // x in lock-delay, no holder
	first := mustCode(t, s, rtCall(KindAcquire, 1, 1, 1, "x", false), LockHeld)
	retry := mustCode(t, s, rtCall(KindAcquire, 1, 1, 1, "x", false), LockHeld)
	if retry.LeaseNumber != first.LeaseNumber {
		t.Fatalf("retry of a LockHeld try-acquire names holder lease #%d (the caller is #%d); the first answer named #%d, and nobody holds x",
			retry.LeaseNumber, s.leases[id(1)].number, first.LeaseNumber)
	}
}

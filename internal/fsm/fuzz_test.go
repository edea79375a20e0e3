package fsm

import (
	"bytes"
	"testing"
	"time"
)

// FuzzDecodeBatch feeds arbitrary bytes to the log decoder. It must never
// panic; whatever it accepts must be valid, re-encode to the same bytes, and
// apply without breaking the state's invariants.
func FuzzDecodeBatch(f *testing.F) {
	f.Add(EncodeBatch(nil, []Command{cmdCreate(1, 1), cmdAcquire(1, 2, "a", true)}))
	f.Add(EncodeBatch(nil, []Command{{Kind: KindPut, RequestID: RequestID{1}, Name: "k", Value: []byte("v"), Token: 1}, {Kind: KindTick, Elapsed: time.Second}}))
	withID := cmdCreate(3, 3)
	withID.Identity = "alice"
	f.Add(EncodeBatch(nil, []Command{withID, cmdCreate(4, 4)}))                                                           // version 3: a lease with an identity
	f.Add(EncodeBatch(nil, []Command{withID, cmdOnce(3, 5, "a", true, day), cmdRan(3, 6, "a", 1000), tick(time.Second)})) // version 4: once-per
	sem := cmdSem(3, 7, "s", true, 3)
	f.Add(EncodeBatch(nil, []Command{withID, sem, cmdRead(3, 8, "rw", false)}))                                                                                                // version 5: permits, shared
	f.Add(EncodeBatch(nil, []Command{withID, cmdAcquire(3, 9, "a", false), cmdAcquire(3, 10, "b", true), cmdRelock(3, 11, "a", 1), withPermits(cmdRelock(3, 12, "s", 2), 3)})) // version 6: relocks
	f.Add([]byte{1, 1, 99})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		cmds, err := DecodeBatch(b)
		if err != nil {
			return
		}
		if re := EncodeBatch(nil, cmds); !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical bytes %x (re-encodes as %x)", b, re)
		}
		s := New()
		for i := range cmds {
			s.Apply(&cmds[i])
		}
		checkInvariants(t, s)
	})
}

// FuzzUnmarshal feeds arbitrary bytes to the snapshot decoder: never panic;
// accept only consistent states that marshal back to the same bytes.
func FuzzUnmarshal(f *testing.F) {
	s := New()
	for _, c := range []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdAcquire(1, 3, "a", false), cmdAcquire(2, 4, "a", true),
		{Kind: KindPut, RequestID: RequestID{1}, Name: "k", Value: []byte("v"), Token: 1}} {
		s.Apply(&c)
	}
	f.Add(s.Marshal(nil))
	withID := cmdCreate(3, 3)
	withID.Identity = "alice"
	s.Apply(&withID)
	f.Add(s.Marshal(nil)) // version 4: a lease with an identity
	for _, c := range []Command{cmdOnce(3, 5, "b", false, day), cmdRan(3, 6, "b", 1000), cmdOnce(3, 7, "c", false, day), cmdOnce(2, 8, "c", true, time.Hour)} {
		s.Apply(&c)
	}
	f.Add(s.Marshal(nil)) // version 5: a recorded run, a grant and a waiter with windows
	f.Add(onceSnap().bytes())
	for _, c := range []Command{cmdSem(1, 9, "s", false, 2), cmdSem(2, 10, "s", false, 2), cmdSem(3, 11, "s", true, 2),
		cmdRead(1, 12, "rw", false), cmdRead(2, 13, "rw", false), cmdAcquire(3, 14, "rw", true), cmdRead(3, 15, "x", false)} {
		s.Apply(&c)
	}
	f.Add(s.Marshal(nil)) // version 6: a full semaphore, readers, a queued writer
	for _, c := range []Command{cmdRelock(1, 16, "s", 99), withPermits(cmdRelock(2, 17, "s", 2), 2)} {
		s.Apply(&c)
	}
	f.Add(s.Marshal(nil)) // version 7: a relock refused NotHolder, one granted

	f.Add(New().Marshal(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Unmarshal(b)
		if err != nil {
			return
		}
		checkInvariants(t, s)
		if !bytes.Equal(s.Marshal(nil), b) {
			t.Fatal("accepted a snapshot that does not marshal back to itself")
		}
	})
}

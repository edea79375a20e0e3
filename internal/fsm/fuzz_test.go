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
	f.Add(EncodeBatch(nil, []Command{withID, cmdCreate(4, 4)})) // version 3: a lease with an identity
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

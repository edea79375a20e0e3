package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"
)

// The codec tests spell entries out byte by byte, from the format in the
// comment at the top of codec.go, so a decoder that drifts from it fails.

func rep(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

func cat(parts ...[]byte) []byte { return slices.Concat(parts...) }

// TestEncodeBatchBytes: the exact bytes of an Acquire and a Tick.
func TestEncodeBatchBytes(t *testing.T) {
	cmds := []Command{
		{Kind: KindAcquire, RequestID: RequestID{7}, Lease: LeaseID{9}, Seq: 300, Ack: 2, Name: "ab", Wait: true, LockDelay: 5},
		{Kind: KindTick, Elapsed: 100 * time.Millisecond},
	}
	want := cat(
		[]byte{2, 2},                                            // version 2 (no identity), two commands
		[]byte{5}, []byte{7}, rep(0, 15), []byte{9}, rep(0, 15), // acquire, request id, lease
		[]byte{0xac, 0x02, 2, 0},           // seq 300, ack 2, no open calls
		[]byte{2, 'a', 'b', 1, 5},          // name, wait, lock-delay 5ns
		[]byte{10, 0x80, 0xc2, 0xd7, 0x2f}, // tick of 100,000,000 ns
	)
	got := EncodeBatch(nil, cmds)
	if !bytes.Equal(got, want) {
		t.Fatalf("EncodeBatch:\n got %x\nwant %x", got, want)
	}
	back, err := DecodeBatch(want)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != 2 || back[0].Seq != 300 || back[0].Ack != 2 || back[0].Name != "ab" || !back[0].Wait || back[0].LockDelay != 5 ||
		back[0].RequestID != (RequestID{7}) || back[0].Lease != (LeaseID{9}) || back[1].Elapsed != 100*time.Millisecond {
		t.Fatalf("decoded %+v", back)
	}
}

// TestDecodeBatchEdges: entries at the edge of a rule are accepted: no
// commands, a 16-byte id that ends the entry, strings of the limit's length
// and strings that end the entry.
func TestDecodeBatchEdges(t *testing.T) {
	name256 := rep('n', MaxNameLen)
	for _, tc := range []struct {
		name string
		b    []byte
		want []Command
	}{
		{"no commands", []byte{2, 0}, []Command{}},
		{"renew: the lease id ends the entry", cat([]byte{2, 1, 2, 1}, rep(0, 15)), []Command{{Kind: KindRenew, Lease: LeaseID{1}}}},
		{"set-node: the address ends the entry", []byte{2, 1, 11, 1, 'a', 3, 'h', ':', '1'}, []Command{{Kind: KindSetNode, Name: "a", Addr: "h:1"}}},
		{"grant-next: a name of 256 bytes", cat([]byte{2, 1, 8, 0x80, 0x02}, name256, []byte{1}), []Command{{Kind: KindGrantNext, Name: string(name256), Token: 1}}},
		{"tick of a minute", []byte{2, 1, 10, 0x80, 0xb0, 0x9d, 0xc2, 0xdf, 0x01}, []Command{{Kind: KindTick, Elapsed: time.Minute}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeBatch(tc.b)
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("decoded %d commands, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if got[i].Kind != tc.want[i].Kind || got[i].Lease != tc.want[i].Lease || got[i].Name != tc.want[i].Name ||
					got[i].Addr != tc.want[i].Addr || got[i].Token != tc.want[i].Token || got[i].Elapsed != tc.want[i].Elapsed {
					t.Fatalf("command %d: %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// TestDecodeBatchRefuses: each entry breaks one rule and is refused with
// ErrCorrupt, never taken for an old format.
func TestDecodeBatchRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"newer version", []byte{5, 0}},
		{"count missing", []byte{2}},
		{"count above the bytes left", []byte{2, 2, 10, 0}},
		// 2^62 commands: refused before the decoder sizes a slice for them
		// (make would panic).
		{"count of 2^62", []byte{2, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40, 10, 0}},
		{"count above the batch limit", cat([]byte{2, 0x81, 0x80, 0x40}, rep(0, 1<<20+1))},
		{"trailing byte", []byte{2, 1, 10, 0, 0}},
		{"unknown kind", []byte{2, 1, 99}},
		{"kind 0", []byte{2, 1, 0}},
		{"truncated lease id", cat([]byte{2, 1, 2}, rep(1, 15))},
		{"truncated varint", []byte{2, 1, 10, 0x80}},
		{"non-canonical varint", []byte{2, 1, 10, 0x80, 0x00}},
		{"boolean 2", cat([]byte{2, 1, 5}, rep(1, 32), []byte{1, 0, 1, 'a', 2, 0})},
		{"name of 257 bytes", cat([]byte{2, 1, 8, 0x81, 0x02}, rep('n', MaxNameLen+1), []byte{1})},
		{"string past the end", []byte{2, 1, 11, 1, 'a', 4, 'h', ':', '1'}},
		{"duration above 2^62", []byte{2, 1, 10, 0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40}},
		{"tick above a minute", []byte{2, 1, 10, 0x81, 0xb0, 0x9d, 0xc2, 0xdf, 0x01}},
		{"invalid command (token 0)", []byte{2, 1, 8, 1, 'a', 0}},
		{"second command invalid", []byte{2, 2, 10, 0, 8, 1, 'a', 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmds, err := DecodeBatch(tc.b)
			if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrOldFormat) || cmds != nil {
				t.Fatalf("DecodeBatch(%x) = %d commands, %v; want ErrCorrupt", tc.b, len(cmds), err)
			}
		})
	}
}

// TestDecodeBatchOldFormat: version 1 entries (before call numbers) are
// refused as an old format.
func TestDecodeBatchOldFormat(t *testing.T) {
	for _, b := range [][]byte{{1, 0}, {0, 0}} {
		if _, err := DecodeBatch(b); !errors.Is(err, ErrOldFormat) || errors.Is(err, ErrCorrupt) {
			t.Fatalf("version %d: %v, want ErrOldFormat", b[0], err)
		}
	}
}

// A lease's identity is in version 3 entries; a version-2 CreateLease (from
// before identities) is read with none, and the identity of a retry must be
// its creator's.
func TestCreateLeaseIdentity(t *testing.T) {
	c := Command{Kind: KindCreateLease, RequestID: RequestID{1}, Lease: LeaseID{2}, TTL: time.Second, Owner: "o", Identity: "alice"}
	enc := EncodeBatch(nil, []Command{c})
	back, err := DecodeBatch(enc)
	if err != nil || len(back) != 1 || back[0].Identity != "alice" || enc[0] != 3 {
		t.Fatalf("round trip: %+v %v (version %d, want 3)", back, err, enc[0])
	}
	v2 := cat([]byte{2, 1, 1}, []byte{1}, rep(0, 15), []byte{2}, rep(0, 15), []byte{0x80, 0x94, 0xeb, 0xdc, 0x03, 1, 'o'})
	back, err = DecodeBatch(v2)
	if err != nil || len(back) != 1 || back[0].Identity != "" || back[0].Owner != "o" || back[0].TTL != time.Second {
		t.Fatalf("version 2: %+v %v", back, err)
	}
	if again := EncodeBatch(nil, back); !bytes.Equal(again, v2) {
		t.Fatalf("a lease without an identity is not written as version 2: %x", again)
	}
	s := New()
	if r := s.Apply(&c); r.Code != OK {
		t.Fatal(r)
	}
	retry := c
	retry.Identity = "mallory"
	if r := s.Apply(&retry); r.Code != Invalid || r.Lease != (LeaseID{}) {
		t.Fatalf("another identity's retry of the request: %+v", r)
	}
	if r := s.Apply(&c); r.Code != OK || r.Lease != c.Lease {
		t.Fatalf("the creator's retry: %+v", r)
	}
	if l, _ := s.Lease(c.Lease); l.Identity != "alice" {
		t.Fatalf("lease identity %q", l.Identity)
	}
	bad := c
	bad.Identity = "a\x00b"
	if err := bad.Validate(); err == nil {
		t.Fatal("an identity with a control character is valid")
	}
}

// Once-per fields are in version 4 entries: an Acquire's OncePer after
// Addr's place, a Release's Ran and Wall. An entry without them is written
// in the older version it fits, and a version-4 entry that needs no
// version-4 field is refused as non-canonical.
func TestOncePerEntryBytes(t *testing.T) {
	head := func(kind byte) []byte {
		return cat([]byte{kind, 7}, rep(0, 15), []byte{9}, rep(0, 15), []byte{3, 3, 0})
	} // ids, seq 3, ack 3, no open
	for _, tc := range []struct {
		name string
		cmd  Command
		want []byte
	}{
		{"acquire with a window", Command{Kind: KindAcquire, RequestID: RequestID{7}, Lease: LeaseID{9}, Seq: 3, Ack: 3, Name: "a", OncePer: 300},
			cat([]byte{4, 1}, head(5), []byte{1, 'a', 0, 0}, []byte{0xac, 0x02})}, // name, wait, lock-delay, once-per 300ns
		{"release that records a run", Command{Kind: KindRelease, RequestID: RequestID{7}, Lease: LeaseID{9}, Seq: 3, Ack: 3, Name: "a", Ran: true, Wall: 1000},
			cat([]byte{4, 1}, head(6), []byte{1, 'a', 1, 0xe8, 0x07})}, // name, ran, wall 1000
		{"release without a run: version 2", Command{Kind: KindRelease, RequestID: RequestID{7}, Lease: LeaseID{9}, Seq: 3, Ack: 3, Name: "a"},
			cat([]byte{2, 1}, head(6), []byte{1, 'a'})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := EncodeBatch(nil, []Command{tc.cmd}); !bytes.Equal(got, tc.want) {
				t.Fatalf("EncodeBatch:\n got %x\nwant %x", got, tc.want)
			}
			back, err := DecodeBatch(tc.want)
			if err != nil || len(back) != 1 || back[0].OncePer != tc.cmd.OncePer || back[0].Ran != tc.cmd.Ran || back[0].Wall != tc.cmd.Wall || back[0].Name != "a" {
				t.Fatalf("decoded %+v, %v", back, err)
			}
		})
	}
	release := cat(head(6), []byte{1, 'a'})
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"version 4 without a version-4 field", cat([]byte{4, 1}, release, []byte{0, 0})},
		{"ran byte 2", cat([]byte{4, 1}, release, []byte{2, 1})},
		{"wall without ran", cat([]byte{4, 1}, release, []byte{0, 1})},
		{"ran without wall", cat([]byte{4, 1}, release, []byte{1, 0})},
		{"wall above 2^63-1", cat([]byte{4, 1}, release, []byte{1}, binary.AppendUvarint(nil, 1<<63))},
		{"window above the limit", cat([]byte{4, 1, 5, 7}, rep(0, 15), []byte{9}, rep(0, 15), []byte{3, 3, 0, 1, 'a', 0, 0}, binary.AppendUvarint(nil, uint64(MaxOncePer)+1))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmds, err := DecodeBatch(tc.b)
			if !errors.Is(err, ErrCorrupt) || cmds != nil {
				t.Fatalf("DecodeBatch(%x) = %d commands, %v; want ErrCorrupt", tc.b, len(cmds), err)
			}
		})
	}
}

// TestPermitsEntryBytes: an Acquire of a semaphore or a shared Acquire is
// written in version 5 (permits uvarint, then shared), every other entry
// as before; a version-5 entry without them, a permit count of 1 or above
// the limit, a shared semaphore acquire and a non-canonical boolean are
// refused.
func TestPermitsEntryBytes(t *testing.T) {
	acq := cat([]byte{5, 7}, rep(0, 15), []byte{9}, rep(0, 15), []byte{3, 3, 0, 1, 's', 1, 0}) // ids, seq 3, ack 3, no open, name, wait, lock-delay
	for _, tc := range []struct {
		name string
		cmd  Command
		want []byte
	}{
		{"semaphore of 3", Command{Kind: KindAcquire, RequestID: RequestID{7}, Lease: LeaseID{9}, Seq: 3, Ack: 3, Name: "s", Wait: true, Permits: 3},
			cat([]byte{5, 1}, acq, []byte{0, 3, 0})}, // once-per 0, permits 3, shared 0
		{"shared", Command{Kind: KindAcquire, RequestID: RequestID{7}, Lease: LeaseID{9}, Seq: 3, Ack: 3, Name: "s", Wait: true, Shared: true},
			cat([]byte{5, 1}, acq, []byte{0, 0, 1})},
		{"a mutex: version 2", Command{Kind: KindAcquire, RequestID: RequestID{7}, Lease: LeaseID{9}, Seq: 3, Ack: 3, Name: "s", Wait: true},
			cat([]byte{2, 1}, acq)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := EncodeBatch(nil, []Command{tc.cmd}); !bytes.Equal(got, tc.want) {
				t.Fatalf("EncodeBatch:\n got %x\nwant %x", got, tc.want)
			}
			back, err := DecodeBatch(tc.want)
			if err != nil || len(back) != 1 || back[0].Permits != tc.cmd.Permits || back[0].Shared != tc.cmd.Shared {
				t.Fatalf("decoded %+v, %v", back, err)
			}
		})
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"version 5 without a version-5 field", cat([]byte{5, 1}, acq, []byte{0, 0, 0})},
		{"one permit", cat([]byte{5, 1}, acq, []byte{0, 1, 0})},
		{"permits above the limit", cat([]byte{5, 1}, acq, []byte{0}, binary.AppendUvarint(nil, MaxPermits+1), []byte{0})},
		{"a shared semaphore acquire", cat([]byte{5, 1}, acq, []byte{0, 2, 1})},
		{"shared byte 2", cat([]byte{5, 1}, acq, []byte{0, 0, 2})},
		{"version 6", cat([]byte{6, 1}, acq, []byte{0, 3, 0})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmds, err := DecodeBatch(tc.b)
			if !errors.Is(err, ErrCorrupt) || cmds != nil {
				t.Fatalf("DecodeBatch(%x) = %d commands, %v; want ErrCorrupt", tc.b, len(cmds), err)
			}
		})
	}
}

package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"
)

// The snapshot tests write snapshots by hand, from the format in the comment
// at the top of snapshot.go (not with Marshal), so that each case can break
// exactly one rule Unmarshal must check, and the valid cases sit right at the
// edge of each rule.

type snapLease struct {
	id        LeaseID
	number    uint64
	ttl       time.Duration
	owner     string
	identity  string // version 4 on
	createReq RequestID
	renewals  uint64
	renewedAt time.Duration
	acked     uint64 // top: the numbers below it are seen or covered
	gaps      []uint64
	calls     []call
}

type snapLock struct {
	name      string
	holder    LeaseID
	token     uint64
	lockDelay time.Duration
	oncePer   time.Duration // version 5 on
	delayed   bool
	delayFrom time.Duration
	waiters   []waiter // oncePer: version 5 on
}

// snapRun is a recorded run (version 5 on).
type snapRun struct {
	name          string
	token, number uint64
	owner         string
	at            time.Duration
	wall          uint64
	window        time.Duration
}

type snapKV struct {
	key, value string
	token      uint64
}

type snapNode struct{ id, addr string }

type snap struct {
	version  byte
	token    uint64
	clock    time.Duration
	leaseSeq uint64
	leases   []snapLease
	locks    []snapLock
	kv       []snapKV
	nodes    []snapNode
	runs     []snapRun // version 5 on
	trailing []byte
}

func putUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func putString(b []byte, s string) []byte { return append(putUvarint(b, uint64(len(s))), s...) }

func (s snap) bytes() []byte {
	b := []byte{s.version}
	b = putUvarint(b, s.token)
	b = putUvarint(b, uint64(s.clock))
	b = putUvarint(b, s.leaseSeq)
	b = putUvarint(b, uint64(len(s.leases)))
	for _, l := range s.leases {
		b = append(b, l.id[:]...)
		b = putUvarint(b, l.number)
		b = putUvarint(b, uint64(l.ttl))
		b = putString(b, l.owner)
		if s.version >= 4 {
			b = putString(b, l.identity)
		}
		b = append(b, l.createReq[:]...)
		b = putUvarint(b, l.renewals)
		b = putUvarint(b, uint64(l.renewedAt))
		b = putUvarint(b, l.acked)
		b = putUvarint(b, uint64(len(l.gaps)))
		for _, g := range l.gaps {
			b = putUvarint(b, g)
		}
		b = putUvarint(b, uint64(len(l.calls)))
		for _, k := range l.calls {
			b = putUvarint(b, k.seq)
			b = append(b, k.req[:]...)
			b = append(b, byte(k.kind), byte(k.code))
			b = putUvarint(b, k.token)
		}
	}
	b = putUvarint(b, uint64(len(s.locks)))
	for _, k := range s.locks {
		b = putString(b, k.name)
		b = append(b, k.holder[:]...)
		b = putUvarint(b, k.token)
		b = putUvarint(b, uint64(k.lockDelay))
		if s.version >= 5 {
			b = putUvarint(b, uint64(k.oncePer))
		}
		if k.delayed {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		b = putUvarint(b, uint64(k.delayFrom))
		b = putUvarint(b, uint64(len(k.waiters)))
		for _, w := range k.waiters {
			b = append(b, w.lease[:]...)
			b = putUvarint(b, w.seq)
			b = putUvarint(b, uint64(w.lockDelay))
			if s.version >= 5 {
				b = putUvarint(b, uint64(w.oncePer))
			}
		}
	}
	b = putUvarint(b, uint64(len(s.kv)))
	for _, e := range s.kv {
		b = putString(b, e.key)
		b = putString(b, e.value)
		b = putUvarint(b, e.token)
	}
	b = putUvarint(b, uint64(len(s.nodes)))
	for _, n := range s.nodes {
		b = putString(b, n.id)
		b = putString(b, n.addr)
	}
	if s.version >= 5 {
		b = putUvarint(b, uint64(len(s.runs)))
		for _, r := range s.runs {
			b = putString(b, r.name)
			b = putUvarint(b, r.token)
			b = putUvarint(b, r.number)
			b = putString(b, r.owner)
			b = putUvarint(b, uint64(r.at))
			b = putUvarint(b, r.wall)
			b = putUvarint(b, uint64(r.window))
		}
	}
	return append(b, s.trailing...)
}

// baseSnap is a valid state at several edges at once: lease 2's number is
// the last one handed out, lease 1's first remembered call is numbered at
// its floor (acked), a grant's token and a key's token equal the counter.
//
//	lease 1 (#1): holds "a" (token 5, call 2), waits for "b" (call 3, queued)
//	lease 2 (#2): holds "b" (token 4, call 1), one release answered (call 2)
func baseSnap() snap {
	return snap{
		version: 4, token: 5, clock: 10 * time.Second, leaseSeq: 2,
		leases: []snapLease{
			{id: LeaseID{1}, number: 1, ttl: 10 * time.Second, owner: "me", identity: "alice", createReq: RequestID{1}, renewals: 2, renewedAt: 3 * time.Second, acked: 4,
				calls: []call{{seq: 2, req: RequestID{10}, kind: KindAcquire, code: OK, token: 5}, {seq: 3, req: RequestID{11}, kind: KindAcquire, code: Queued}}},
			{id: LeaseID{2}, number: 2, ttl: time.Second, createReq: RequestID{2}, acked: 3,
				calls: []call{{seq: 1, req: RequestID{12}, kind: KindAcquire, code: OK, token: 4}, {seq: 2, req: RequestID{13}, kind: KindRelease, code: NotHolder}}},
		},
		locks: []snapLock{
			{name: "a", holder: LeaseID{1}, token: 5, lockDelay: time.Second},
			{name: "b", holder: LeaseID{2}, token: 4, waiters: []waiter{{lease: LeaseID{1}, seq: 3, lockDelay: 2 * time.Second}}},
		},
		kv:    []snapKV{{key: "k", value: "v", token: 5}},
		nodes: []snapNode{{id: "n1", addr: "127.0.0.1:7000"}, {id: "n2", addr: "127.0.0.1:7001"}},
	}
}

// TestUnmarshalHandWritten: a hand-written snapshot decodes to the state it
// describes (literal expectations), and Marshal writes the same bytes back.
func TestUnmarshalHandWritten(t *testing.T) {
	b := baseSnap().bytes()
	s, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if s.Token() != 5 || s.Clock() != 10*time.Second || s.NumLeases() != 2 || s.NumLocks() != 2 || s.NumWaiters() != 1 {
		t.Fatalf("token %d clock %v leases %d locks %d waiters %d", s.Token(), s.Clock(), s.NumLeases(), s.NumLocks(), s.NumWaiters())
	}
	l1, ok := s.Lease(LeaseID{1})
	if !ok || l1.Number != 1 || l1.TTL != 10*time.Second || l1.Owner != "me" || l1.Renewals != 2 || l1.RenewedAt != 3*time.Second ||
		!slices.Equal(l1.Holds, []string{"a"}) || !slices.Equal(l1.Waits, []string{"b"}) {
		t.Fatalf("lease 1: %+v", l1)
	}
	l2, ok := s.Lease(LeaseID{2})
	if !ok || l2.Number != 2 || !slices.Equal(l2.Holds, []string{"b"}) || len(l2.Waits) != 0 {
		t.Fatalf("lease 2: %+v", l2)
	}
	k, ok := s.Lock("b")
	if !ok || k.Holder != (LeaseID{2}) || k.HolderNum != 2 || k.Token != 4 || !slices.Equal(k.Waiters, []LeaseID{{1}}) {
		t.Fatalf("lock b: %+v", k)
	}
	if v, tok, ok := s.Get("k"); !ok || string(v) != "v" || tok != 5 {
		t.Fatalf("key k: %q %d %v", v, tok, ok)
	}
	if a, ok := s.NodeAddr("n2"); !ok || a != "127.0.0.1:7001" {
		t.Fatalf("node n2: %q %v", a, ok)
	}
	if re := s.Marshal(nil); !bytes.Equal(re, b) {
		t.Fatalf("Marshal differs from the format:\n got %x\nwant %x", re, b)
	}
	// The next grant's token is the counter + 1, and a retry of lease 1's
	// remembered Acquire (call 2, ack 2) gets its token 5 back unexecuted.
	r := s.Apply(&Command{Kind: KindAcquire, RequestID: RequestID{10}, Lease: LeaseID{1}, Seq: 2, Ack: 2, Name: "a"})
	if r.Code != OK || r.Token != 5 {
		t.Fatalf("retried call 2: %v token %d, want ok 5", r.Code, r.Token)
	}
	r = s.Apply(&Command{Kind: KindAcquire, RequestID: RequestID{20}, Lease: LeaseID{2}, Seq: 3, Ack: 3, Name: "c"})
	if r.Code != OK || r.Token != 6 {
		t.Fatalf("new grant: %v token %d, want ok 6", r.Code, r.Token)
	}
}

// TestUnmarshalEdges: valid snapshots at the edge of a rule are accepted.
func TestUnmarshalEdges(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*snap)
	}{
		{"empty", func(s *snap) { *s = snap{version: 3} }},
		{"no keys, no nodes", func(s *snap) { s.kv, s.nodes = nil, nil }},
		{"clock and renewal time at 2^62", func(s *snap) { s.clock, s.leases[0].renewedAt = 1<<62, 1<<62 }},
		{"ttl at the minimum", func(s *snap) { s.leases[1].ttl = MinTTL }},
		{"ttl at the maximum", func(s *snap) { s.leases[1].ttl = MaxTTL }},
		{"owner of 256 bytes", func(s *snap) { s.leases[0].owner = string(bytes.Repeat([]byte("o"), MaxOwnerLen)) }},
		{"calls at the limit", func(s *snap) {
			s.leases[1].calls, s.leases[1].acked = releases(1, MaxCallsInFlight), MaxCallsInFlight+1
		}},
		{"gaps at the limit", func(s *snap) {
			s.leases[0].acked = 4 + MaxCallsInFlight + 1
			for g := uint64(4); g < s.leases[0].acked; g++ {
				s.leases[0].gaps = append(s.leases[0].gaps, g)
			}
		}},
		{"acquire cancelled", func(s *snap) {
			s.leases[1].calls[1] = call{seq: 2, req: RequestID{13}, kind: KindAcquire, code: Cancelled}
		}},
		{"acquire lock held", func(s *snap) {
			s.leases[1].calls[1] = call{seq: 2, req: RequestID{13}, kind: KindAcquire, code: LockHeld}
		}},
		{"acquire already held", func(s *snap) {
			s.leases[1].calls[1] = call{seq: 2, req: RequestID{13}, kind: KindAcquire, code: AlreadyHeld, token: 4}
		}},
		{"release ok", func(s *snap) { s.leases[1].calls[1].code = OK }},
		{"grant with token 1", func(s *snap) { s.leases[1].calls[0].token = 1 }},
		{"delayed lock, free", func(s *snap) {
			s.locks = append(s.locks, snapLock{name: "c", token: 3, delayed: true, delayFrom: 9 * time.Second})
		}},
		{"key with token 1 and no value", func(s *snap) { s.kv = []snapKV{{key: "k", token: 1}} }},
		{"key of 256 bytes", func(s *snap) { s.kv[0].key = string(bytes.Repeat([]byte("k"), MaxNameLen)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := baseSnap()
			tc.edit(&s)
			b := s.bytes()
			st, err := Unmarshal(b)
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !bytes.Equal(st.Marshal(nil), b) {
				t.Fatal("does not marshal back to itself")
			}
		})
	}
}

// releases returns n answered Releases numbered from seq on.
func releases(seq uint64, n int) []call {
	var out []call
	for i := range n {
		out = append(out, call{seq: seq + uint64(i), req: RequestID{byte(i), byte(i >> 8), 1}, kind: KindRelease, code: OK})
	}
	return out
}

// TestUnmarshalRefuses: each snapshot breaks one rule and is refused with
// ErrCorrupt (and is not mistaken for an old format).
func TestUnmarshalRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*snap)
	}{
		{"newer version", func(s *snap) { s.version = 6 }},
		{"trailing byte", func(s *snap) { s.trailing = []byte{0} }},
		{"clock above 2^62", func(s *snap) { s.clock = 1<<62 + 1 }},
		// leases
		{"leases out of order", func(s *snap) { s.leases[0], s.leases[1] = s.leases[1], s.leases[0] }},
		{"lease repeated", func(s *snap) { s.leases[1].id = s.leases[0].id }},
		{"lease id zero", func(s *snap) {
			s.leases = []snapLease{{number: 1, ttl: time.Second, createReq: RequestID{1}}}
			s.locks, s.kv = nil, nil
		}},
		{"ttl below the minimum", func(s *snap) { s.leases[1].ttl = MinTTL - 1 }},
		{"ttl above the maximum", func(s *snap) { s.leases[1].ttl = MaxTTL + 1 }},
		{"owner with a control character", func(s *snap) { s.leases[0].owner = "a\x00b" }},
		{"owner too long", func(s *snap) { s.leases[0].owner = string(bytes.Repeat([]byte("o"), MaxOwnerLen+1)) }},
		{"no create request", func(s *snap) { s.leases[1].createReq = RequestID{} }},
		{"lease number 0", func(s *snap) { s.leases[1].number = 0 }},
		{"lease number above the last", func(s *snap) { s.leases[1].number = 3 }},
		{"too many calls", func(s *snap) {
			s.leases[1].calls, s.leases[1].acked = releases(1, MaxCallsInFlight+1), MaxCallsInFlight+2
		}},
		{"too many gaps", func(s *snap) {
			s.leases[0].acked = 4 + MaxCallsInFlight + 2
			for g := uint64(4); g < s.leases[0].acked; g++ {
				s.leases[0].gaps = append(s.leases[0].gaps, g)
			}
		}},
		// remembered calls
		{"call at or above top", func(s *snap) { s.leases[1].acked = 2 }},
		{"call number 0", func(s *snap) { s.leases[1].calls[0].seq = 0 }},
		{"a call that is also a gap", func(s *snap) { s.leases[1].gaps = []uint64{1} }},
		{"a gap at top", func(s *snap) { s.leases[1].gaps = []uint64{3} }},
		{"gap 0", func(s *snap) { s.leases[0].gaps = []uint64{0} }},
		{"gaps out of order", func(s *snap) { s.leases[0].acked = 9; s.leases[0].gaps = []uint64{6, 5} }},
		{"call without request id", func(s *snap) { s.leases[1].calls[1].req = RequestID{} }},
		{"calls repeat a number", func(s *snap) { s.leases[1].calls[1].seq = 1 }},
		{"calls out of order", func(s *snap) { s.leases[1].calls[0].seq, s.leases[1].calls[1].seq = 3, 2 }},
		{"grant with token 0", func(s *snap) { s.leases[1].calls[0].token = 0 }},
		{"grant above the counter", func(s *snap) { s.leases[1].calls[0].token = 6 }},
		{"queued acquire with a token", func(s *snap) { s.leases[0].calls[1].token = 1 }},
		{"acquire answered renewed", func(s *snap) {
			s.leases[1].calls[1] = call{seq: 2, req: RequestID{13}, kind: KindAcquire, code: Renewed}
		}},
		{"release with a token", func(s *snap) { s.leases[1].calls[1].token = 1 }},
		{"release answered lock held", func(s *snap) { s.leases[1].calls[1].code = LockHeld }},
		{"a remembered renew", func(s *snap) { s.leases[1].calls[1].kind = KindRenew; s.leases[1].calls[1].code = OK }},
		{"queued call without a wait", func(s *snap) { s.locks[1].waiters = nil }},
		// locks
		{"locks out of order", func(s *snap) { s.locks[0], s.locks[1] = s.locks[1], s.locks[0] }},
		{"lock repeated", func(s *snap) { s.locks[1].name = "a" }},
		{"lock name empty", func(s *snap) {
			s.locks = []snapLock{{name: "", holder: LeaseID{1}, token: 5}, s.locks[1]}
		}},
		{"lock name with a control character", func(s *snap) { s.locks[0].name = "a\n" }},
		{"idle lock", func(s *snap) { s.locks = append(s.locks, snapLock{name: "c", token: 3}) }},
		{"lock token above the counter", func(s *snap) { s.locks[0].token = 6 }},
		{"held by an unknown lease", func(s *snap) { s.locks[0].holder = LeaseID{9} }},
		{"held and delayed", func(s *snap) { s.locks[0].delayed = true }},
		{"waiter unknown", func(s *snap) { s.locks[1].waiters[0].lease = LeaseID{9} }},
		{"waits for itself", func(s *snap) {
			s.locks[1].holder = LeaseID{1}
			s.locks[0].holder = LeaseID{2}
		}},
		{"waits twice", func(s *snap) { s.locks[1].waiters = append(s.locks[1].waiters, s.locks[1].waiters[0]) }},
		{"waiter's call not queued", func(s *snap) { s.locks[1].waiters[0].seq = 2 }},
		{"waiter's call unknown", func(s *snap) { s.locks[1].waiters[0].seq = 4 }},
		// keys
		{"keys out of order", func(s *snap) { s.kv = []snapKV{{"m", "", 1}, {"k", "", 1}} }},
		{"key repeated", func(s *snap) { s.kv = []snapKV{{"k", "", 1}, {"k", "", 1}} }},
		{"key empty", func(s *snap) { s.kv[0].key = "" }},
		{"key with token 0", func(s *snap) { s.kv[0].token = 0 }},
		{"key token above the counter", func(s *snap) { s.kv[0].token = 6 }},
		// nodes
		{"nodes out of order", func(s *snap) { s.nodes[0], s.nodes[1] = s.nodes[1], s.nodes[0] }},
		{"node repeated", func(s *snap) { s.nodes[1].id = "n1" }},
		{"node id empty", func(s *snap) { s.nodes = []snapNode{{"", "x:1"}} }},
		{"node address empty", func(s *snap) { s.nodes[1].addr = "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := baseSnap()
			tc.edit(&s)
			_, err := Unmarshal(s.bytes())
			if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrOldFormat) {
				t.Fatalf("Unmarshal: %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestUnmarshalOldFormat: a version-2 snapshot is refused as an old format.
func TestUnmarshalOldFormat(t *testing.T) {
	for _, v := range []byte{1, 2} {
		s := baseSnap()
		s.version = v
		if _, err := Unmarshal(s.bytes()); !errors.Is(err, ErrOldFormat) || errors.Is(err, ErrCorrupt) {
			t.Fatalf("version %d: %v, want ErrOldFormat", v, err)
		}
	}
}

// TestUnmarshalCounts: a count larger than the bytes left is refused before
// anything is allocated; one that matches exactly is read.
func TestUnmarshalCounts(t *testing.T) {
	// version 3, token 0, clock 0, leaseSeq 0, then four collection counts.
	if _, err := Unmarshal([]byte{3, 0, 0, 0, 0, 0, 0, 0}); err != nil {
		t.Fatalf("empty state: %v", err)
	}
	for _, b := range [][]byte{
		{3, 0, 0, 0, 0, 0, 0, 1},    // one node claimed, no bytes left
		{3, 0, 0, 0, 0, 0, 0},       // the node count missing
		{3, 0, 0, 0, 5, 0, 0, 0},    // five leases in three bytes
		{3, 0, 0, 0, 0, 0, 0, 0x80}, // a truncated varint
	} {
		if _, err := Unmarshal(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%x: %v, want ErrCorrupt", b, err)
		}
	}
}

// A snapshot of version 3 (before lease identities) is read: its leases
// have none, and it is written back as version 3.
func TestUnmarshalVersion3(t *testing.T) {
	s := baseSnap()
	s.version = 3
	st, err := Unmarshal(s.bytes())
	if err != nil {
		t.Fatal(err)
	}
	l, ok := st.Lease(LeaseID{1})
	if !ok || l.Identity != "" || l.Owner != "me" {
		t.Fatalf("lease 1 of a version-3 snapshot: %+v", l)
	}
	if !bytes.Equal(st.Marshal(nil), s.bytes()) {
		t.Fatal("a state without identities is not written back as version 3")
	}
	four := baseSnap()
	four.leases[0].identity = "bad\x01identity"
	if _, err := Unmarshal(four.bytes()); err == nil {
		t.Fatal("a lease identity with a control character was read")
	}
}

// RaiseToken (a restore's floor): the next grant's token is above the
// floor, a floor below the last token changes nothing, held locks keep
// their tokens, and the raised state survives Marshal/Unmarshal.
func TestRaiseToken(t *testing.T) {
	s := New()
	applyAll(s, cmdCreate(1, 1), cmdAcquire(1, 2, "held", false))
	s.RaiseToken(0) // below: nothing changes
	if s.Token() != 1 {
		t.Fatalf("a floor of 0 moved the token to %d", s.Token())
	}
	s.RaiseToken(5000)
	r, err := Unmarshal(s.Marshal(nil))
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := r.Lock("held"); !ok || k.Token != 1 {
		t.Fatalf("the held lock after the raise: %+v %v, want token 1", k, ok)
	}
	if got := applyAll(r, cmdAcquire(1, 3, "next", false)); got.Code != OK || got.Token != 5001 {
		t.Fatalf("first grant after a floor of 5000: %v token %d, want 5001", got.Code, got.Token)
	}
}

// onceSnap is baseSnap in version 5: lock "a"'s grant has a window of a
// day, lock "b"'s waiter one of an hour, and "c" ran at 4s (token 3, by
// lease #1, wall 1000) with a window of 7s: kept until 11s, the clock is 10s.
func onceSnap() snap {
	s := baseSnap()
	s.version = 5
	s.locks[0].oncePer = 24 * time.Hour
	s.locks[1].waiters[0].oncePer = time.Hour
	s.runs = []snapRun{{name: "c", token: 3, number: 1, owner: "me", at: 4 * time.Second, wall: 1000, window: 7 * time.Second}}
	return s
}

// TestUnmarshalVersion5: the once-per parts of a snapshot decode to what
// they say and marshal back; a state without them is written in version 4
// (or 3), and one whose last record is forgotten goes back to it.
func TestUnmarshalVersion5(t *testing.T) {
	b := onceSnap().bytes()
	s, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	want := RunView{Name: "c", Token: 3, LeaseNumber: 1, Owner: "me", At: 4 * time.Second, Age: 6 * time.Second, Wall: 1000, Window: 7 * time.Second}
	if r, ok := s.Run("c"); !ok || r != want || s.NumRuns() != 1 {
		t.Fatalf("run %+v %v, want %+v", r, ok, want)
	}
	if !bytes.Equal(s.Marshal(nil), b) {
		t.Fatal("does not marshal back to itself")
	}
	// The run of "c" is inside a window of 7s, not of 6s.
	for window, code := range map[time.Duration]Code{7 * time.Second: RanRecently, 6 * time.Second: OK} {
		restored, _ := Unmarshal(b)
		r := restored.Apply(&Command{Kind: KindAcquire, RequestID: RequestID{20}, Lease: LeaseID{2}, Seq: 3, Ack: 3, Name: "c", OncePer: window})
		if r.Code != code {
			t.Fatalf("window %v: %v, want %v", window, r.Code, code)
		}
	}
	// "a"'s grant keeps its window: its release with Ran records a run kept
	// a day.
	s.Apply(&Command{Kind: KindTick, Elapsed: time.Second}) // 11s: "c"'s record is forgotten
	if s.NumRuns() != 0 || s.Marshal(nil)[0] != 5 {
		t.Fatalf("runs %d, version %d", s.NumRuns(), s.Marshal(nil)[0])
	}
	if r := s.Apply(&Command{Kind: KindRelease, RequestID: RequestID{30}, Lease: LeaseID{1}, Seq: 4, Ack: 3, Name: "a", Ran: true, Wall: 2000}); r.Code != OK {
		t.Fatalf("release a: %v %s", r.Code, r.Reason)
	}
	if r, ok := s.Run("a"); !ok || r.Window != 24*time.Hour || r.Token != 5 {
		t.Fatalf("run of a: %+v %v", r, ok)
	}
	// Without once-per parts, version 4 (base has an identity).
	if v := baseSnap().bytes(); func() byte { st, _ := Unmarshal(v); return st.Marshal(nil)[0] }() != 4 {
		t.Fatal("a state without once-per parts is not written as version 4")
	}
}

// TestUnmarshalVersion5Refuses: each once-per rule broken once.
func TestUnmarshalVersion5Refuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*snap)
	}{
		{"version 5 with nothing of once-per", func(s *snap) { s.locks[0].oncePer, s.locks[1].waiters[0].oncePer, s.runs = 0, 0, nil }},
		{"version 4 with a call answered ran recently", func(s *snap) {
			*s = baseSnap()
			s.leases[1].calls[1] = call{seq: 2, req: RequestID{13}, kind: KindAcquire, code: RanRecently, token: 3}
		}},
		{"ran recently without a token", func(s *snap) {
			s.leases[1].calls[1] = call{seq: 2, req: RequestID{13}, kind: KindAcquire, code: RanRecently}
		}},
		{"a window on a free lock", func(s *snap) {
			s.locks = append(s.locks, snapLock{name: "c", token: 3, delayed: true, oncePer: time.Hour})
		}},
		{"a grant's window above the limit", func(s *snap) { s.locks[0].oncePer = MaxOncePer + 1 }},
		{"a waiter's window above the limit", func(s *snap) { s.locks[1].waiters[0].oncePer = MaxOncePer + 1 }},
		{"run past its window", func(s *snap) { s.runs[0].window = 6 * time.Second }},
		{"run after the clock", func(s *snap) { s.runs[0].at = 11 * time.Second }},
		{"run with no window", func(s *snap) { s.runs[0].window, s.runs[0].at = 0, 10*time.Second }},
		{"run window above the limit", func(s *snap) { s.runs[0].window = MaxOncePer + 1 }},
		{"runs out of order", func(s *snap) {
			s.runs = append(s.runs, snapRun{name: "b", token: 2, number: 1, at: 9 * time.Second, wall: 1, window: time.Hour})
		}},
		{"runs repeat a name", func(s *snap) { s.runs = append(s.runs, s.runs[0]) }},
		{"run with token 0", func(s *snap) { s.runs[0].token = 0 }},
		{"run with a token above the counter", func(s *snap) { s.runs[0].token = 6 }},
		{"run with lease number 0", func(s *snap) { s.runs[0].number = 0 }},
		{"run with a lease number above the last", func(s *snap) { s.runs[0].number = 3 }},
		{"run with wall 0", func(s *snap) { s.runs[0].wall = 0 }},
		{"run with a wall above 2^63-1", func(s *snap) { s.runs[0].wall = 1 << 63 }},
		{"run with a bad name", func(s *snap) { s.runs[0].name = "a\nb" }},
		{"run with a bad owner", func(s *snap) { s.runs[0].owner = "a\x00b" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := onceSnap()
			tc.edit(&s)
			if st, err := Unmarshal(s.bytes()); !errors.Is(err, ErrCorrupt) || st != nil {
				t.Fatalf("accepted (%v)", err)
			}
		})
	}
}

// TestUnmarshalVersion6: a state with a semaphore, readers and a queued
// writer round-trips in version 6; the same state without them is written
// in version 5 or older, and its version-6 encoding is refused (a version
// claiming more than the state needs), as are broken version-6 locks.
func TestUnmarshalVersion6(t *testing.T) {
	s := withHistory(t, []Command{cmdCreate(1, 1), cmdCreate(2, 2), cmdCreate(3, 3), cmdAcquire(1, 4, "m", false),
		cmdSem(1, 5, "s", false, 2), cmdSem(2, 6, "s", false, 2), cmdSem(3, 7, "s", true, 2),
		cmdRead(1, 8, "rw", false), cmdRead(2, 9, "rw", false), cmdAcquire(3, 10, "rw", true)})
	b := s.Marshal(nil)
	if b[0] != 6 {
		t.Fatalf("version %d, want 6", b[0])
	}
	back, err := Unmarshal(b)
	if err != nil || !bytes.Equal(back.Marshal(nil), b) {
		t.Fatalf("round trip: %v", err)
	}
	wantGrants(t, back, "s", grantRow{1, 2, 0, false, false}, grantRow{2, 3, 1, false, false})
	wantGrants(t, back, "rw", grantRow{1, 4, 0, true, false}, grantRow{2, 5, 0, true, false})

	for _, tc := range []struct {
		name   string
		mutate func(s *State)
	}{
		{"two grants in one slot", func(s *State) { s.locks["s"].grants[1].slot = 0 }},
		{"a slot beyond the permits", func(s *State) { s.locks["s"].grants[1].slot = 2 }},
		{"more grants than permits", func(s *State) { s.locks["s"].permits = 1 }},
		{"a shared grant in a semaphore", func(s *State) { s.locks["s"].grants[0].shared = true }},
		{"a writer beside readers", func(s *State) { s.locks["rw"].grants[1].shared = false }},
		{"a first waiter whose grant fits", func(s *State) { s.locks["rw"].waiters[0].shared = true }},
		{"a shared waiter of a semaphore", func(s *State) { s.locks["s"].waiters[0].shared = true }},
		{"zero permits", func(s *State) { s.locks["s"].permits = 0 }},
		{"two grants of one lease", func(s *State) { s.locks["rw"].grants[1].holder = id(1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := Unmarshal(b)
			tc.mutate(c)
			if _, err := Unmarshal(c.marshal(nil, 6, nil)); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("accepted: %v", err)
			}
		})
	}

	for _, c := range []Command{cmdRelease(1, 11, "s"), cmdRelease(2, 12, "s"), cmdRelease(3, 13, "s"), cmdRelease(1, 14, "rw"),
		cmdRelease(2, 15, "rw"), cmdRelease(3, 16, "rw")} {
		if r := s.Apply(&c); r.Code != OK {
			t.Fatalf("%v: %v", c.Kind, r.Code)
		}
	}
	if b := s.Marshal(nil); b[0] != 3 {
		t.Fatalf("a state of mutexes only is written in version %d, want 3", b[0])
	}
	if _, err := Unmarshal(s.marshal(nil, 6, nil)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a version-6 snapshot of a version-3 state: %v", err)
	}
}

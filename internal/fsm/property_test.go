package fsm

import (
	"bytes"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// checkInvariants verifies the state against its own indexes: every holder
// and waiter is a live lease, at most one holder per lock, the derived
// holds/waits match the locks, tokens never exceed the counter.
func checkInvariants(t interface{ Fatalf(string, ...any) }, s *State) {
	holds := map[LeaseID][]string{}
	waits := map[LeaseID][]string{}
	for name, k := range s.locks {
		if k.name != name {
			t.Fatalf("lock %q stored under %q", k.name, name)
		}
		if len(k.grants) == 0 {
			t.Fatalf("lock %q kept with no grant held or delayed (waiters: %d)", name, len(k.waiters))
		}
		if k.permits < 1 || k.permits > MaxPermits {
			t.Fatalf("lock %q has %d permits", name, k.permits)
		}
		// At most permits grants; shared grants only in a lock of one
		// permit, never beside an exclusive one; one grant per slot.
		shared, slots := 0, map[uint32]bool{}
		for i, g := range k.grants {
			if g.token == 0 || g.token > s.token {
				t.Fatalf("lock %q token %d outside 1…%d", name, g.token, s.token)
			}
			if i > 0 && compareGrants(k.grants[i-1], g) >= 0 {
				t.Fatalf("lock %q grants out of order", name)
			}
			if g.shared {
				shared++
				continue
			}
			if g.slot >= k.permits || slots[g.slot] {
				t.Fatalf("lock %q: slot %d of %d taken twice or out of range", name, g.slot, k.permits)
			}
			slots[g.slot] = true
		}
		if len(slots) > int(k.permits) || shared > 0 && (k.permits != 1 || len(slots) > 0) {
			t.Fatalf("lock %q: %d exclusive and %d shared grants for %d permits", name, len(slots), shared, k.permits)
		}
		for _, g := range k.grants {
			if g.delayed() {
				if g.oncePer != 0 {
					t.Fatalf("delayed grant of %q keeps a once-per window", name)
				}
				continue
			}
			if s.leases[g.holder] == nil {
				t.Fatalf("lock %q held by dead lease %v", name, g.holder)
			}
			holds[g.holder] = append(holds[g.holder], name)
		}
		if len(k.waiters) > 0 && k.admits(k.waiters[0].shared) {
			t.Fatalf("lock %q: the first waiter's grant fits, but it waits", name)
		}
		seen := map[LeaseID]bool{}
		for _, w := range k.waiters {
			if s.leases[w.lease] == nil {
				t.Fatalf("lock %q has a waiter with a dead lease", name)
			}
			if seen[w.lease] || k.heldBy(w.lease) >= 0 {
				t.Fatalf("lock %q: lease waits twice or waits for itself", name)
			}
			seen[w.lease] = true
			waits[w.lease] = append(waits[w.lease], name)
		}
	}
	for lid, l := range s.leases {
		slices.Sort(holds[lid])
		slices.Sort(waits[lid])
		if !slices.Equal(l.holds, holds[lid]) || !slices.Equal(l.waits, waits[lid]) {
			t.Fatalf("lease %v index holds=%v waits=%v, locks say %v %v", lid, l.holds, l.waits, holds[lid], waits[lid])
		}
		if l.number == 0 || l.number > s.leaseSeq {
			t.Fatalf("lease number %d outside 1…%d", l.number, s.leaseSeq)
		}
	}
	for key, e := range s.kv {
		if e.token == 0 || e.token > s.token {
			t.Fatalf("key %q token %d outside 1…%d", key, e.token, s.token)
		}
	}
	// Runs: each inside its own window, indexed once in expiry order; a
	// once-per window only on a held lock.
	if len(s.runOrder) != len(s.runs) || !slices.IsSortedFunc(s.runOrder, compareRuns) {
		t.Fatalf("%d runs, %d in the expiry order (sorted: %v)", len(s.runs), len(s.runOrder), slices.IsSortedFunc(s.runOrder, compareRuns))
	}
	for _, r := range s.runOrder {
		if s.runs[r.name] != r || r.until() <= s.clock || r.at > s.clock || r.token == 0 || r.token > s.token {
			t.Fatalf("run %+v: not the one kept, past its window, or with a bad token (clock %v)", r, s.clock)
		}
	}
}

// genCommand draws commands from a small universe (4 leases, 3 locks,
// 2 keys, 6 request ids, 6 call numbers) so that collisions, retries, late
// duplicates and handoffs are common. A call number usually comes with its
// own request id (a retry), sometimes with another (a client bug).
func genCommand(t *rapid.T) Command {
	lease := LeaseID{rapid.ByteRange(1, 4).Draw(t, "lease")}
	rq := RequestID{rapid.ByteRange(1, 6).Draw(t, "req")}
	name := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "name")
	seq := uint64(rapid.IntRange(1, 6).Draw(t, "seq"))
	ack := uint64(rapid.IntRange(1, int(seq)).Draw(t, "ack"))
	var open []uint64 // some of the calls between ack and seq still unanswered
	for o := ack + 1; o < seq; o++ {
		if rapid.Bool().Draw(t, "open") {
			open = append(open, o)
		}
	}
	callReq := RequestID{byte(seq), byte(rapid.IntRange(0, 9).Draw(t, "reqvariant") / 9)}
	token := uint64(rapid.IntRange(1, 8).Draw(t, "token"))
	switch k := Kind(rapid.IntRange(1, 12).Draw(t, "kind")); k {
	case KindSetNode:
		return Command{Kind: k, Name: rapid.SampledFrom([]string{"n1", "n2"}).Draw(t, "node"),
			Addr: rapid.SampledFrom([]string{"127.0.0.1:7300", "127.0.0.1:7310"}).Draw(t, "addr")}
	case KindCreateLease:
		return Command{Kind: k, RequestID: rq, Lease: lease, TTL: time.Second,
			Identity: rapid.SampledFrom([]string{"", "alice", "bob"}).Draw(t, "identity")}
	case KindRenew:
		return Command{Kind: k, Lease: lease}
	case KindRevoke:
		return Command{Kind: k, RequestID: rq, Lease: lease}
	case KindExpire:
		return Command{Kind: k, Lease: lease, Renewals: uint64(rapid.IntRange(0, 2).Draw(t, "renewals"))}
	case KindAcquire:
		delay := time.Duration(rapid.IntRange(0, 1).Draw(t, "delay")) * time.Second
		oncePer := time.Duration(rapid.IntRange(0, 2).Draw(t, "oncePer")) * 300 * time.Millisecond
		c := Command{Kind: k, RequestID: callReq, Lease: lease, Seq: seq, Ack: ack, Open: open, Name: name, Wait: rapid.Bool().Draw(t, "wait"),
			LockDelay: delay, OncePer: oncePer}
		if rapid.IntRange(0, 3).Draw(t, "relock") == 0 { // a relock of a grant this lease may hold
			c.ReleaseToken, c.Wait, c.OncePer = token, true, 0
		}
		return c
	case KindRelease:
		c := Command{Kind: k, RequestID: callReq, Lease: lease, Seq: seq, Ack: ack, Open: open, Name: name}
		if rapid.Bool().Draw(t, "ran") {
			c.Ran, c.Wall = true, int64(rapid.IntRange(1, 3).Draw(t, "wall"))
		}
		return c
	case KindCancelWait:
		return Command{Kind: k, Lease: lease, Seq: seq, Name: name}
	case KindGrantNext:
		return Command{Kind: k, Name: name, Token: token}
	case KindForceRelease:
		return Command{Kind: k, RequestID: rq, Name: name, Token: token}
	case KindPut:
		key := rapid.SampledFrom([]string{"x", "y"}).Draw(t, "key")
		return Command{Kind: k, RequestID: rq, Name: key, Value: []byte{byte(rapid.IntRange(0, 255).Draw(t, "value"))}, Token: token}
	default:
		return Command{Kind: KindTick, Elapsed: 100 * time.Millisecond}
	}
}

// TestProperties applies random command sequences and checks, after every
// command: tokens strictly increase; at most one holder per lock (and the
// indexes agree); waiters are granted in FIFO order; only the holder's lease
// releases; an ended lease holds and waits for nothing; refusals change
// nothing but the memory of answers; a call is executed at most once (a
// retry or late duplicate changes nothing but that memory, and answers OK
// only while its grant is held); a force-release ends only the grant it
// names; snapshot → restore is identical; replay gives the same state.
func TestProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := New()
		var cmds []Command
		var results []Result
		lastToken := uint64(0)
		type callKey struct {
			lease uint64
			seq   uint64
		}
		seen := map[callKey]bool{} // calls executed once already, by lease number
		n := rapid.IntRange(1, 120).Draw(t, "n")
		for i := 0; i < n; i++ {
			c := genCommand(t)
			before := s.Marshal(nil)
			beforeSans := withoutCalls(s)
			var key callKey
			if l := s.leases[c.Lease]; l != nil && (c.Kind == KindAcquire || c.Kind == KindRelease) {
				key = callKey{l.number, c.Seq}
			}
			holdersBefore := map[LeaseID][]string{}
			for id, l := range s.leases {
				holdersBefore[id] = slices.Clone(l.holds)
			}
			queues := map[string][]LeaseID{}
			holders := map[string]LeaseID{}
			for _, k := range s.Locks() {
				queues[k.Name], holders[k.Name] = k.Waiters, k.Holder
			}

			r := s.Apply(&c)
			cmds, results = append(cmds, c), append(results, r)

			// Tokens strictly increase, one per grant, and each grant is the event's.
			for _, e := range r.Events {
				if e.Kind == WaitCancelled {
					// A waiter refused at its turn (its once-per window holds a
					// recorded run) leaves the queue: the next one is first.
					queues[e.Name] = slices.DeleteFunc(slices.Clone(queues[e.Name]), func(l LeaseID) bool { return l == e.Lease })
				}
				if e.Kind != Granted {
					continue
				}
				if e.Token != lastToken+1 {
					t.Fatalf("grant token %d after %d", e.Token, lastToken)
				}
				lastToken = e.Token
				// FIFO: a grant to a waiter goes to the first live waiter.
				if q := queues[e.Name]; len(q) > 0 && !(c.Kind == KindAcquire && c.Lease == e.Lease) {
					first := q[0]
					if c.Kind == KindRevoke || c.Kind == KindExpire {
						q = slices.DeleteFunc(slices.Clone(q), func(l LeaseID) bool { return l == c.Lease })
						if len(q) > 0 {
							first = q[0]
						}
					}
					if e.Lease != first {
						t.Fatalf("lock %s granted to %v, first waiter was %v", e.Name, e.Lease, first)
					}
				}
			}
			if s.Token() != lastToken {
				t.Fatalf("counter %d, last granted %d", s.Token(), lastToken)
			}
			// Only the holder's lease releases.
			if c.Kind == KindRelease && r.Code == OK && holders[c.Name] != c.Lease && !bytes.Equal(beforeSans, withoutCalls(s)) {
				t.Fatalf("lease %v released %s held by %v", c.Lease, c.Name, holders[c.Name])
			}
			// Refusals change nothing but the memory of answers.
			if r.Code != OK && r.Code != Queued && !bytes.Equal(beforeSans, withoutCalls(s)) {
				t.Fatalf("%v refused with %v but changed the state", c.Kind, r.Code)
			}
			if r.Code == Invalid && !bytes.Equal(before, s.Marshal(nil)) {
				t.Fatalf("%v invalid (%s) but changed the state", c.Kind, r.Reason)
			}
			// A call is executed at most once.
			if key != (callKey{}) {
				if seen[key] && !bytes.Equal(beforeSans, withoutCalls(s)) {
					t.Fatalf("call %d of lease #%d (%v) was executed again: %v", c.Seq, key.lease, c.Kind, r.Code)
				}
				if seen[key] && c.Kind == KindAcquire && r.Code == OK {
					if k, _ := s.Lock(c.Name); k.Holder != c.Lease || k.Token != r.Token {
						t.Fatalf("retried acquire answered OK with token %d, but the lock is %+v", r.Token, k)
					}
				}
				if r.Code != Invalid && r.Code != Answered && r.Code != TooManyCalls {
					seen[key] = true
				}
			}
			// A force-release ends only the grant it names; every lease lives on.
			if c.Kind == KindForceRelease {
				others := func(names []string) []string {
					return slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == c.Name })
				}
				for id, names := range holdersBefore {
					l := s.leases[id]
					if l == nil || !slices.Equal(others(l.holds), others(names)) {
						t.Fatalf("force-release of %s changed lease %v: %v → %v", c.Name, id, names, l)
					}
				}
			}
			// An ended lease holds nothing and waits for nothing.
			if (c.Kind == KindRevoke || c.Kind == KindExpire) && r.Code == OK {
				for _, k := range s.Locks() {
					if k.Holder == c.Lease || slices.Contains(k.Waiters, c.Lease) {
						t.Fatalf("ended lease %v still on lock %s", c.Lease, k.Name)
					}
				}
			}
			checkInvariants(t, s)
		}

		// Snapshot → restore gives an identical state.
		snap := s.Marshal(nil)
		restored, err := Unmarshal(snap)
		if err != nil {
			t.Fatalf("restore: %v", err)
		}
		if !reflect.DeepEqual(normalize(s), normalize(restored)) {
			t.Fatalf("restored state differs")
		}
		if !bytes.Equal(snap, restored.Marshal(nil)) {
			t.Fatal("restored state marshals differently")
		}
		// Replaying the same commands gives the same state and results.
		replay := New()
		for i := range cmds {
			if r := replay.Apply(&cmds[i]); !reflect.DeepEqual(r, results[i]) {
				t.Fatalf("replay result %d differs: %+v vs %+v", i, r, results[i])
			}
		}
		if !bytes.Equal(snap, replay.Marshal(nil)) {
			t.Fatal("replay reached a different state")
		}
		// The restored state continues exactly like the original.
		next := genCommand(t)
		next2 := next
		if r1, r2 := s.Apply(&next), restored.Apply(&next2); !reflect.DeepEqual(r1, r2) {
			t.Fatalf("restored state answers differently: %+v vs %+v", r1, r2)
		}
	})
}

// withoutCalls encodes s without the leases' memory of answers.
func withoutCalls(s *State) []byte {
	c := normalize(s)
	for _, l := range c.leases {
		l.calls = calls{}
	}
	for _, k := range c.locks {
		for i := range k.waiters {
			k.waiters[i].seq = 0
		}
	}
	return c.Marshal(nil)
}

// normalize maps nil and empty slices to one form so DeepEqual compares content.
func normalize(s *State) *State {
	c := *s
	c.leases, c.created = map[LeaseID]*lease{}, map[RequestID]*lease{}
	for id, l := range s.leases {
		n := *l
		n.holds, n.waits, n.calls = slices.Clip(append([]string{}, l.holds...)), slices.Clip(append([]string{}, l.waits...)), calls{top: l.calls.top, answers: append([]call{}, l.calls.answers...), gaps: append([]uint64{}, l.calls.gaps...)}
		c.leases[id] = &n
		if s.created[l.createReq] == l {
			c.created[l.createReq] = &n
		}
	}
	if len(c.created) != len(s.created) {
		panic("normalize: created names a lease that is not live")
	}
	c.locks = map[string]*lock{}
	for name, k := range s.locks {
		n := *k
		n.waiters = append([]waiter{}, k.waiters...)
		c.locks[name] = &n
	}
	c.nodes = maps.Clone(s.nodes)
	c.runOrder = slices.Clip(append([]*run{}, s.runOrder...))
	c.kv = map[string]*entry{}
	for key, e := range s.kv {
		c.kv[key] = &entry{value: append([]byte{}, e.value...), token: e.token}
	}
	return &c
}

// TestCodecRoundTrip: any valid batch encodes and decodes to itself.
func TestCodecRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 20).Draw(t, "n")
		cmds := make([]Command, 0, n)
		for i := 0; i < n; i++ {
			cmds = append(cmds, genCommand(t))
		}
		got, err := DecodeBatch(EncodeBatch(nil, cmds))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, cmds) {
			t.Fatalf("round trip: %+v, want %+v", got, cmds)
		}
	})
}

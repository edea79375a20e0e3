package fsm

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// genModeCommand draws commands over three names: "s", a semaphore (2 or
// 3 permits asked, so mismatches happen), "rw", a read-write lock (shared
// or not), and "m", a mutex, with leases ending and lock-delays passing.
func genModeCommand(t *rapid.T) Command {
	lease := LeaseID{rapid.ByteRange(1, 5).Draw(t, "lease")}
	name := rapid.SampledFrom([]string{"s", "rw", "m"}).Draw(t, "name")
	seq := uint64(rapid.IntRange(1, 40).Draw(t, "seq"))
	switch rapid.IntRange(0, 10).Draw(t, "op") {
	case 0:
		b := lease[0]
		return Command{Kind: KindCreateLease, RequestID: RequestID{b}, Lease: lease, TTL: time.Second}
	case 1, 2, 3:
		c := Command{Kind: KindAcquire, RequestID: RequestID{byte(seq), lease[0]}, Lease: lease, Seq: seq, Ack: seq, Name: name,
			Wait: rapid.Bool().Draw(t, "wait"), LockDelay: time.Duration(rapid.IntRange(0, 1).Draw(t, "delay")) * time.Second}
		switch name {
		case "s":
			c.Permits = uint32(rapid.IntRange(2, 3).Draw(t, "permits"))
		case "rw":
			c.Shared = rapid.Bool().Draw(t, "shared")
		}
		return c
	case 4, 5:
		return Command{Kind: KindRelease, RequestID: RequestID{byte(seq), lease[0], 1}, Lease: lease, Seq: seq, Ack: seq, Name: name}
	case 6:
		return Command{Kind: KindExpire, Lease: lease}
	case 7:
		return Command{Kind: KindRevoke, RequestID: RequestID{9, lease[0]}, Lease: lease}
	case 8:
		return Command{Kind: KindCancelWait, Lease: lease, Seq: seq, Name: name}
	case 10: // a relock of a grant this lease may hold, in the mode it may have had
		c := Command{Kind: KindAcquire, RequestID: RequestID{byte(seq), lease[0], 2}, Lease: lease, Seq: seq, Ack: seq, Name: name, Wait: true,
			ReleaseToken: uint64(rapid.IntRange(1, 30).Draw(t, "token"))}
		switch name {
		case "s":
			c.Permits = uint32(rapid.IntRange(2, 3).Draw(t, "permits"))
		case "rw":
			c.Shared = rapid.Bool().Draw(t, "shared")
		}
		return c
	default:
		return Command{Kind: KindGrantNext, Name: name, Token: uint64(rapid.IntRange(1, 30).Draw(t, "token"))}
	}
}

// modelGrant is a grant as the events tell it.
type modelGrant struct {
	lease   LeaseID
	slot    uint32
	shared  bool
	delayed bool
}

// TestModesProperties checks semaphores and read-write locks against a
// model built from the events alone: never more grants (held or in
// lock-delay) than permits, one per slot; a shared grant never beside an
// exclusive one; an exclusive grant's token above every earlier grant of
// the name; grants in FIFO order (a grant goes to the first in the queue,
// or at once only when nobody waits), so a reader never passes a waiting
// writer; the permit count fixed while the lock exists and a mismatch
// refused; refusals change nothing but the memory of answers; plus the
// state's invariants and snapshot round trips.
func TestModesProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := New()
		grants := map[string]map[uint64]*modelGrant{} // name → token → grant
		queues := map[string][]LeaseID{}
		permits := map[string]uint32{} // the count of each lock that exists
		maxToken := map[string]uint64{}
		n := rapid.IntRange(1, 150).Draw(t, "n")
		for i := 0; i < n; i++ {
			c := genModeCommand(t)
			_, existed := s.Lock(c.Name)
			fresh := false // a call this lease has not made before
			if l := s.leases[c.Lease]; l != nil {
				_, remembered := l.calls.outcome(c.Seq)
				fresh = !remembered && !l.calls.acknowledged(c.Seq)
			}
			before, beforeSans := s.Marshal(nil), withoutCalls(s)
			r := s.Apply(&c)
			if r.Code != OK && r.Code != Queued && !bytes.Equal(beforeSans, withoutCalls(s)) {
				t.Fatalf("%v refused with %v but changed the state", c.Kind, r.Code)
			}
			if r.Code == Invalid && !bytes.Equal(before, s.Marshal(nil)) {
				t.Fatalf("%v invalid (%s) but changed the state", c.Kind, r.Reason)
			}
			relockRefused := c.ReleaseToken != 0 && r.Code == NotHolder // a relock of a grant not held: checked before the count
			if c.Kind == KindAcquire && fresh && r.Code != TooManyCalls && !relockRefused {
				asked := max(c.Permits, 1)
				if want, ok := permits[c.Name]; ok && existed {
					if (want != asked) != (r.Code == PermitsMismatch) || r.Code == PermitsMismatch && r.Permits != want {
						t.Fatalf("%s has %d permits, asked %d: %v (%d)", c.Name, want, asked, r.Code, r.Permits)
					}
				} else if !existed && r.Code == OK {
					permits[c.Name] = asked
				}
			}
			for _, e := range r.Events {
				g := grants[e.Name]
				if g == nil {
					g = map[uint64]*modelGrant{}
					grants[e.Name] = g
				}
				switch e.Kind {
				case Granted:
					n := permits[e.Name]
					exclusive := 0
					for _, o := range g {
						if !o.shared {
							exclusive++
						}
						if !o.shared && !e.Shared && o.slot == e.Slot {
							t.Fatalf("%s: slot %d granted twice", e.Name, e.Slot)
						}
					}
					switch {
					case e.Shared && (n != 1 || exclusive > 0):
						t.Fatalf("%s: a shared grant beside %d exclusive ones (%d permits)", e.Name, exclusive, n)
					case !e.Shared && (len(g) >= int(n) || e.Slot >= n):
						t.Fatalf("%s: exclusive grant in slot %d with %d grants of %d permits", e.Name, e.Slot, len(g), n)
					case !e.Shared && e.Token <= maxToken[e.Name]:
						t.Fatalf("%s: exclusive token %d not above an earlier grant's %d", e.Name, e.Token, maxToken[e.Name])
					}
					maxToken[e.Name] = max(maxToken[e.Name], e.Token)
					q := queues[e.Name]
					if j := slices.Index(q, e.Lease); j > 0 || j < 0 && len(q) > 0 {
						t.Fatalf("%s granted to %v, queue %v", e.Name, e.Lease, q)
					} else if j == 0 {
						queues[e.Name] = q[1:]
					}
					g[e.Token] = &modelGrant{lease: e.Lease, slot: e.Slot, shared: e.Shared}
				case Released:
					delete(g, e.Token)
				case DelayStarted:
					g[e.Token] = &modelGrant{slot: e.Slot, shared: e.Shared, delayed: true}
				case DelayEnded:
					delete(g, e.Token)
				case WaitStarted:
					queues[e.Name] = append(queues[e.Name], e.Lease)
				case WaitCancelled, WaitEnded:
					queues[e.Name] = slices.DeleteFunc(queues[e.Name], func(l LeaseID) bool { return l == e.Lease })
				}
			}
			for name := range permits {
				if _, ok := s.Lock(name); !ok {
					delete(permits, name)
					if len(grants[name]) > 0 || len(queues[name]) > 0 {
						t.Fatalf("%s forgotten with grants %v, queue %v", name, grants[name], queues[name])
					}
				}
			}
			checkInvariants(t, s)
			b := s.Marshal(nil)
			s2, err := Unmarshal(b)
			if err != nil {
				t.Fatalf("unmarshal after %v: %v", c.Kind, err)
			}
			if !bytes.Equal(s2.Marshal(nil), b) {
				t.Fatal("snapshot round trip differs")
			}
			s = s2 // go on from the restored state
		}
	})
}

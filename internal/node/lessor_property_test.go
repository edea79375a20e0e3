package node

import (
	"maps"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/fencehq/fence/internal/clock/clocktest"
	"github.com/fencehq/fence/internal/fsm"
)

// TestLazyTakeoverProperty: a new leader takes over a random state and then,
// in random order, builds chunks of its deadlines, lets time pass, applies
// renewals, revokes and new leases, and proposes its duties (whose
// expiries commit at once). A model of what was promised, kept apart from
// the lessor, checks that
//   - no lease is expired before its promised deadline: the latest of what
//     an earlier leader promised (TTL − logged time since its last renewal,
//     plus 400 ms of slack, from the takeover) and every renewal's or
//     creation's TTL from when it applied on this leader;
//   - once the build is over, every live lease whose promise passed is
//     expired at the next duties, and no other.
func TestLazyTakeoverProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		type lease struct {
			ttl       time.Duration
			renewedAt time.Duration // model's logical clock at creation or last renewal
		}
		s := fsm.New()
		apply := func(cmd fsm.Command) fsm.Result {
			r := s.Apply(&cmd)
			if r.Code != fsm.OK {
				rt.Fatalf("%v: %v %s", cmd.Kind, r.Code, r.Reason)
			}
			return r
		}
		next := byte(0)
		newID := func() fsm.LeaseID { next++; return fsm.LeaseID{next, 0xfe} }
		ttlGen := rapid.SampledFrom([]time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second})

		// Before the takeover: earlier leaders' history, in the log.
		var logical time.Duration
		before := map[fsm.LeaseID]*lease{}
		for range rapid.IntRange(1, 25).Draw(rt, "history") {
			switch ids := slices.Collect(maps.Keys(before)); rapid.IntRange(0, 2).Draw(rt, "past") {
			case 0:
				id, ttl := newID(), ttlGen.Draw(rt, "ttl")
				apply(fsm.Command{Kind: fsm.KindCreateLease, RequestID: fsm.RequestID(id), Lease: id, TTL: ttl})
				before[id] = &lease{ttl: ttl, renewedAt: logical}
			case 1:
				d := time.Duration(rapid.IntRange(0, 3000).Draw(rt, "tick ms")) * time.Millisecond
				apply(fsm.Command{Kind: fsm.KindTick, Elapsed: d})
				logical += d
			case 2:
				if len(ids) > 0 {
					slices.SortFunc(ids, byID)
					id := rapid.SampledFrom(ids).Draw(rt, "renewed")
					apply(fsm.Command{Kind: fsm.KindRenew, Lease: id})
					before[id].renewedAt = logical
				}
			}
		}

		// The takeover, and what the model says was promised.
		c := clocktest.New()
		now0 := c.Now()
		promise := map[fsm.LeaseID]time.Time{}
		ttls := map[fsm.LeaseID]time.Duration{}
		for id, l := range before {
			passed := max(0, logical-l.renewedAt-400*time.Millisecond)
			promise[id], ttls[id] = now0.Add(max(0, l.ttl-passed)), l.ttl
		}
		ls := newTestLessor(c)
		ls.activate(s)
		if ls.build != nil {
			slices.SortFunc(ls.build.ids, byID) // the rapid run is deterministic; the builder's order is the map's
		}
		commit := func(cmd fsm.Command) {
			ls.applied([]fsm.Result{apply(cmd)})
		}
		duties := func() {
			built := !ls.building()
			now := c.Now()
			tk, cmds := ls.due(true)
			if tk != nil {
				commit(*tk)
			}
			var expired []fsm.LeaseID
			for _, cmd := range cmds {
				if cmd.Kind != fsm.KindExpire {
					continue
				}
				p, live := promise[cmd.Lease]
				if !live {
					rt.Fatalf("expire of lease %v, which is not live", cmd.Lease[0])
				}
				if now.Before(p) {
					rt.Fatalf("lease %v expired %v before its promised deadline", cmd.Lease[0], p.Sub(now))
				}
				commit(cmd) // a wrong renewal count would not commit OK
				delete(promise, cmd.Lease)
				expired = append(expired, cmd.Lease)
			}
			if !built {
				return
			}
			for id, p := range promise {
				if !now.Before(p) {
					rt.Fatalf("build over: lease %v is %v past its deadline and not expired (expired now: %v)", id[0], now.Sub(p), expired)
				}
			}
		}

		// After it: the build's chunks, time, clients and duties interleave.
		for range rapid.IntRange(0, 60).Draw(rt, "steps") {
			live := slices.SortedFunc(maps.Keys(promise), byID)
			switch rapid.IntRange(0, 5).Draw(rt, "step") {
			case 0:
				c.Advance(time.Duration(rapid.IntRange(0, 3000).Draw(rt, "advance ms")) * time.Millisecond)
			case 1:
				ls.buildSome(s, rapid.IntRange(1, 4).Draw(rt, "chunk"))
			case 2:
				if len(live) > 0 {
					id := rapid.SampledFrom(live).Draw(rt, "renew")
					commit(fsm.Command{Kind: fsm.KindRenew, Lease: id})
					promise[id] = later(promise[id], c.Now().Add(ttls[id]))
				}
			case 3:
				if len(live) > 0 {
					id := rapid.SampledFrom(live).Draw(rt, "revoke")
					commit(fsm.Command{Kind: fsm.KindRevoke, RequestID: fsm.RequestID{next, 0xff}, Lease: id})
					next++
					delete(promise, id)
				}
			case 4:
				id, ttl := newID(), ttlGen.Draw(rt, "new ttl")
				commit(fsm.Command{Kind: fsm.KindCreateLease, RequestID: fsm.RequestID(id), Lease: id, TTL: ttl})
				promise[id], ttls[id] = c.Now().Add(ttl), ttl
			case 5:
				duties()
			}
		}
		// The build ends; every promise runs out; every lease is expired.
		for ls.buildSome(s, buildChunk) {
		}
		duties()
		c.Advance(time.Minute)
		duties()
		if len(promise) != 0 || s.NumLeases() != 0 {
			rt.Fatalf("a minute past every deadline: %d leases live in the model, %d in the state", len(promise), s.NumLeases())
		}
	})
}

func byID(a, b fsm.LeaseID) int { return slices.Compare(a[:], b[:]) }

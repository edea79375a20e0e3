package node

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/hotlocks"
	"github.com/fencehq/fence/internal/metrics"
)

// TestObserveOddSequences drives the apply callback with random sequences
// of acquires (waiting or not), releases, cancelled waits, renewals,
// revokes, expiries, force-releases, ticks and snapshot restores (a
// restore mid-wait, mid-hold, waits that end with no start seen): nothing
// panics, the hold and wait maps never hold more than the state's grants
// and waiters, and once every lease has ended they are empty.
func TestObserveOddSequences(t *testing.T) {
	names := []string{"a/1", "a/2", "b/x", "flat"}
	for seed := range uint64(30) {
		rnd := rand.New(rand.NewPCG(seed, 16))
		r := newApplyRig(t, metrics.PrefixConfig{Separator: "/", Depth: 1, Max: 2})
		r.n.hot = hotlocks.New(3, time.Second)
		leases := []fsm.LeaseID{{1, 0xfe}, {2, 0xfe}, {3, 0xfe}}
		for _, id := range leases {
			r.apply(fsm.Command{Kind: fsm.KindCreateLease, RequestID: r.newReq(), Lease: id, TTL: time.Second, Owner: "o"})
		}
		renewals := func(id fsm.LeaseID) (n uint64, ok bool) {
			r.n.replica.state.LeaseTimes(func(l fsm.LeaseID, _, _ time.Duration, rn uint64) {
				if l == id {
					n, ok = rn, true
				}
			})
			return n, ok
		}
		for step := range 400 {
			l, name := leases[rnd.IntN(len(leases))], names[rnd.IntN(len(names))]
			switch op := rnd.IntN(11); op {
			case 0:
				if _, ok := renewals(l); !ok {
					r.seq[l] = 0
					r.apply(fsm.Command{Kind: fsm.KindCreateLease, RequestID: r.newReq(), Lease: l, TTL: time.Duration(1+rnd.IntN(3)) * time.Second, Owner: "o"})
				}
			case 1, 2:
				r.call(fsm.KindAcquire, l, name, rnd.IntN(2) == 0)
			case 3:
				r.call(fsm.KindRelease, l, name, false)
			case 4:
				r.apply(fsm.Command{Kind: fsm.KindCancelWait, Lease: l, Name: name, Seq: r.seq[l]})
			case 5:
				r.tick(time.Duration(rnd.IntN(800)) * time.Millisecond)
			case 6:
				if n, ok := renewals(l); ok {
					r.apply(fsm.Command{Kind: fsm.KindExpire, Lease: l, Renewals: n})
				}
			case 7:
				r.apply(fsm.Command{Kind: fsm.KindRevoke, RequestID: r.newReq(), Lease: l})
			case 8:
				r.apply(fsm.Command{Kind: fsm.KindRenew, RequestID: r.newReq(), Lease: l})
			case 9:
				for _, k := range r.n.replica.state.Locks() {
					if k.Name == name && len(k.Grants) > 0 {
						r.apply(fsm.Command{Kind: fsm.KindForceRelease, RequestID: r.newReq(), Name: name, Token: k.Grants[0].Token})
					}
				}
			case 10: // this member restores the leader's newer snapshot: one lease ended meanwhile
				st, err := fsm.Unmarshal(r.n.replica.state.Marshal(nil))
				if err != nil {
					t.Fatal(err)
				}
				st.Apply(&fsm.Command{Kind: fsm.KindRevoke, RequestID: r.newReq(), Lease: l})
				r.n.replica.state = st
				r.n.restored(r.index)
			}
			grants := 0
			for _, k := range r.n.replica.state.Locks() {
				grants += len(k.Grants)
			}
			if len(r.n.holds) > grants || len(r.n.waits) > r.n.replica.state.NumWaiters() || r.n.hot.Len() > 3 {
				t.Fatalf("seed %d step %d: %d holds for %d grants, %d waits for %d waiters, %d hot names",
					seed, step, len(r.n.holds), grants, len(r.n.waits), r.n.replica.state.NumWaiters(), r.n.hot.Len())
			}
		}
		for _, l := range leases {
			r.apply(fsm.Command{Kind: fsm.KindRevoke, RequestID: r.newReq(), Lease: l})
		}
		if len(r.n.holds) != 0 || len(r.n.waits) != 0 {
			t.Fatalf("seed %d: every lease ended, yet %d holds and %d waits are remembered", seed, len(r.n.holds), len(r.n.waits))
		}
	}
}

package node

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/fencehq/fence/internal/clock/clocktest"
	"github.com/fencehq/fence/internal/fsm"
)

// TestLazyTakeoverWithTheBuilder: the builder goroutine builds takeovers of
// a few thousand leases (several chunks) under a read lock while entries
// apply under the write lock, as on the apply path: renewals, revokes, new
// leases, ticks that log exactly the time that passed, and leadership lost
// and regained (A→B→A) mid-build. Whatever the interleaving, no lease is
// proposed for expiry before the latest deadline ever promised for it
// (its creation's or renewal's apply time plus its TTL), and once a build
// ends every live lease is tracked with a deadline no earlier than that.
// Run it with -race: the builder and the apply path share the lessor.
func TestLazyTakeoverWithTheBuilder(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 2))
	c := clocktest.New()
	s := fsm.New()
	var mu sync.RWMutex // the replica's lock
	read := func(fn func(*fsm.State)) { mu.RLock(); defer mu.RUnlock(); fn(s) }
	noop := func(_ context.Context, cmds []fsm.Command) []proposalResult { return make([]proposalResult, len(cmds)) }
	ls := newLessor(c, 100*time.Millisecond, noop, read, discard)

	promise := map[fsm.LeaseID]time.Time{}
	ttls := map[fsm.LeaseID]time.Duration{}
	var live []fsm.LeaseID
	seq := uint64(0)
	newID := func() fsm.LeaseID {
		seq++
		return fsm.LeaseID{byte(seq), byte(seq >> 8), byte(seq >> 16), 0x18}
	}
	commit := func(cmd fsm.Command) fsm.Result {
		mu.Lock()
		defer mu.Unlock()
		r := s.Apply(&cmd)
		if r.Code != fsm.OK {
			t.Fatalf("%v: %v %s", cmd.Kind, r.Code, r.Reason)
		}
		ls.applied([]fsm.Result{r})
		return r
	}
	create := func() {
		id, ttl := newID(), time.Duration(20+rng.IntN(100))*time.Second
		commit(fsm.Command{Kind: fsm.KindCreateLease, RequestID: fsm.RequestID(id), Lease: id, TTL: ttl})
		promise[id], ttls[id] = c.Now().Add(ttl), ttl
		live = append(live, id)
	}
	drop := func(i int) {
		delete(promise, live[i])
		live[i] = live[len(live)-1]
		live = live[:len(live)-1]
	}
	for range 5000 {
		create()
	}
	takeover := func() {
		mu.RLock()
		ls.activate(s)
		mu.RUnlock()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { ls.builds(ctx) })
	defer wg.Wait()
	defer cancel()

	takeover()
	expired := 0
	for step := range 4000 {
		switch k := rng.IntN(100); {
		case k < 40 && len(live) > 0:
			id := live[rng.IntN(len(live))]
			commit(fsm.Command{Kind: fsm.KindRenew, Lease: id})
			promise[id] = later(promise[id], c.Now().Add(ttls[id]))
		case k < 50 && len(live) > 0:
			i := rng.IntN(len(live))
			commit(fsm.Command{Kind: fsm.KindRevoke, RequestID: fsm.RequestID{byte(step), byte(step >> 8), 0xee}, Lease: live[i]})
			drop(i)
		case k < 60:
			create()
		case k < 85:
			d := time.Duration(rng.IntN(200)) * time.Millisecond
			c.Advance(d)
			commit(fsm.Command{Kind: fsm.KindTick, Elapsed: d}) // logs no more than passed
		case k < 98:
			now := c.Now()
			_, cmds := ls.due(true)
			for _, cmd := range cmds {
				if cmd.Kind != fsm.KindExpire {
					continue
				}
				p, ok := promise[cmd.Lease]
				if !ok {
					continue // already ended: the fsm refuses it
				}
				if now.Before(p) {
					t.Fatalf("step %d: lease %x proposed for expiry %v before its promised deadline", step, cmd.Lease[:3], p.Sub(now))
				}
				mu.Lock()
				r := s.Apply(&cmd)
				ls.applied([]fsm.Result{r})
				mu.Unlock()
				if r.Code == fsm.OK {
					expired++
					for i, id := range live {
						if id == cmd.Lease {
							drop(i)
							break
						}
					}
				}
			}
		default: // leadership lost and regained, maybe mid-build
			ls.deactivate()
			takeover()
		}
	}
	for i := 0; ls.building(); i++ {
		if i == 100_000 {
			t.Fatal("the builder did not finish")
		}
		time.Sleep(100 * time.Microsecond)
	}
	for _, id := range live {
		d, ok := ls.deadline(id)
		if !ok || d.Before(promise[id]) {
			t.Fatalf("build over: lease %x tracked %v with deadline %v before its promise", id[:3], ok, promise[id].Sub(d))
		}
	}
	t.Logf("%d leases live, %d expired", len(live), expired)
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

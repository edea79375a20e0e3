package e2e

import (
	"context"
	"errors"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/histcheck"
)

// TestClusterModesHistory: 10 workers on 3 members take permits of a
// semaphore of 2 and readers' or writers' grants of a read-write lock
// (waiting or not), read the locks' grants and release, while the raft
// leader is killed twice. The history — unknown outcomes left open — must
// be linearizable against histcheck.Modes: tokens rise over every grant of
// a name (a writer's above every earlier reader's), slots stay below the
// count, a read lists only grants held and never more than fit at once.
func TestClusterModesHistory(t *testing.T) {
	c := newCluster(t, 3, "--lock-delay", "0")
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed=%d", seed)
	h := newOpHistory()
	now := h.now
	record := func(client int, in histcheck.ModeInput, call int64, out histcheck.ModeOutput) {
		h.add(client, in, out, call, out.Unknown)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := 0; w < 10; w++ {
		cl := c.dial(client.WithTTL(5 * time.Second))
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := mrand.New(mrand.NewPCG(seed, uint64(w)))
			for ctx.Err() == nil {
				in := histcheck.ModeInput{Name: "pool", Op: histcheck.Acquire, Permits: 2}
				if rng.IntN(2) == 0 {
					in = histcheck.ModeInput{Name: "rw", Op: histcheck.Acquire, Permits: 1, Shared: rng.IntN(3) > 0}
				}
				wait := rng.IntN(2) == 0
				call := now()
				actx, done := context.WithTimeout(ctx, 2*time.Second)
				var l *client.Lease
				var err error
				switch {
				case in.Name == "pool" && wait:
					l, err = cl.Semaphore("pool", 2).Acquire(actx)
				case in.Name == "pool":
					l, err = cl.Semaphore("pool", 2).TryAcquire(actx)
				case in.Shared && wait:
					l, err = cl.RWLock("rw").RLock(actx)
				case in.Shared:
					l, err = cl.RWLock("rw").TryRLock(actx)
				case wait:
					l, err = cl.RWLock("rw").Lock(actx)
				default:
					l, err = cl.RWLock("rw").TryLock(actx)
				}
				done()
				switch {
				case err == nil:
					record(w, in, call, histcheck.ModeOutput{OK: true, Grant: histcheck.Grant{Token: l.Token(), Slot: l.Slot(), Shared: l.Shared()}})
				case errors.Is(err, client.ErrLocked): // refused: nothing granted
					record(w, in, call, histcheck.ModeOutput{})
					continue
				default: // it may have been granted (and given back by the client)
					record(w, in, call, histcheck.ModeOutput{Unknown: true})
					continue
				}
				time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
				status := histcheck.ModeInput{Name: in.Name, Op: histcheck.Status, Permits: in.Permits}
				call = now()
				sctx, done := context.WithTimeout(ctx, 2*time.Second)
				info, err := cl.Status(sctx, in.Name)
				done()
				if err == nil {
					var held []histcheck.Grant
					for _, g := range info.Grants {
						held = append(held, histcheck.Grant{Token: g.Token, Slot: g.Slot, Shared: g.Shared})
					}
					record(w, status, call, histcheck.ModeOutput{Held: held})
				}
				rel := histcheck.ModeInput{Name: in.Name, Op: histcheck.Release, Permits: in.Permits, Token: l.Token()}
				call = now()
				rctx, done := context.WithTimeout(context.Background(), 3*time.Second)
				err = l.Release(rctx)
				done()
				switch {
				case err == nil:
					record(w, rel, call, histcheck.ModeOutput{OK: true})
				case !errors.Is(err, client.ErrIndeterminate) && (errors.Is(err, client.ErrExpired) || errors.Is(err, client.ErrRevoked)):
					record(w, rel, call, histcheck.ModeOutput{}) // the lease had ended: nothing released
				default:
					record(w, rel, call, histcheck.ModeOutput{Unknown: true})
				}
			}
		}()
	}
	c.killLeaders(2)
	cancel()
	wg.Wait()

	mustLinearize(t, histcheck.Modes.ToModel(), h.ops, "the semaphore and read-write lock model")
	grants := map[string]int{}
	for _, op := range h.ops {
		if in := op.Input.(histcheck.ModeInput); in.Op == histcheck.Acquire && op.Output.(histcheck.ModeOutput).OK {
			grants[in.Name]++
		}
	}
	if grants["pool"] == 0 || grants["rw"] == 0 {
		t.Fatalf("grants %v: the test did not exercise both locks", grants)
	}
	t.Logf("%d operations over 2 leader kills: linearizable; grants %v", len(h.ops), grants)
}

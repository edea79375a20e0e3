package e2e

import (
	"context"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/histcheck"
)

// TestClusterFencedKVHistory: 12 workers lock a key's lock, write the key with
// their token, read it back, and sometimes write again with an older token
// (a stale holder), while the leader is killed twice. The whole history of
// puts and gets — with unknown outcomes left open — must be linearizable
// against the fenced register model (accept iff token ≥ highest accepted).
func TestClusterFencedKVHistory(t *testing.T) {
	c := newCluster(t, 3, "--lock-delay", "0")
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		stale   int
	)
	record := func(op porcupine.Operation) {
		mu.Lock()
		history = append(history, op)
		mu.Unlock()
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	const workers = 12
	keys := []string{"k0", "k1", "k2"}
	for w := 0; w < workers; w++ {
		cl := c.dial(client.WithTTL(5 * time.Second))
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := mrand.New(mrand.NewPCG(uint64(w), 7))
			var oldToken uint64
			for i := 0; ctx.Err() == nil; i++ {
				key := keys[rng.IntN(len(keys))]
				lctx, done := context.WithTimeout(ctx, 3*time.Second)
				l, err := cl.TryLock(lctx, "lock-"+key)
				done()
				if err != nil {
					continue
				}
				put := func(value string, token uint64) {
					in := histcheck.KVInput{Key: key, Put: true, Value: value, Token: token}
					call := now()
					pctx, done := context.WithTimeout(ctx, 3*time.Second)
					err := cl.Put(pctx, key, []byte(value), token)
					done()
					var se *fencing.StaleError
					switch {
					case err == nil:
						record(porcupine.Operation{ClientId: w, Input: in, Call: call, Output: histcheck.KVOutput{}, Return: now()})
					case errors.As(err, &se):
						mu.Lock()
						stale++
						mu.Unlock()
						record(porcupine.Operation{ClientId: w, Input: in, Call: call, Output: histcheck.KVOutput{Stale: true, Token: se.Highest}, Return: now()})
					default: // may have landed
						record(porcupine.Operation{ClientId: w, Input: in, Call: call, Output: histcheck.KVOutput{Unknown: true}, Return: math.MaxInt64})
					}
				}
				put(fmt.Sprintf("w%d-%d", w, i), l.Token())
				if oldToken != 0 && rng.IntN(3) == 0 {
					put(fmt.Sprintf("w%d-%d-stale", w, i), oldToken) // a paused holder's late write
				}
				oldToken = l.Token()
				call := now()
				gctx, done := context.WithTimeout(ctx, 3*time.Second)
				v, tok, err := cl.Get(gctx, key)
				done()
				if err == nil {
					record(porcupine.Operation{ClientId: w, Input: histcheck.KVInput{Key: key}, Call: call,
						Output: histcheck.KVOutput{Found: true, Value: string(v), Token: tok}, Return: now()})
				}
				rctx, done := context.WithTimeout(ctx, 3*time.Second)
				l.Release(rctx)
				done()
			}
		}()
	}
	c.killLeaders(2)
	cancel()
	wg.Wait()

	mustLinearize(t, histcheck.FencedKV, history, "the fenced register model")
	if stale == 0 {
		t.Fatal("no stale write was refused: the test did not exercise fencing")
	}
	t.Logf("%d operations over 2 leader kills: linearizable; %d stale writes refused", len(history), stale)
}

// killLeaders kills the raft leader n times, 1.5 s apart, restarting each
// 0.5 s later, then lets the cluster run 1 s more.
func (c *cluster) killLeaders(n int) {
	for range n {
		time.Sleep(1500 * time.Millisecond)
		old := c.leader()
		old.kill()
		time.Sleep(500 * time.Millisecond)
		old.startProcess()
	}
	time.Sleep(time.Second)
}

// mustLinearize fails t unless history is linearizable against model
// (named what), leaving porcupine's drawing of a failure in the temp dir.
func mustLinearize(t *testing.T, model porcupine.Model, history []porcupine.Operation, what string) {
	t.Helper()
	res, info := porcupine.CheckOperationsVerbose(model, history, time.Minute)
	if res == porcupine.Ok {
		return
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("fence-history-%d.html", time.Now().UnixNano()))
	if err := porcupine.VisualizePath(model, info, path); err == nil {
		t.Logf("visualisation: %s", path)
	}
	t.Fatalf("history of %d operations is %s against %s", len(history), res, what)
}

// opHistory records operations for a porcupine check from many goroutines,
// with times counted from its start; an operation of unknown outcome stays
// open (its return is +∞: it may take effect any time after its call).
type opHistory struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation // guarded by mu
}

func newOpHistory() *opHistory { return &opHistory{start: time.Now()} }

// now is the time since the history started, for an operation's call.
func (h *opHistory) now() int64 { return int64(time.Since(h.start)) }

// add records an operation called at call that returns now, or never if
// its outcome is unknown.
func (h *opHistory) add(client int, in, out any, call int64, unknown bool) {
	ret := h.now()
	if unknown {
		ret = math.MaxInt64
	}
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
}

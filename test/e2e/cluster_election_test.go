package e2e

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/histcheck"
)

// TestClusterElectionHistory: 6 candidates campaign in one election,
// proclaim new values, read the leader and resign, while 2 readers ask who
// leads and an observer follows it, on 3 real members whose raft leader is
// killed twice. The history must be linearizable against the election model
// (terms rise, a read reports the current term's last value, a term never
// comes back, a Proclaim is refused exactly when a newer term wrote); the
// observer must see terms that never go down, each a value its term wrote.
func TestClusterElectionHistory(t *testing.T) {
	c := newCluster(t, 3, "--lock-delay", "0")
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed=%d", seed)
	h := newOpHistory()
	now := h.now
	var (
		mu      sync.Mutex                            // guards written and won
		written = map[histcheck.ElectionOutput]bool{} // (term, value) pairs a campaign or proclaim may have written
		won     int
	)
	record := func(client int, in histcheck.ElectionInput, call int64, out histcheck.ElectionOutput) {
		in.Name = "svc"
		h.add(client, in, out, call, out.Unknown)
	}
	mayHaveWritten := func(token uint64, value string) {
		mu.Lock()
		written[histcheck.ElectionOutput{Token: token, Value: value}] = true
		mu.Unlock()
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup

	obs, err := c.dial().Observe(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	var observed []client.Leader
	wg.Add(1)
	go func() {
		defer wg.Done()
		for l := range obs.Leaders() {
			observed = append(observed, l)
		}
	}()

	const candidates, readers = 6, 2
	for w := 0; w < candidates; w++ {
		cl := c.dial(client.WithTTL(3 * time.Second))
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := mrand.New(mrand.NewPCG(seed, uint64(w)))
			for i := 0; ctx.Err() == nil; i++ {
				value := fmt.Sprintf("w%d-%d", w, i)
				call := now()
				cctx, done := context.WithTimeout(ctx, 2*time.Second)
				ld, err := cl.Campaign(cctx, "svc", value)
				done()
				switch {
				case err == nil:
					mayHaveWritten(ld.Token(), value)
					record(w, histcheck.ElectionInput{Op: histcheck.Campaign, Value: value}, call, histcheck.ElectionOutput{OK: true, Token: ld.Token()})
				case errors.Is(err, client.ErrIndeterminate): // the value may have been written, with a term we may not know
					record(w, histcheck.ElectionInput{Op: histcheck.Campaign, Value: value}, call, histcheck.ElectionOutput{Unknown: true})
					continue
				default: // not elected (the wait ran out, say): nothing written
					record(w, histcheck.ElectionInput{Op: histcheck.Campaign, Value: value}, call, histcheck.ElectionOutput{})
					continue
				}
				mu.Lock()
				won++
				mu.Unlock()
				for p := range rng.IntN(3) {
					if ld.Err() != nil {
						break
					}
					v := fmt.Sprintf("%s-p%d", value, p)
					in := histcheck.ElectionInput{Op: histcheck.Proclaim, Token: ld.Token(), Value: v}
					mayHaveWritten(ld.Token(), v)
					call := now()
					pctx, done := context.WithTimeout(ctx, 2*time.Second)
					err := ld.Proclaim(pctx, v)
					done()
					switch {
					case err == nil:
						record(w, in, call, histcheck.ElectionOutput{OK: true})
					case errors.Is(err, client.ErrIndeterminate): // deposed too, maybe, after an attempt that may have written
						record(w, in, call, histcheck.ElectionOutput{Unknown: true})
					case errors.Is(err, client.ErrDeposed):
						record(w, in, call, histcheck.ElectionOutput{Deposed: true})
					default:
						record(w, in, call, histcheck.ElectionOutput{Unknown: true})
					}
					time.Sleep(time.Duration(rng.IntN(50)) * time.Millisecond)
				}
				call = now()
				rctx, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				err = ld.Resign(rctx)
				done()
				out := histcheck.ElectionOutput{OK: err == nil, Unknown: err != nil}
				record(w, histcheck.ElectionInput{Op: histcheck.Resign, Token: ld.Token()}, call, out)
			}
		}()
	}
	for r := 0; r < readers; r++ {
		cl := c.dial()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				call := now()
				rctx, done := context.WithTimeout(ctx, 2*time.Second)
				l, err := cl.Leader(rctx, "svc")
				done()
				switch {
				case err == nil:
					record(candidates+r, histcheck.ElectionInput{Op: histcheck.ReadLeader}, call, histcheck.ElectionOutput{OK: true, Token: l.Token, Value: l.Value})
				case errors.Is(err, client.ErrNoLeader):
					record(candidates+r, histcheck.ElectionInput{Op: histcheck.ReadLeader}, call, histcheck.ElectionOutput{})
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	c.killLeaders(2)
	cancel()
	wg.Wait()

	mustLinearize(t, histcheck.Elections.ToModel(), h.ops, "the election model")
	if won < 5 {
		t.Fatalf("only %d campaigns won: the test did not exercise elections", won)
	}
	for i, l := range observed {
		if !written[histcheck.ElectionOutput{Token: l.Token, Value: l.Value}] {
			t.Errorf("observed %q with term %d, which no campaign or proclaim of that term wrote", l.Value, l.Token)
		}
		if i > 0 && (l.Token < observed[i-1].Token || l == observed[i-1]) {
			t.Errorf("observed %q (term %d) after %q (term %d): back, or twice", l.Value, l.Token, observed[i-1].Value, observed[i-1].Token)
		}
	}
	if len(observed) < 2 {
		t.Fatalf("the observer saw %d leaders", len(observed))
	}
	t.Logf("%d operations, %d terms won, over 2 leader kills: linearizable; the observer saw %d leaders in order", len(h.ops), won, len(observed))
}

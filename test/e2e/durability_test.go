package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fencehq/fence/api"
)

// testSeq numbers the Acquire and Release calls: one counter for all leases
// (unique per lease is all the numbering asks). Each worker's lease makes
// its calls one at a time, so a call acknowledges every earlier one (Ack = Seq).
var testSeq atomic.Uint64

func nextSeq() uint64 { return testSeq.Add(1) }

func newReq() []byte {
	b := make([]byte, 16)
	rand.Read(b)
	return b
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

type put struct {
	value string
	token uint64
}

// TestKill9Durability runs the real binary under load from 16 clients,
// SIGKILLs it at random moments (seeded; the seed is logged), restarts it
// from its data dir, and checks after every restart that every acknowledged
// grant and fenced write is still there, that no token was handed out twice,
// and that the next token is larger than every token ever handed out.
// Snapshots are taken every 200 entries, so restarts cross snapshots too.
// FENCE_E2E_KILLS sets the number of kills (default 6); FENCE_E2E_SEED replays a run.
func TestKill9Durability(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("FENCE_E2E_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed=%d (replay with FENCE_E2E_SEED=%d)", seed, seed)
	rng := mrand.New(mrand.NewPCG(seed, 0))
	kills := envInt("FENCE_E2E_KILLS", 6)
	const workers = 16

	n := newNode(t, "--lock-delay", "0", "--snapshot-threshold", "200", "--trailing-logs", "50")
	n.start()
	leases := make([][]byte, workers)
	numbers := make([]uint64, workers)
	for i := range leases {
		r, err := n.cli.CreateLease(timeout(t, 5*time.Second), &api.CreateLeaseRequest{RequestId: newReq(), Ttl: durationpb.New(time.Hour), Owner: fmt.Sprintf("w%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		leases[i], numbers[i] = r.LeaseSecret, r.LeaseNumber
	}

	var (
		mu       sync.Mutex
		grants   = map[string]uint64{}       // lock name → acknowledged token
		holder   = map[string]int{}          // lock name → worker
		lastPut  = map[string]put{}          // key → last acknowledged write
		tried    = map[string]map[put]bool{} // key → every write attempted
		maxToken uint64
		released = map[string]bool{} // acknowledged releases
		errs     int
	)
	for round := 0; round <= kills; round++ {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := fmt.Sprintf("kv/w%d", w)
				for i := 0; ctx.Err() == nil; i++ {
					name := fmt.Sprintf("r%d/w%d/%d", round, w, i)
					c, done := context.WithTimeout(ctx, 2*time.Second)
					seq := nextSeq()
					r, err := n.cli.Acquire(c, &api.AcquireRequest{RequestId: newReq(), Seq: seq, Ack: seq, LeaseSecret: leases[w], Name: name})
					done()
					if err != nil {
						mu.Lock()
						errs++
						mu.Unlock()
						time.Sleep(5 * time.Millisecond)
						continue
					}
					p := put{value: name, token: r.Token}
					mu.Lock()
					if r.Token <= maxToken && grants[name] == 0 {
						for other, tok := range grants {
							if tok == r.Token {
								t.Errorf("token %d granted twice: %s and %s", r.Token, other, name)
							}
						}
					}
					grants[name], holder[name] = r.Token, w
					maxToken = max(maxToken, r.Token)
					if tried[key] == nil {
						tried[key] = map[put]bool{}
					}
					tried[key][p] = true
					mu.Unlock()
					err = nil
					if w%2 == 0 { // only even workers write, so released tokens can vanish from view
						c, done = context.WithTimeout(ctx, 2*time.Second)
						_, err = n.cli.Put(c, &api.PutRequest{RequestId: newReq(), Key: key, Value: []byte(p.value), Token: p.token})
						done()
					}
					if err == nil && w%2 == 0 {
						mu.Lock()
						lastPut[key] = p
						mu.Unlock()
					}
					if i%2 == 1 { // release every other grant, so not every token stays visible
						c, done = context.WithTimeout(ctx, 2*time.Second)
						seq := nextSeq()
						_, err = n.cli.Release(c, &api.ReleaseRequest{RequestId: newReq(), Seq: seq, Ack: seq, LeaseSecret: leases[w], Name: name})
						done()
						mu.Lock()
						if err == nil {
							released[name] = true
						}
						delete(grants, name) // released, or unknown
						mu.Unlock()
					}
				}
			}()
		}
		if round < kills {
			time.Sleep(time.Duration(100+rng.IntN(500)) * time.Millisecond)
			n.kill()
		} else {
			time.Sleep(300 * time.Millisecond)
		}
		cancel()
		wg.Wait()
		if round < kills {
			n.start()
		}
		maxToken = verify(t, n, grants, released, holder, numbers, lastPut, tried, maxToken)
		if t.Failed() {
			t.Fatalf("violation after round %d; server log:\n%s", round, n.logTail())
		}
	}
	snaps, _ := filepath.Glob(filepath.Join(n.dir, "data", "snapshots", "*"))
	t.Logf("kills=%d acknowledged grants still held=%d acknowledged releases=%d highest token=%d failed calls (server down)=%d snapshots on disk=%d",
		kills, len(grants), len(released), maxToken, errs, len(snaps))
	if len(grants) < 100 {
		t.Fatalf("only %d grants: the load did not run", len(grants))
	}
}

func verify(t *testing.T, n *node, grants map[string]uint64, released map[string]bool, holder map[string]int, numbers []uint64,
	lastPut map[string]put, tried map[string]map[put]bool, maxToken uint64) uint64 {
	t.Helper()
	ctx := timeout(t, 20*time.Second)
	held := map[string]*api.LockInfo{}
	seen := map[uint64]string{}
	var highest uint64
	for _, l := range listAll(t, ctx, n.cli) {
		held[l.Name] = l
		if other, dup := seen[l.Token]; dup {
			t.Errorf("token %d held by both %s and %s", l.Token, other, l.Name)
		}
		seen[l.Token] = l.Name
		highest = max(highest, l.Token)
	}
	for name, tok := range grants {
		l := held[name]
		if l == nil || l.Token != tok || l.HolderLeaseNumber != numbers[holder[name]] {
			t.Errorf("acknowledged grant %s (token %d) lost: now %v", name, tok, l)
		}
	}
	for name := range released {
		if l := held[name]; l != nil {
			t.Errorf("acknowledged release of %s undone: %v", name, l)
		}
	}
	for key, want := range lastPut {
		g, err := n.cli.Get(ctx, &api.GetRequest{Key: key})
		if err != nil {
			t.Errorf("acknowledged write to %s lost: %v", key, err)
			continue
		}
		got := put{value: string(g.Value), token: g.Token}
		if got.token < want.token || !tried[key][got] {
			t.Errorf("%s holds %+v; last acknowledged %+v", key, got, want)
		}
	}
	// The next token is larger than every token ever handed out.
	probe, err := n.cli.CreateLease(ctx, &api.CreateLeaseRequest{RequestId: newReq(), Ttl: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := n.cli.Acquire(ctx, &api.AcquireRequest{RequestId: newReq(), Seq: 1, Ack: 1, LeaseSecret: probe.LeaseSecret, Name: fmt.Sprintf("probe/%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	defer n.cli.Revoke(ctx, &api.RevokeRequest{RequestId: newReq(), LeaseSecret: probe.LeaseSecret})
	if r.Token <= maxToken || r.Token <= highest {
		t.Errorf("next token %d not above every token handed out (acknowledged max %d, held max %d)", r.Token, maxToken, highest)
	}
	return max(maxToken, r.Token)
}

// listAll reads every page of ListLocks.
func listAll(t *testing.T, ctx context.Context, fc api.FenceServiceClient) []*api.LockInfo {
	t.Helper()
	var all []*api.LockInfo
	for after := ""; ; {
		page, err := fc.ListLocks(ctx, &api.ListLocksRequest{After: after})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Locks...)
		if !page.More || len(page.Locks) == 0 {
			return all
		}
		after = page.Locks[len(page.Locks)-1].Name
	}
}

package node

import (
	"encoding/binary"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencehq/fence/internal/clock"
	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/hotlocks"
	"github.com/fencehq/fence/internal/metrics"
	"github.com/fencehq/fence/internal/watch"
)

// applyRig feeds commands through a real fsm.State and the node's apply
// callback (applied), without raft: what every member does with each
// committed entry.
type applyRig struct {
	n     *Node
	reg   *prometheus.Registry
	index uint64
	req   uint64
	seq   map[fsm.LeaseID]uint64
}

func newApplyRig(tb testing.TB, prefixes metrics.PrefixConfig) *applyRig {
	tb.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	n := &Node{log: log, replica: &replica{state: fsm.New(), log: log}}
	r := &applyRig{n: n, reg: prometheus.NewRegistry(), seq: map[fsm.LeaseID]uint64{}}
	zero := func() float64 { return 0 }
	n.cfg.Metrics = metrics.NewServer(r.reg, metrics.Gauges{Leases: zero, Locks: zero, Waiters: zero, IsLeader: zero, Prefixes: prefixes,
		Queues: func(fn func(string, int)) { n.replica.state.Queues(fn) }})
	n.history = watch.New(0, 0)
	n.lessor = newLessor(clock.Real{}, 100*time.Millisecond, nil, nil, log)
	n.holds, n.waits, n.hot = holdTimes{}, waitStarts{}, hotlocks.New(0, 0)
	return r
}

// apply applies cmds as one entry and returns their results.
func (r *applyRig) apply(cmds ...fsm.Command) []fsm.Result {
	results := make([]fsm.Result, len(cmds))
	for i := range cmds {
		results[i] = r.n.replica.state.Apply(&cmds[i])
	}
	r.index++
	r.n.applied(r.index, cmds, results, nil)
	return results
}

func (r *applyRig) newReq() fsm.RequestID {
	r.req++
	var id fsm.RequestID
	binary.LittleEndian.PutUint64(id[:], r.req)
	return id
}

// lease creates a lease with ttl and returns its id.
func (r *applyRig) lease(tb testing.TB, n byte, ttl time.Duration) fsm.LeaseID {
	id := fsm.LeaseID{n, 0xfe}
	if res := r.apply(fsm.Command{Kind: fsm.KindCreateLease, RequestID: r.newReq(), Lease: id, TTL: ttl, Owner: "o" + strconv.Itoa(int(n))}); res[0].Code != fsm.OK {
		tb.Fatalf("create lease: %v", res[0].Code)
	}
	return id
}

// call makes an Acquire (wait or not) or a Release of name by lease and
// returns its result code (each call acknowledges the earlier ones).
func (r *applyRig) call(kind fsm.Kind, lease fsm.LeaseID, name string, wait bool) fsm.Code {
	r.seq[lease]++
	s := r.seq[lease]
	c := fsm.Command{Kind: kind, RequestID: r.newReq(), Lease: lease, Seq: s, Ack: s, Name: name, Wait: wait}
	if kind == fsm.KindAcquire {
		c.LockDelay = time.Second
	}
	return r.apply(c)[0].Code
}

func (r *applyRig) tick(d time.Duration) { r.apply(fsm.Command{Kind: fsm.KindTick, Elapsed: d}) }

// series counts the series (metrics) of the families whose names start
// with "fence_".
func (r *applyRig) series(tb testing.TB) int {
	tb.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		n += len(mf.GetMetric())
	}
	return n
}

// 100,000 distinct lock names, each acquired, waited for (a third of them
// also by a wait that is cancelled) and released, leave a bounded number of series (the prefix cap) and a
// bounded hot-lock sketch (K names), whatever the number of names.
func TestCardinalityBounded(t *testing.T) {
	const names, maxPrefixes, k = 100_000, 50, 1000
	r := newApplyRig(t, metrics.PrefixConfig{Separator: "/", Depth: 1, Max: maxPrefixes})
	r.n.hot = hotlocks.New(k, 0)
	a, b, c := r.lease(t, 1, time.Hour), r.lease(t, 2, time.Hour), r.lease(t, 3, time.Hour)
	for i := range names {
		// every name its own prefix ("p<i>/…"), or none at all (every 7th)
		name := "p" + strconv.Itoa(i) + "/lock"
		if i%7 == 0 {
			name = "flat-" + strconv.Itoa(i)
		}
		if c := r.call(fsm.KindAcquire, a, name, false); c != fsm.OK {
			t.Fatalf("acquire %s: %v", name, c)
		}
		if c := r.call(fsm.KindAcquire, b, name, true); c != fsm.Queued {
			t.Fatalf("queue %s: %v", name, c)
		}
		if i%3 == 0 { // a third acquire queues and cancels its wait
			if code := r.call(fsm.KindAcquire, c, name, true); code != fsm.Queued {
				t.Fatalf("queue %s by c: %v", name, code)
			}
			if res := r.apply(fsm.Command{Kind: fsm.KindCancelWait, Lease: c, Name: name, Seq: r.seq[c]}); res[0].Code != fsm.OK {
				t.Fatalf("cancel wait on %s: %v", name, res[0].Code)
			}
		}
		r.tick(time.Millisecond)
		if c := r.call(fsm.KindRelease, a, name, false); c != fsm.OK { // b is granted
			t.Fatalf("release %s: %v", name, c)
		}
		if c := r.call(fsm.KindRelease, b, name, false); c != fsm.OK {
			t.Fatalf("release %s by b: %v", name, c)
		}
	}
	got := r.series(t)
	// Per label value: hold seconds and ratio (cause released), wait
	// seconds, the waiters gauge; the labels are maxPrefixes prefixes,
	// (none) and (other). Plus the unlabelled series, counted on an
	// idle rig.
	idle := newApplyRig(t, metrics.PrefixConfig{Separator: "/", Depth: 1, Max: maxPrefixes}).series(t)
	if want := idle + (maxPrefixes+2)*4 - 2; got != want { // idle has the waiters gauge of (none) and (other)
		t.Errorf("series after %d names: %d, want %d (idle %d)", names, got, want, idle)
	}
	if r.n.hot.Len() != k {
		t.Errorf("hot-lock sketch tracks %d names, want %d", r.n.hot.Len(), k)
	}
	if nb := r.n.hot.NameBytes(); nb > k*len("p100000/lock") {
		t.Errorf("hot-lock sketch holds %d bytes of names, over %d", nb, k*len("p100000/lock"))
	}
	if len(r.n.waits) != 0 || len(r.n.holds) != 0 {
		t.Errorf("apply-path maps not emptied: %d waits, %d holds", len(r.n.waits), len(r.n.holds))
	}
}

// BenchmarkApplied measures the apply callback (metrics, hot locks,
// watch history, waiters) for an acquire+release cycle of one of 1024
// names, its fsm.Apply included (b.N counts cycles).
func BenchmarkApplied(b *testing.B) {
	r := newApplyRig(b, metrics.DefaultPrefixConfig())
	a := r.lease(b, 1, time.Hour)
	names := make([]string, 1024)
	for i := range names {
		names[i] = "jobs" + strconv.Itoa(i%10) + "/lock/" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := names[i%len(names)]
		if c := r.call(fsm.KindAcquire, a, name, false); c != fsm.OK {
			b.Fatal(c)
		}
		if c := r.call(fsm.KindRelease, a, name, false); c != fsm.OK {
			b.Fatal(c)
		}
	}
}

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The faults the harness injects. Config.Faults selects some; all by default.
const (
	FaultPauseWorker   = "pause-worker"   // SIGSTOP a worker for 0.5×, 1.5× or 5× its TTL
	FaultKillWorker    = "kill-worker"    // SIGKILL a worker; it restarts as a new incarnation
	FaultKillLeader    = "kill-leader"    // SIGKILL the leader, restart it 0.5–2 s later
	FaultKillFollower  = "kill-follower"  // the same for a follower
	FaultPauseLeader   = "pause-leader"   // SIGSTOP the leader for 1.5–3 s (past the election timeout)
	FaultPartition     = "partition"      // cut a server off from the others (and, a third of the time, from clients too)
	FaultIsolateLeader = "isolate-leader" // cut the leader off from the other servers only: its clients still reach it
	FaultClockShift    = "clock-shift"    // restart a server or a worker with its clocks moved ±5 min
)

// AllFaults lists every fault.
var AllFaults = []string{FaultPauseWorker, FaultKillWorker, FaultKillLeader, FaultKillFollower, FaultPauseLeader, FaultPartition, FaultIsolateLeader, FaultClockShift, FaultReplay}

// FaultCounts says how often each fault happened.
type FaultCounts struct {
	WorkerPauses map[string]int `json:"worker_pauses"` // by length: 0.5x, 1.5x, 5x TTL
	WorkerKills  int            `json:"worker_kills"`
	LeaderKills  int            `json:"leader_kills"`
	FollowerKill int            `json:"follower_kills"`
	LeaderPauses int            `json:"leader_pauses"`
	Partitions   int            `json:"partitions"`
	ClockShifts  int            `json:"clock_shifts"`
}

// faulter runs the seeded fault schedule: worker faults on one loop, server
// faults (one at a time, each undone before the next) on another.
type faulter struct {
	h       *harness
	enabled map[string]bool
	log     *os.File

	mu     sync.Mutex
	counts FaultCounts // guarded by mu
}

func (f *faulter) note(format string, args ...any) {
	fmt.Fprintf(f.log, "%d "+format+"\n", append([]any{Mono()}, args...)...)
}

func (f *faulter) count(fn func(c *FaultCounts)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(&f.counts)
}

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// sleep waits d or until ctx ends; it reports whether the whole d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// clockShift is ±5 minutes; backwards only as far as the machine's uptime allows.
func clockShift(rng *rand.Rand) time.Duration {
	if rng.IntN(2) == 0 {
		return 5 * time.Minute
	}
	b, _ := os.ReadFile("/proc/uptime")
	up, _ := strconv.ParseFloat(strings.Fields(string(b) + " 0")[0], 64)
	if up > 400 {
		return -5 * time.Minute
	}
	return 5 * time.Minute
}

func (f *faulter) workerLoop(ctx context.Context, rng *rand.Rand, wg *sync.WaitGroup) {
	var kinds []string
	for _, k := range []string{FaultPauseWorker, FaultKillWorker, FaultClockShift} {
		if f.enabled[k] {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		return
	}
	ttl := f.h.cfg.TTL
	for sleep(ctx, between(rng, 300*time.Millisecond, time.Second)) {
		w := pick(rng, f.h.workers)
		if !w.lock.TryLock() { // already under a fault
			continue
		}
		kind := pick(rng, kinds)
		if f.enabled[FaultPauseWorker] && rng.IntN(2) == 0 {
			kind = FaultPauseWorker // pauses are what fencing is for: half of all worker faults
		}
		switch kind {
		case FaultPauseWorker:
			factor := pick(rng, []float64{0.5, 1.5, 5})
			d := time.Duration(factor * float64(ttl))
			label := strconv.FormatFloat(factor, 'f', 1, 64) + "x"
			f.note("pause worker %s for %v (%s TTL)", w.cfg.ID, d, label)
			f.count(func(c *FaultCounts) { c.WorkerPauses[label]++ })
			w.p.pause()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer w.lock.Unlock()
				sleep(ctx, d)
				w.p.resume()
			}()
		case FaultKillWorker, FaultClockShift:
			var shift time.Duration
			if kind == FaultClockShift {
				shift = clockShift(rng)
				f.count(func(c *FaultCounts) { c.ClockShifts++ })
			} else {
				f.count(func(c *FaultCounts) { c.WorkerKills++ })
			}
			f.note("kill worker %s, restart it with clocks shifted %v", w.cfg.ID, shift)
			w.p.kill()
			err := f.h.startWorker(w, shift)
			w.lock.Unlock()
			if err != nil {
				f.note("restart worker %s failed: %v", w.cfg.ID, err)
			}
		}
	}
}

func (f *faulter) serverLoop(ctx context.Context, rng *rand.Rand) {
	var kinds []string
	for _, k := range []string{FaultKillLeader, FaultKillFollower, FaultPauseLeader, FaultPartition, FaultIsolateLeader, FaultClockShift} {
		if f.enabled[k] && (len(f.h.cl.nodes) > 1 || k != FaultKillFollower && k != FaultPartition && k != FaultIsolateLeader) {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		return
	}
	for sleep(ctx, between(rng, 1500*time.Millisecond, 3*time.Second)) {
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		lead, err := f.h.cl.waitLeader(wctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				f.note("no leader before the next fault: %v", err)
			}
			continue
		}
		victim := lead
		kind := pick(rng, kinds)
		if kind == FaultKillFollower || kind == FaultClockShift || kind == FaultPartition && rng.IntN(2) == 0 {
			others := slices.DeleteFunc(slices.Clone(f.h.cl.nodes), func(n *node) bool { return n == lead })
			if len(others) > 0 {
				victim = pick(rng, others)
			}
		}
		role := map[bool]string{true: "leader", false: "follower"}[victim == lead]
		switch kind {
		case FaultKillLeader, FaultKillFollower, FaultClockShift:
			var shift time.Duration
			if kind == FaultClockShift {
				shift = clockShift(rng)
				f.count(func(c *FaultCounts) { c.ClockShifts++ })
			} else if victim == lead {
				f.count(func(c *FaultCounts) { c.LeaderKills++ })
			} else {
				f.count(func(c *FaultCounts) { c.FollowerKill++ })
			}
			down := between(rng, 500*time.Millisecond, 2*time.Second)
			f.note("kill %s %s; restart in %v with clocks shifted %v", role, victim.id, down, shift)
			victim.kill()
			sleep(ctx, down)
			if err := victim.start(shift); err != nil {
				f.note("restart %s failed: %v", victim.id, err)
			}
		case FaultPauseLeader:
			d := between(rng, 1500*time.Millisecond, 3*time.Second)
			f.note("pause leader %s for %v", victim.id, d)
			f.count(func(c *FaultCounts) { c.LeaderPauses++ })
			if p := victim.proc(); p != nil {
				p.pause()
				sleep(ctx, d)
				p.resume()
			}
		case FaultPartition, FaultIsolateLeader:
			d := between(rng, 2*time.Second, 4*time.Second)
			full := kind == FaultPartition && rng.IntN(3) == 0
			f.note("partition %s %s for %v (from clients too: %v)", role, victim.id, d, full)
			f.count(func(c *FaultCounts) { c.Partitions++ })
			cut, heal := f.h.cl.lab.Isolate, f.h.cl.lab.Rejoin
			if full {
				cut, heal = f.h.cl.lab.Cut, f.h.cl.lab.Heal
			}
			if err := cut(victim.host); err != nil {
				f.note("partition failed: %v", err)
			}
			sleep(ctx, d)
			if err := heal(victim.host); err != nil {
				f.note("heal failed: %v", err)
			}
		}
	}
}

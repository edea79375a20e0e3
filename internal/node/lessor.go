package node

import (
	"container/heap"
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fencehq/fence/internal/clock"
	"github.com/fencehq/fence/internal/fsm"
)

// lessor runs the leader's time-driven duties. While active (this node leads
// and has applied the whole log) it keeps every lease's deadline on the
// leader's monotonic clock and, every tick:
//   - proposes Tick{elapsed}, writing the time that passed into the log;
//   - proposes Expire for each lease past its deadline, carrying the renewal
//     count it judged, so a renewal that commits first wins;
//   - proposes GrantNext for each lock whose lock-delay has passed.
//
// Nothing takes effect until it commits, so a deposed leader that cannot reach
// a majority expires nothing and grants nothing.
//
// Deadlines. While leading, a lease's deadline is the local time at which its
// creation or renewal was applied, plus its TTL; that is after the client sent
// the renewal, so it is never earlier than the client's own deadline. On
// takeover (election or restart) the new leader has no such times. It reads
// the logical clock instead: each lease records the logical time of its last
// renewal, and the ticks committed since then sum to at most the real time
// that passed plus a fixed overcount (see takeoverSlack), so
//
//	deadline = now + TTL − (clock − renewedAt − takeoverSlack)
//
// is never earlier than any deadline an earlier leader promised, and a lease
// nobody renews still ends: every leader adds its ticks to the same clock.
type lessor struct {
	clock   clock.Clock
	tick    time.Duration
	propose func(context.Context, []fsm.Command) []proposalResult
	log     *slog.Logger
	duties  chan struct{} // a slot: one batch of Expire/GrantNext in flight at a time

	mu       sync.Mutex
	active   bool                     // guarded by mu
	leases   map[fsm.LeaseID]*tracked // guarded by mu
	expiry   deadlineHeap             // guarded by mu; one entry per tracked lease
	delays   map[string]delay         // guarded by mu; lock name → when to GrantNext
	lastTick time.Time                // guarded by mu
}

type tracked struct {
	deadline time.Time
	renewals uint64
}

// takeoverSlack bounds how much logged tick time may predate a renewal: a
// tick's elapsed covers the span since the previous tick's proposal, and the
// ticks just after a renewal can reach back before it by at most two ticks'
// capped elapsed (ticks are proposed one at a time).
func (ls *lessor) takeoverSlack() time.Duration { return 2 * ls.maxTickElapsed() }

// maxTickElapsed caps one Tick's elapsed: a leader that stalls (paused,
// starved) logs less time than passed, never more, so leases only get longer.
func (ls *lessor) maxTickElapsed() time.Duration { return 2 * ls.tick }

func newLessor(c clock.Clock, tick time.Duration, propose func(context.Context, []fsm.Command) []proposalResult, log *slog.Logger) *lessor {
	return &lessor{clock: c, tick: tick, propose: propose, log: log, duties: make(chan struct{}, 1),
		leases: map[fsm.LeaseID]*tracked{}, delays: map[string]delay{}}
}

// activate starts the leader duties from state s. The caller holds the
// replica's read lock, so no command applies meanwhile.
func (ls *lessor) activate(s *fsm.State) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	now := ls.clock.Now()
	n := s.NumLeases()
	ls.leases, ls.expiry, ls.delays = make(map[fsm.LeaseID]*tracked, n), make(deadlineHeap, 0, n), map[string]delay{}
	logical := s.Clock()
	slack := ls.takeoverSlack()
	s.LeaseTimes(func(id fsm.LeaseID, ttl, renewedAt time.Duration, renewals uint64) {
		passed := max(0, logical-renewedAt-slack)
		d := now.Add(max(0, ttl-passed))
		ls.leases[id] = &tracked{deadline: d, renewals: renewals}
		ls.expiry = append(ls.expiry, heapEntry{at: d, id: id})
	})
	heap.Init(&ls.expiry) // O(n), where a push per lease is O(n log n)
	for _, k := range s.Locks() {
		if k.Delayed {
			passed := max(0, logical-k.DelayFrom-slack)
			ls.delays[k.Name] = delay{at: now.Add(max(0, k.LockDelay-passed)), token: k.Token}
		}
	}
	ls.lastTick = now
	ls.active = true
	ls.log.Info("leader duties started", "leases", len(ls.leases), "delayed_locks", len(ls.delays))
}

// deactivate stops the leader duties (leadership lost or shutting down).
func (ls *lessor) deactivate() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.active {
		ls.log.Info("leader duties stopped")
	}
	ls.active = false
	ls.leases, ls.expiry, ls.delays = map[fsm.LeaseID]*tracked{}, nil, map[string]delay{}
}

// isActive reports whether this node is leading with a complete state.
func (ls *lessor) isActive() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.active
}

// deadline returns a lease's deadline, if this node tracks it.
func (ls *lessor) deadline(id fsm.LeaseID) (time.Time, bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	t := ls.leases[id]
	if t == nil {
		return time.Time{}, false
	}
	return t.deadline, true
}

// applied updates deadlines from the events of one applied entry. It reads
// the clock once per entry (the boottime clock is a system call, and an
// entry may renew thousands of leases). Called on the apply path with the
// replica locked; it must not block.
func (ls *lessor) applied(results []fsm.Result) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if !ls.active {
		return
	}
	now := ls.clock.Now()
	for i := range results {
		for j := range results[i].Events {
			ls.eventLocked(&results[i].Events[j], now)
		}
	}
}

// eventLocked updates deadlines from one event applied at now. ls.mu must be held.
func (ls *lessor) eventLocked(e *fsm.Event, now time.Time) {
	switch e.Kind {
	case fsm.LeaseStarted, fsm.LeaseRenewed:
		d := now.Add(e.TTL)
		if t := ls.leases[e.Lease]; t != nil {
			t.deadline, t.renewals = later(t.deadline, d), e.Renewals
		} else {
			ls.trackLocked(e.Lease, d, e.Renewals)
		}
	case fsm.LeaseEnded:
		delete(ls.leases, e.Lease) // its heap entry is dropped when popped
	case fsm.DelayStarted:
		ls.delays[e.Name] = delay{at: now.Add(e.Delay), token: e.Token}
	}
}

func (ls *lessor) trackLocked(id fsm.LeaseID, deadline time.Time, renewals uint64) {
	ls.leases[id] = &tracked{deadline: deadline, renewals: renewals}
	heap.Push(&ls.expiry, heapEntry{at: deadline, id: id})
}

// run performs the duties every tick until ctx ends.
func (ls *lessor) run(ctx context.Context) {
	t := ls.clock.NewTicker(ls.tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			ls.step(ctx)
		}
	}
}

// step proposes this tick's Tick and waits for raft's verdict on it, never
// for a timer: ticks commit one at a time (takeoverSlack counts on it; a
// tick whose outcome is unknown could commit after the next one). The
// tick's duties (Expire, GrantNext) go to raft as one batch in the
// background, one batch in flight at a time, so a slow batch (slow commits,
// an expiry storm) delays the next duties but never the logical clock.
func (ls *lessor) step(ctx context.Context) {
	free := false
	select {
	case ls.duties <- struct{}{}:
		free = true
	default: // the last duties are still committing: leave this tick's for later
	}
	tick, duties := ls.due(free)
	if free && len(duties) == 0 {
		<-ls.duties
	}
	if len(duties) > 0 {
		go func() {
			defer func() { <-ls.duties }()
			ls.perform(ctx, duties)
		}()
	}
	if tick != nil {
		if out := ls.propose(ctx, []fsm.Command{*tick})[0]; out.err != nil {
			ls.log.Warn("tick not committed", "err", out.err)
		}
	}
}

// perform proposes a batch of duties and logs or re-schedules the outcomes.
// Expires that do not commit are looked at again a tick later (due
// re-schedules them); a GrantNext is re-scheduled here.
func (ls *lessor) perform(ctx context.Context, cmds []fsm.Command) {
	pctx, cancel := context.WithTimeout(ctx, 10*ls.tick+time.Second)
	defer cancel()
	expired := 0
	for i, out := range ls.propose(pctx, cmds) {
		c := cmds[i]
		switch {
		case out.err != nil:
			ls.log.Warn("leader duty not committed; will retry", "cmd", c.Kind.String(), "err", out.err)
			if c.Kind == fsm.KindGrantNext {
				ls.retryDelay(c.Name, c.Token)
			}
		case c.Kind == fsm.KindExpire && out.res.Code == fsm.OK:
			expired++
			if expired <= 100 { // an expiry storm logs a count, not a line per lease
				ls.log.Info("lease expired", "lease", out.res.LeaseNumber, "released", out.res.Released)
			}
		}
	}
	if expired > 100 {
		ls.log.Info("leases expired", "count", expired)
	}
}

// due collects this tick's commands: the Tick (nil when nothing needs the
// clock) and, if withDuties, the Expire and GrantNext commands that are due.
func (ls *lessor) due(withDuties bool) (tick *fsm.Command, cmds []fsm.Command) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if !ls.active {
		return nil, nil
	}
	now := ls.clock.Now()
	if len(ls.leases) > 0 || len(ls.delays) > 0 {
		elapsed := min(now.Sub(ls.lastTick), ls.maxTickElapsed())
		if elapsed > 0 {
			tick = &fsm.Command{Kind: fsm.KindTick, Elapsed: elapsed}
		}
	}
	ls.lastTick = now
	if !withDuties {
		return tick, nil
	}
	for len(ls.expiry) > 0 && !ls.expiry[0].at.After(now) {
		e := heap.Pop(&ls.expiry).(heapEntry)
		t := ls.leases[e.id]
		switch {
		case t == nil: // ended
		case t.deadline.After(now): // renewed since it was pushed
			heap.Push(&ls.expiry, heapEntry{at: t.deadline, id: e.id})
		default:
			cmds = append(cmds, fsm.Command{Kind: fsm.KindExpire, Lease: e.id, Renewals: t.renewals})
			// Look again next tick: gone if the expire committed, renewed, or retried.
			heap.Push(&ls.expiry, heapEntry{at: now.Add(ls.tick), id: e.id})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(ls.delays)) {
		if d := ls.delays[name]; !d.at.After(now) {
			delete(ls.delays, name)
			cmds = append(cmds, fsm.Command{Kind: fsm.KindGrantNext, Name: name, Token: d.token})
		}
	}
	return tick, cmds
}

func (ls *lessor) retryDelay(name string, token uint64) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.active {
		if _, ok := ls.delays[name]; !ok {
			ls.delays[name] = delay{at: ls.clock.Now(), token: token}
		}
	}
}

// delay is a lock's lock-delay: when it ends, and the token of the grant
// whose expiry began it (GrantNext carries it, so a late one cannot end a
// later delay).
type delay struct {
	at    time.Time
	token uint64
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

type heapEntry struct {
	at time.Time
	id fsm.LeaseID
}

// deadlineHeap is a min-heap of lease deadlines.
type deadlineHeap []heapEntry

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h deadlineHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *deadlineHeap) Push(x any)        { *h = append(*h, x.(heapEntry)) }
func (h *deadlineHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

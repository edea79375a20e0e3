package node

import (
	"cmp"
	"container/heap"
	"context"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"strings"
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
//
// Lazy takeover. Computing that deadline for a million leases takes about a
// second, so a new leader does not do it before it serves: activate only
// lists the live leases' ids and starts serving (grants, renewals), and the
// builder goroutine (builds) computes the deadlines a chunk at a time,
// each chunk under the replica's read lock, from the clocks read at
// takeover — the very deadlines an eager build would have given. Until the
// build reaches a lease it is in no heap, so this leader cannot expire it:
// its expiry is only deferred (later is safe: expiry is the one thing
// that frees a lock on the leader's own initiative). Events applied
// meanwhile are never lost: a lease created during the build is tracked at
// once (it has no earlier promise); one renewed before the build reached it
// is tracked as pending, with no heap entry, and the build folds the
// takeover deadline in (the later of the two) and only then schedules it;
// one that ended is not in the state when its chunk reads it, so the build
// skips it. Leadership lost mid-build drops the build with the rest
// (deactivate); the builder finds no build and waits for the next.
type lessor struct {
	clock   clock.Clock
	tick    time.Duration
	propose func(context.Context, []fsm.Command) []proposalResult
	read    func(func(*fsm.State)) // runs a function with the replicated state read-locked (a build's chunks)
	log     *slog.Logger
	duties  chan struct{} // a slot: one batch of Expire/GrantNext in flight at a time
	wake    chan struct{} // a slot: a takeover build for the builder to run

	epoch time.Time // the clock's reading when the lessor was made: instant 0

	mu       sync.Mutex
	active   bool                    // guarded by mu
	leases   map[fsm.LeaseID]tracked // guarded by mu
	expiry   deadlineHeap            // guarded by mu; one entry per tracked lease that is not pending
	delays   map[delayKey]time.Time  // guarded by mu; a delayed grant → when to GrantNext
	lastTick time.Time               // guarded by mu
	build    *takeover               // guarded by mu; nil unless a takeover's deadlines are being built
}

// tracked is a lease this leader keeps a deadline for. It holds no
// pointer (nor does heapEntry), so the garbage collector does not scan the
// lease table and heap, a million entries each with a million leases.
type tracked struct {
	deadline instant
	renewals uint64
	// pending: renewed while the takeover build had not reached it, so
	// deadline is only its renewal's; it has no heap entry until the
	// build folds in what earlier leaders promised.
	pending bool
}

// instant is a point in time on the lessor's clock: the time since its
// epoch. Unlike a time.Time (whose location is a pointer) it is a plain
// number, 8 bytes instead of 24.
type instant time.Duration

// instant returns t as an instant on the lessor's clock.
func (ls *lessor) instant(t time.Time) instant { return instant(t.Sub(ls.epoch)) }

// time returns the time of instant i.
func (ls *lessor) time(i instant) time.Time { return ls.epoch.Add(time.Duration(i)) }

// takeover is a new leader's deadline build in progress: the leases live
// at takeover that it has not reached yet, and the two clocks it computes
// their deadlines from, both read at takeover.
type takeover struct {
	ids     []fsm.LeaseID // ids[next:] are still to build
	next    int
	now     time.Time     // this leader's clock at takeover
	logical time.Duration // the state's logical clock at takeover
	began   time.Time     // when the build began (for its log line)
}

// buildChunk is how many leases a build reads per hold of the replica's
// read lock: about a millisecond's work, so the apply path (which waits
// for the lock) is never held up for long.
const buildChunk = 1024

// takeoverSlack bounds how much logged tick time may predate a renewal: a
// tick's elapsed covers the span since the previous tick's proposal, and the
// ticks just after a renewal can reach back before it by at most two ticks'
// capped elapsed (ticks are proposed one at a time).
func (ls *lessor) takeoverSlack() time.Duration { return 2 * ls.maxTickElapsed() }

// maxTickElapsed caps one Tick's elapsed: a leader that stalls (paused,
// starved) logs less time than passed, never more, so leases only get longer.
func (ls *lessor) maxTickElapsed() time.Duration { return 2 * ls.tick }

// newLessor returns an inactive lessor. read runs a function with the
// replicated state read-locked; only the builder (started by run) calls it.
func newLessor(c clock.Clock, tick time.Duration, propose func(context.Context, []fsm.Command) []proposalResult,
	read func(func(*fsm.State)), log *slog.Logger) *lessor {
	return &lessor{clock: c, tick: tick, propose: propose, read: read, log: log,
		duties: make(chan struct{}, 1), wake: make(chan struct{}, 1), epoch: c.Now(),
		leases: map[fsm.LeaseID]tracked{}, delays: map[delayKey]time.Time{}}
}

// activate starts the leader duties from state s: it lists the live
// leases for the builder and returns, so this leader serves at once (see
// Lazy takeover, on lessor). The lock-delays in force (few: one per lock
// whose holder expired) are scheduled here. The caller holds the
// replica's read lock, so no command applies meanwhile.
func (ls *lessor) activate(s *fsm.State) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	now := ls.clock.Now()
	n := s.NumLeases()
	// The lease table and heap grow in the builder's chunks, not here: a
	// million entries' worth of allocation would cost this leader's first
	// grant a garbage collection's work.
	ls.leases, ls.expiry, ls.delays = map[fsm.LeaseID]tracked{}, nil, map[delayKey]time.Time{}
	ls.build = nil
	if n > 0 {
		ls.build = &takeover{ids: s.LeaseIDs(make([]fsm.LeaseID, 0, n)), now: now, logical: s.Clock(), began: now}
	}
	logical := s.Clock()
	slack := ls.takeoverSlack()
	s.DelayedGrants(func(name string, token uint64, lockDelay, delayFrom time.Duration) { // a semaphore may have several permits in lock-delay
		passed := max(0, logical-delayFrom-slack)
		ls.delays[delayKey{name, token}] = now.Add(max(0, lockDelay-passed))
	})
	ls.lastTick = now
	ls.active = true
	ls.log.Info("leader duties started", "leases", n, "delayed_locks", len(ls.delays))
	if ls.build != nil {
		select {
		case ls.wake <- struct{}{}:
		default: // the builder is already told
		}
	}
}

// buildSome builds the deadlines of up to n more leases of the takeover
// build and reports whether any are left. The caller holds the replica's
// read lock and passes its state, so the chunk sees the state and the
// lessor's events in step (the apply path holds the replica's write lock
// while it applies an entry and passes its events to applied).
func (ls *lessor) buildSome(s *fsm.State, n int) (more bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	b := ls.build
	if b == nil {
		return false
	}
	end := min(b.next+n, len(b.ids))
	slack := ls.takeoverSlack()
	for _, id := range b.ids[b.next:end] {
		ttl, renewedAt, renewals, ok := s.LeaseTime(id)
		if !ok {
			continue // ended since the takeover: its LeaseEnded dropped any tracking
		}
		passed := max(0, b.logical-renewedAt-slack)
		d := ls.instant(b.now.Add(max(0, ttl-passed)))
		switch t, ok := ls.leases[id]; {
		case !ok:
			ls.trackLocked(id, d, renewals)
		case t.pending: // renewed before the build got here: keep the later promise
			t.deadline, t.pending = max(t.deadline, d), false
			ls.leases[id] = t
			ls.expiry.push(heapEntry{at: t.deadline, id: id})
		default:
			t.deadline = max(t.deadline, d)
			ls.leases[id] = t
		}
	}
	b.next = end
	if end < len(b.ids) {
		return true
	}
	ls.build = nil
	ls.log.Info("lease deadlines built", "leases", len(b.ids), "took", ls.clock.Now().Sub(b.began))
	return false
}

// builds runs each takeover build to its end, a chunk per hold of the
// replica's read lock, until ctx ends.
func (ls *lessor) builds(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ls.wake:
		}
		for more := true; more && ctx.Err() == nil; {
			ls.read(func(s *fsm.State) { more = ls.buildSome(s, buildChunk) })
			runtime.Gosched() // let the apply path take the write lock between chunks
		}
	}
}

// building reports whether a takeover build is in progress.
func (ls *lessor) building() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.build != nil
}

// deactivate stops the leader duties (leadership lost or shutting down),
// and with them any takeover build.
func (ls *lessor) deactivate() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.active {
		ls.log.Info("leader duties stopped")
	}
	ls.active = false
	ls.build = nil
	ls.leases, ls.expiry, ls.delays = map[fsm.LeaseID]tracked{}, nil, map[delayKey]time.Time{}
}

// isActive reports whether this node is leading with a complete state.
func (ls *lessor) isActive() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.active
}

// deadline returns a lease's deadline, if this node tracks it. While a
// takeover build runs, a lease it has not reached is not tracked, or
// tracked with its last renewal's deadline only (the build can only make
// it later).
func (ls *lessor) deadline(id fsm.LeaseID) (time.Time, bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	t, ok := ls.leases[id]
	if !ok {
		return time.Time{}, false
	}
	return ls.time(t.deadline), true
}

// delayEnd returns when this leader will propose GrantNext for the lock
// called name, in lock-delay after the grant with token, if it tracks that
// delay (a delay of another grant, or none, is not reported).
func (ls *lessor) delayEnd(name string, token uint64) (time.Time, bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	at, ok := ls.delays[delayKey{name, token}]
	return at, ok
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
		d := ls.instant(now.Add(e.TTL))
		switch t, ok := ls.leases[e.Lease]; {
		case ok:
			t.deadline, t.renewals = max(t.deadline, d), e.Renewals
			ls.leases[e.Lease] = t
		case e.Kind == fsm.LeaseRenewed && ls.build != nil:
			// Live at takeover, not reached by the build: what an earlier
			// leader promised is not known yet, so no heap entry until the
			// build folds it in (buildSome).
			ls.leases[e.Lease] = tracked{deadline: d, renewals: e.Renewals, pending: true}
		default:
			ls.trackLocked(e.Lease, d, e.Renewals)
		}
	case fsm.LeaseEnded:
		delete(ls.leases, e.Lease) // its heap entry is dropped when popped
	case fsm.DelayStarted:
		ls.delays[delayKey{e.Name, e.Token}] = now.Add(e.Delay)
	}
}

func (ls *lessor) trackLocked(id fsm.LeaseID, deadline instant, renewals uint64) {
	ls.leases[id] = tracked{deadline: deadline, renewals: renewals}
	ls.expiry.push(heapEntry{at: deadline, id: id})
}

// run performs the duties every tick, and runs the takeover builds, until
// ctx ends.
func (ls *lessor) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { ls.builds(ctx) })
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
	if len(ls.leases) > 0 || len(ls.delays) > 0 || ls.build != nil {
		elapsed := min(now.Sub(ls.lastTick), ls.maxTickElapsed())
		if elapsed > 0 {
			tick = &fsm.Command{Kind: fsm.KindTick, Elapsed: elapsed}
		}
	}
	ls.lastTick = now
	if !withDuties {
		return tick, nil
	}
	at := ls.instant(now)
	for len(ls.expiry) > 0 && ls.expiry[0].at <= at {
		e := heap.Pop(&ls.expiry).(heapEntry)
		t, ok := ls.leases[e.id]
		switch {
		case !ok: // ended
		case t.deadline > at: // renewed since it was pushed
			ls.expiry.push(heapEntry{at: t.deadline, id: e.id})
		default:
			cmds = append(cmds, fsm.Command{Kind: fsm.KindExpire, Lease: e.id, Renewals: t.renewals})
			// Look again next tick: gone if the expire committed, renewed, or retried.
			ls.expiry.push(heapEntry{at: at + instant(ls.tick), id: e.id})
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(ls.delays), compareDelayKeys) {
		if at := ls.delays[k]; !at.After(now) {
			delete(ls.delays, k)
			cmds = append(cmds, fsm.Command{Kind: fsm.KindGrantNext, Name: k.name, Token: k.token})
		}
	}
	return tick, cmds
}

func (ls *lessor) retryDelay(name string, token uint64) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.active {
		if _, ok := ls.delays[delayKey{name, token}]; !ok {
			ls.delays[delayKey{name, token}] = ls.clock.Now()
		}
	}
}

// delayKey names a grant in lock-delay: its lock, and the token of the
// grant whose expiry began it (GrantNext carries it, so a late one cannot
// end a later delay, and each permit of a semaphore has its own).
type delayKey struct {
	name  string
	token uint64
}

func compareDelayKeys(a, b delayKey) int {
	if c := strings.Compare(a.name, b.name); c != 0 {
		return c
	}
	return cmp.Compare(a.token, b.token)
}

type heapEntry struct {
	at instant
	id fsm.LeaseID
}

// deadlineHeap is a min-heap of lease deadlines; equal deadlines come out
// in any order (cmp.Less: the heap's order, not a test of it).
type deadlineHeap []heapEntry

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return cmp.Less(h[i].at, h[j].at) }
func (h deadlineHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *deadlineHeap) Push(x any)        { *h = append(*h, x.(heapEntry)) }

// push is heap.Push without boxing the entry in an interface (an
// allocation per lease, a million of them on a takeover).
func (h *deadlineHeap) push(e heapEntry) {
	*h = append(*h, e)
	heap.Fix(h, len(*h)-1)
}
func (h *deadlineHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

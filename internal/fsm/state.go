package fsm

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/fencehq/fence/internal/planted"
)

// State is the whole replicated state. It is not safe for concurrent use;
// the server serialises Apply and reads with its own lock.
type State struct {
	token    uint64        // last token granted; +1 per grant, never reused
	clock    time.Duration // logical time: the sum of committed Tick.Elapsed
	leaseSeq uint64        // last lease number handed out
	leases   map[LeaseID]*lease
	locks    map[string]*lock
	kv       map[string]*entry
	created  map[RequestID]*lease // CreateLease request → lease, while the lease lives (a pointer: 8 bytes a lease less than its id)
	nodes    map[string]string    // node id → client (gRPC) address
	runs     map[string]*run      // lock name → its last recorded run, inside that run's window
	runOrder []*run               // the records of runs, by compareRuns (derived from runs)
}

type lease struct {
	id        LeaseID
	number    uint64
	ttl       time.Duration
	owner     string
	identity  string // who created it under the server's policy ("" without one)
	createReq RequestID
	renewals  uint64        // renewals committed so far
	renewedAt time.Duration // logical clock at creation or last renewal
	holds     []string      // lock names held, sorted (derived from locks)
	waits     []string      // lock names waited for, sorted (derived from locks)
	calls     calls         // the memory of its clients' calls
}

// lock is a mutex, a semaphore of permits slots, or a read-write lock (a
// lock of one permit whose grants may be shared). permits is fixed while
// the lock exists; the lock is forgotten when idle (no grant held or
// delayed, nobody waiting), and the next Acquire of its name sets it anew.
type lock struct {
	name    string
	permits uint32  // 1: a mutex or a read-write lock; N ≥ 2: a semaphore
	grants  []grant // held or in lock-delay, by slot then token
	waiters []waiter
}

// grant is one permit of a lock: held by a lease, or, after its holder's
// lease expired with a lock-delay, delayed (zero holder) until GrantNext
// names its token.
type grant struct {
	holder    LeaseID       // zero: delayed
	token     uint64        // never reused: every grant has its own
	slot      uint32        // 0…permits−1, the lowest free when granted; 0 for a shared grant
	shared    bool          // a reader's grant of a read-write lock
	lockDelay time.Duration // applies if the holder's lease expires
	oncePer   time.Duration // a release with Ran records a run kept this long (held grants only)
	delayFrom time.Duration // logical clock when the lock-delay began
}

func (g *grant) delayed() bool { return g.holder.IsZero() }

type waiter struct {
	lease     LeaseID
	seq       uint64 // of the Acquire that waits
	lockDelay time.Duration
	oncePer   time.Duration // of the Acquire: refused at its turn if a run is recorded inside it
	shared    bool          // a reader of a read-write lock
}

// heldBy returns the index of the grant lease id holds, or -1.
func (k *lock) heldBy(id LeaseID) int {
	if id.IsZero() {
		return -1
	}
	return slices.IndexFunc(k.grants, func(g grant) bool { return g.holder == id })
}

// grantWith returns the index of the grant with token (held or delayed), or -1.
func (k *lock) grantWith(token uint64) int {
	return slices.IndexFunc(k.grants, func(g grant) bool { return g.token == token })
}

// admits reports whether a grant of the given mode fits beside k's grants
// (held or delayed): an exclusive one needs a free slot; a shared one needs
// a lock of one permit with no exclusive grant.
func (k *lock) admits(shared bool) bool {
	if !shared {
		return len(k.grants) < int(k.permits)
	}
	return k.permits == 1 && !slices.ContainsFunc(k.grants, func(g grant) bool { return !g.shared })
}

// freeSlot returns the lowest slot no grant of k takes (0 for a shared grant).
func (k *lock) freeSlot(shared bool) uint32 {
	if shared {
		return 0
	}
	var slot uint32
	for _, g := range k.grants { // sorted by slot
		if g.slot != slot {
			break
		}
		slot++
	}
	return slot
}

// compareGrants orders grants by slot, then token.
func compareGrants(a, b grant) int {
	if c := cmp.Compare(a.slot, b.slot); c != 0 {
		return c
	}
	return cmp.Compare(a.token, b.token)
}

// permitsOf is the permit count an Acquire asks for (0 in a command: 1).
func permitsOf(c *Command) uint32 { return max(c.Permits, 1) }

type entry struct {
	value []byte
	token uint64
}

// New returns an empty state.
func New() *State {
	return &State{
		leases:  map[LeaseID]*lease{},
		locks:   map[string]*lock{},
		kv:      map[string]*entry{},
		created: map[RequestID]*lease{},
		nodes:   map[string]string{},
		runs:    map[string]*run{},
	}
}

// Apply applies one command and returns its result. It is deterministic: the
// same commands in the same order give the same state and results on every
// replica. A command that breaks a rule changes nothing.
func (s *State) Apply(c *Command) Result {
	if err := c.Validate(); err != nil {
		return Result{Code: Invalid, Reason: err.Error()}
	}
	switch c.Kind {
	case KindCreateLease:
		return s.createLease(c)
	case KindRenew:
		return s.renew(c)
	case KindRevoke:
		return s.endLease(c.Lease, false)
	case KindExpire:
		l := s.leases[c.Lease]
		if l == nil {
			return Result{Code: LeaseNotFound}
		}
		if l.renewals != c.Renewals {
			return Result{Code: Renewed}
		}
		return s.endLease(c.Lease, true)
	case KindAcquire, KindRelease:
		return s.leaseCall(c)
	case KindCancelWait:
		return s.cancelWait(c)
	case KindGrantNext:
		k := s.locks[c.Name]
		i := -1
		if k != nil {
			i = k.grantWith(c.Token)
		}
		if i < 0 || !k.grants[i].delayed() {
			return Result{Code: NotWaiting}
		}
		k.grants = slices.Delete(k.grants, i, i+1)
		r := Result{Events: []Event{{Kind: DelayEnded, Name: k.name, Token: c.Token}}}
		s.handOff(k, &r)
		return r
	case KindForceRelease:
		return s.forceRelease(c)
	case KindPut:
		return s.put(c)
	case KindTick:
		s.clock += c.Elapsed
		s.pruneRuns()
		return Result{Code: OK}
	case KindSetNode:
		s.nodes[c.Name] = c.Addr
		return Result{Code: OK}
	}
	panic("unreachable: Validate accepted kind " + c.Kind.String())
}

func (s *State) createLease(c *Command) Result {
	if l, ok := s.created[c.RequestID]; ok {
		if l.identity != c.Identity {
			// A retry answers only its own creator: another identity that
			// learnt the request id gets nothing of the lease.
			return Result{Code: Invalid, Reason: "the request id created another identity's lease"}
		}
		return Result{Code: OK, Lease: l.id, LeaseNumber: l.number, TTL: l.ttl}
	}
	if _, ok := s.leases[c.Lease]; ok {
		// A second lease with the same 128-bit random id: the server's
		// random source is broken. Refuse rather than merge two holders.
		return Result{Code: Invalid, Reason: "lease id already in use"}
	}
	s.leaseSeq++
	l := &lease{id: c.Lease, number: s.leaseSeq, ttl: c.TTL, owner: c.Owner, identity: c.Identity,
		createReq: c.RequestID, renewedAt: s.clock}
	s.leases[l.id] = l
	s.created[c.RequestID] = l
	return Result{Code: OK, Lease: l.id, LeaseNumber: l.number, TTL: l.ttl,
		Events: []Event{{Kind: LeaseStarted, Lease: l.id, Number: l.number, TTL: l.ttl}}}
}

func (s *State) renew(c *Command) Result {
	l := s.leases[c.Lease]
	if l == nil {
		return Result{Code: LeaseNotFound}
	}
	slack := l.renewedAt + l.ttl - s.clock
	l.renewals++
	l.renewedAt = s.clock
	held := make([]uint64, len(l.holds))
	for i, name := range l.holds {
		k := s.locks[name]
		held[i] = k.grants[k.heldBy(l.id)].token
	}
	return Result{Code: OK, LeaseNumber: l.number, TTL: l.ttl, Held: held,
		Events: []Event{{Kind: LeaseRenewed, Lease: l.id, Number: l.number, TTL: l.ttl, Renewals: l.renewals, Slack: slack}}}
}

// endLease removes a lease, leaves its queues and releases its locks: at once
// to the next waiter on revoke, after the lock-delay on expiry.
func (s *State) endLease(id LeaseID, expired bool) Result {
	l := s.leases[id]
	if l == nil {
		return Result{Code: LeaseNotFound}
	}
	r := Result{Code: OK, LeaseNumber: l.number}
	cause := CauseRevoked
	if expired {
		cause = CauseExpired
	}
	for _, name := range l.waits {
		if planted.Regrant {
			break // planted bug: the ended lease stays queued
		}
		k := s.locks[name]
		i := slices.IndexFunc(k.waiters, func(w waiter) bool { return w.lease == id })
		r.Events = append(r.Events, Event{Kind: WaitEnded, Name: name, Lease: id, Number: l.number, Owner: l.owner,
			Seq: k.waiters[i].seq, Cause: cause})
		k.waiters = slices.Delete(k.waiters, i, i+1)
		s.handOff(k, &r) // readers behind a writer who left may go in now
	}
	for _, name := range l.holds {
		k := s.locks[name]
		i := k.heldBy(id)
		g := &k.grants[i]
		r.Released = append(r.Released, name)
		r.Events = append(r.Events, Event{Kind: Released, Name: name, Lease: id, Number: l.number, Owner: l.owner,
			Token: g.token, Slot: g.slot, Shared: g.shared, Cause: cause})
		if expired && g.lockDelay > 0 {
			// The permit stays taken for its lock-delay: the next grant
			// of it cannot overlap a paused holder's late work so soon.
			g.holder, g.oncePer, g.delayFrom = LeaseID{}, 0, s.clock
			r.Events = append(r.Events, Event{Kind: DelayStarted, Name: name, Delay: g.lockDelay, Token: g.token, Slot: g.slot, Shared: g.shared})
			continue
		}
		k.grants = slices.Delete(k.grants, i, i+1)
		s.handOff(k, &r)
	}
	delete(s.leases, id)
	delete(s.created, l.createReq)
	r.Events = append(r.Events, Event{Kind: LeaseEnded, Lease: id, Number: l.number})
	return r
}

// leaseCall runs an Acquire or Release of a lease exactly once: it consults
// the lease's memory of answers first, so a retry or a late duplicate gets
// the first answer (or, for a call already acknowledged, a refusal) and is
// never executed again; a new call is executed and its answer remembered.
func (s *State) leaseCall(c *Command) Result {
	l := s.leases[c.Lease]
	if l == nil {
		return Result{Code: LeaseNotFound}
	}
	m := &l.calls
	if m.acknowledged(c.Seq) {
		return Result{Code: Answered, LeaseNumber: l.number}
	}
	if k, found := m.outcome(c.Seq); found {
		if k.req != c.RequestID || k.kind != c.Kind {
			return Result{Code: Invalid, Reason: fmt.Sprintf("call number %d of this lease was used by another request", c.Seq)}
		}
		m.acknowledge(c.Ack, c.Open, c.Seq)
		return s.recall(l, k, c)
	}
	m.acknowledge(c.Ack, c.Open, c.Seq) // covers c.Seq: refused below, it is acknowledged for good
	if len(m.answers) >= MaxCallsInFlight {
		return Result{Code: TooManyCalls, LeaseNumber: l.number}
	}
	var r Result
	switch {
	case c.ReleaseToken != 0:
		r = s.relock(l, c)
	case c.Kind == KindAcquire:
		r = s.acquire(l, c)
	default:
		r = s.release(l, c)
	}
	m.remember(call{seq: c.Seq, req: c.RequestID, kind: c.Kind, code: r.Code, token: rememberedToken(r)})
	return r
}

// rememberedToken is the token a call's memory keeps: the grant's (OK),
// the held lock's (AlreadyHeld) or the recorded run's (RanRecently); for
// PermitsMismatch, the lock's permit count; zero otherwise.
func rememberedToken(r Result) uint64 {
	switch r.Code {
	case OK, AlreadyHeld, RanRecently:
		return r.Token
	case PermitsMismatch:
		return uint64(r.Permits)
	}
	return 0
}

// recall answers a retried call from its remembered answer, as things stand
// now: a grant that has ended since answers Ended, never OK.
func (s *State) recall(l *lease, k call, c *Command) Result {
	r := Result{Code: k.code, LeaseNumber: l.number, Token: k.token}
	if k.kind != KindAcquire || k.code != OK {
		switch k.code {
		case LockHeld: // who holds it now, as the first answer said who held it then
			r.LeaseNumber = 0
			s.describeHolder(s.locks[c.Name], &r)
		case RanRecently: // the run, while it is recorded (it may be a later one now)
			r.LeaseNumber = 0
			if run := s.runs[c.Name]; run != nil {
				r.Token, r.Run = run.token, run.view(s.clock)
			}
		case PermitsMismatch: // the count the lock had then
			r.Token, r.Permits = 0, uint32(k.token)
		}
		return r
	}
	h := s.locks[c.Name]
	i := -1
	if h != nil {
		i = h.grantWith(k.token)
	}
	if i < 0 || h.grants[i].holder != l.id {
		r.Code = Ended
		return r
	}
	r.Slot, r.Shared = h.grants[i].slot, h.grants[i].shared
	return r
}

func (s *State) acquire(l *lease, c *Command) Result {
	k := s.locks[c.Name]
	if k != nil && k.permits != permitsOf(c) {
		return Result{Code: PermitsMismatch, Permits: k.permits, LeaseNumber: l.number}
	}
	if i := k.heldByOrNone(l.id); i >= 0 {
		return Result{Code: AlreadyHeld, Token: k.grants[i].token, LeaseNumber: l.number}
	}
	if k != nil && slices.ContainsFunc(k.waiters, func(w waiter) bool { return w.lease == l.id }) {
		return Result{Code: AlreadyHeld, LeaseNumber: l.number}
	}
	if run := s.ranWithin(c.Name, c.OncePer); run != nil {
		return s.ranRecently(run)
	}
	if k == nil {
		k = &lock{name: c.Name, permits: permitsOf(c)}
		s.locks[c.Name] = k
	}
	w := waiter{lease: l.id, seq: c.Seq, lockDelay: c.LockDelay, oncePer: c.OncePer, shared: c.Shared}
	if len(k.waiters) == 0 && k.admits(c.Shared) { // FIFO: nobody waiting ahead
		var r Result
		g := s.grant(k, l, w, &r)
		r.Code, r.Token, r.Slot, r.Shared, r.LeaseNumber = OK, g.token, g.slot, g.shared, l.number
		return r
	}
	if !c.Wait {
		r := Result{Code: LockHeld}
		s.describeHolder(k, &r)
		return r
	}
	k.waiters = append(k.waiters, w)
	l.waits = insertSorted(l.waits, k.name)
	return Result{Code: Queued, LeaseNumber: l.number,
		Events: []Event{{Kind: WaitStarted, Name: k.name, Lease: l.id, Number: l.number, Owner: l.owner, Seq: c.Seq}}}
}

// describeHolder fills a LockHeld result with who holds k (nothing if k is free).
func (s *State) describeHolder(k *lock, r *Result) {
	if k == nil {
		return
	}
	g, ok := k.first()
	if !ok {
		return
	}
	r.Token, r.Delayed = g.token, g.delayed()
	if h := s.leases[g.holder]; h != nil {
		r.LeaseNumber, r.Owner = h.number, h.owner
	}
}

// first returns the grant a refusal describes: the first held (by slot),
// else the first delayed.
func (k *lock) first() (grant, bool) {
	if i := slices.IndexFunc(k.grants, func(g grant) bool { return !g.delayed() }); i >= 0 {
		return k.grants[i], true
	}
	if len(k.grants) > 0 {
		return k.grants[0], true
	}
	return grant{}, false
}

// heldByOrNone is heldBy on a lock that may not exist.
func (k *lock) heldByOrNone(id LeaseID) int {
	if k == nil {
		return -1
	}
	return k.heldBy(id)
}

func (s *State) release(l *lease, c *Command) Result {
	k := s.locks[c.Name]
	i := k.heldByOrNone(l.id)
	if i < 0 {
		return Result{Code: NotHolder, LeaseNumber: l.number}
	}
	r := Result{Code: OK, LeaseNumber: l.number}
	if c.Ran {
		s.recordRun(k.name, &k.grants[i], l, c.Wall) // before the hand-off: the next waiter's window sees it
	}
	s.unhold(k, i, l, CauseReleased, &r)
	return r
}

// relock releases l's grant of c.Name with token c.ReleaseToken and
// acquires the name again, in one command: exactly a Release followed by
// an Acquire (the waiters already queued are granted first, then the
// caller is granted with a new token if its grant fits and nobody waits
// ahead, or joins the back of the queue). Everything that would refuse the
// Acquire is checked before anything changes, so the command is atomic: a
// grant the lease does not hold (ended, delayed, another token: NotHolder)
// or another permit count (PermitsMismatch) leaves the state as it was.
// Validate guarantees Wait and no once-per window, so after the release
// the Acquire can only grant or queue.
func (s *State) relock(l *lease, c *Command) Result {
	k := s.locks[c.Name]
	i := -1
	if k != nil {
		i = k.grantWith(c.ReleaseToken)
	}
	if i < 0 || k.grants[i].holder != l.id {
		return Result{Code: NotHolder, LeaseNumber: l.number}
	}
	if k.permits != permitsOf(c) {
		return Result{Code: PermitsMismatch, Permits: k.permits, LeaseNumber: l.number}
	}
	var released Result
	s.unhold(k, i, l, CauseReleased, &released)
	r := s.acquire(l, c)
	r.Events = append(released.Events, r.Events...)
	return r
}

// unhold ends grant i of k, held by l, and hands k on at once.
func (s *State) unhold(k *lock, i int, l *lease, cause Cause, r *Result) {
	g := k.grants[i]
	r.Events = append(r.Events, Event{Kind: Released, Name: k.name, Lease: l.id, Number: l.number, Owner: l.owner,
		Token: g.token, Slot: g.slot, Shared: g.shared, Cause: cause})
	l.holds = removeSorted(l.holds, k.name)
	k.grants = slices.Delete(k.grants, i, i+1)
	s.handOff(k, r)
}

// forceRelease ends the grant of c.Name with token c.Token, if it is still
// held: an admin's call, conditional on the token so a retry or a late
// duplicate cannot end the next holder's grant.
func (s *State) forceRelease(c *Command) Result {
	k := s.locks[c.Name]
	i := -1
	if k != nil {
		i = k.grantWith(c.Token)
	}
	if i < 0 || k.grants[i].delayed() {
		return Result{Code: Ended}
	}
	l := s.leases[k.grants[i].holder]
	r := Result{Code: OK, LeaseNumber: l.number, Owner: l.owner, Token: c.Token, Slot: k.grants[i].slot,
		Released: []string{k.name}}
	s.unhold(k, i, l, CauseForced, &r)
	return r
}

func (s *State) cancelWait(c *Command) Result {
	k := s.locks[c.Name]
	if k == nil {
		return Result{Code: NotWaiting}
	}
	i := slices.IndexFunc(k.waiters, func(w waiter) bool { return w.lease == c.Lease && w.seq == c.Seq })
	if i < 0 {
		return Result{Code: NotWaiting}
	}
	k.waiters = slices.Delete(k.waiters, i, i+1)
	l := s.leases[c.Lease]
	l.waits = removeSorted(l.waits, k.name)
	l.calls.settle(c.Seq, Cancelled, 0)
	r := Result{Code: OK, LeaseNumber: l.number,
		Events: []Event{{Kind: WaitCancelled, Lease: l.id, Number: l.number, Owner: l.owner, Name: c.Name, Seq: c.Seq}}}
	s.handOff(k, &r) // readers behind a writer who left may go in now
	return r
}

func (s *State) put(c *Command) Result {
	if c.Token > s.token {
		return Result{Code: Invalid, Reason: "token was never issued"}
	}
	e := s.kv[c.Name]
	if e != nil && c.Token < e.token {
		return Result{Code: Stale, Token: e.token}
	}
	if e == nil {
		e = &entry{}
		s.kv[c.Name] = e
	}
	e.value, e.token = slices.Clone(c.Value), c.Token
	return Result{Code: OK, Token: c.Token, Events: []Event{{Kind: Written, Name: c.Name, Token: c.Token, Value: e.value}}}
}

// handOff grants k to its waiters in FIFO order while the first one's
// grant fits (admits), or forgets the lock when it is idle: a semaphore
// fills its free slots; a read-write lock grants a writer alone, or the
// readers at the head of the queue together, up to the first writer. Every
// waiter's lease is alive: a lease leaves all queues in the same command
// that ends it. A waiter whose turn has come and whose once-per window
// holds a recorded run leaves the queue refused (RanRecently), and the next
// one is considered.
func (s *State) handOff(k *lock, r *Result) {
	for len(k.waiters) > 0 && k.admits(k.waiters[0].shared) {
		w := k.waiters[0]
		k.waiters = slices.Delete(k.waiters, 0, 1)
		l := s.leases[w.lease]
		if l == nil && planted.Regrant { // planted bug: granted without checking the waiter's lease
			s.token++
			k.grants = append(k.grants, grant{holder: w.lease, token: s.token, lockDelay: w.lockDelay})
			r.Events = append(r.Events, Event{Kind: Granted, Lease: w.lease, Name: k.name, Token: s.token})
			return
		}
		l.waits = removeSorted(l.waits, k.name)
		if run := s.ranWithin(k.name, w.oncePer); run != nil {
			l.calls.settle(w.seq, RanRecently, run.token)
			r.Events = append(r.Events, Event{Kind: WaitCancelled, Lease: l.id, Number: l.number, Owner: l.owner, Name: k.name, Seq: w.seq})
			continue
		}
		g := s.grant(k, l, w, r)
		l.calls.settle(w.seq, OK, g.token)
	}
	s.forgetIfIdle(k)
}

// grant gives l a new grant of k in w's mode, at the lowest free slot, with
// the next token.
func (s *State) grant(k *lock, l *lease, w waiter, r *Result) grant {
	s.token++
	g := grant{holder: l.id, token: s.token, slot: k.freeSlot(w.shared), shared: w.shared, lockDelay: w.lockDelay, oncePer: w.oncePer}
	i, _ := slices.BinarySearchFunc(k.grants, g, compareGrants)
	k.grants = slices.Insert(k.grants, i, g)
	l.holds = insertSorted(l.holds, k.name)
	r.Events = append(r.Events, Event{Kind: Granted, Lease: l.id, Number: l.number, Owner: l.owner, Name: k.name, Token: g.token,
		Slot: g.slot, Shared: g.shared, TTL: l.ttl})
	return g
}

func (s *State) forgetIfIdle(k *lock) {
	if len(k.grants) == 0 && len(k.waiters) == 0 {
		delete(s.locks, k.name)
	}
}

func insertSorted(s []string, v string) []string {
	i, found := slices.BinarySearch(s, v)
	if found {
		return s
	}
	return slices.Insert(s, i, v)
}

func removeSorted(s []string, v string) []string {
	if i, found := slices.BinarySearch(s, v); found {
		return slices.Delete(s, i, i+1)
	}
	return s
}

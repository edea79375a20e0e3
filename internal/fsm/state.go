package fsm

import (
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
	created  map[RequestID]LeaseID // CreateLease request → lease, while the lease lives
	nodes    map[string]string     // node id → client (gRPC) address
}

type lease struct {
	id        LeaseID
	number    uint64
	ttl       time.Duration
	owner     string
	createReq RequestID
	renewals  uint64        // renewals committed so far
	renewedAt time.Duration // logical clock at creation or last renewal
	holds     []string      // lock names held, sorted (derived from locks)
	waits     []string      // lock names waited for, sorted (derived from locks)
	recent    []recent      // answers to retried Acquire/Release, oldest first
}

// recent remembers the answer to a state-changing request of a lease.
type recent struct {
	req   RequestID
	kind  Kind
	token uint64
}

type lock struct {
	name      string
	holder    LeaseID // zero: free (then delayed, or about to be deleted)
	holderReq RequestID
	token     uint64        // token of the current or last grant
	lockDelay time.Duration // of the current grant
	delayed   bool          // free, in lock-delay after an expiry
	delayFrom time.Duration // logical clock when the delay began
	waiters   []waiter      // FIFO
}

type waiter struct {
	lease     LeaseID
	req       RequestID
	lockDelay time.Duration
}

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
		created: map[RequestID]LeaseID{},
		nodes:   map[string]string{},
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
	case KindAcquire:
		return s.acquire(c)
	case KindRelease:
		return s.release(c)
	case KindCancelWait:
		return s.cancelWait(c)
	case KindGrantNext:
		k := s.locks[c.Name]
		if k == nil || !k.delayed {
			return Result{Code: NotWaiting}
		}
		k.delayed = false
		var r Result
		s.handOff(k, &r)
		return r
	case KindPut:
		return s.put(c)
	case KindTick:
		s.clock += c.Elapsed
		return Result{Code: OK}
	case KindSetNode:
		s.nodes[c.Name] = c.Addr
		return Result{Code: OK}
	}
	panic("unreachable: Validate accepted kind " + c.Kind.String())
}

func (s *State) createLease(c *Command) Result {
	if id, ok := s.created[c.RequestID]; ok {
		l := s.leases[id]
		return Result{Code: OK, Lease: l.id, LeaseNumber: l.number, TTL: l.ttl}
	}
	if _, ok := s.leases[c.Lease]; ok {
		// A second lease with the same 128-bit random id: the server's
		// random source is broken. Refuse rather than merge two holders.
		return Result{Code: Invalid, Reason: "lease id already in use"}
	}
	s.leaseSeq++
	l := &lease{id: c.Lease, number: s.leaseSeq, ttl: c.TTL, owner: c.Owner,
		createReq: c.RequestID, renewedAt: s.clock}
	s.leases[l.id] = l
	if !c.RequestID.IsZero() {
		s.created[c.RequestID] = l.id
	}
	return Result{Code: OK, Lease: l.id, LeaseNumber: l.number, TTL: l.ttl,
		Events: []Event{{Kind: LeaseStarted, Lease: l.id, Number: l.number, TTL: l.ttl}}}
}

func (s *State) renew(c *Command) Result {
	l := s.leases[c.Lease]
	if l == nil {
		return Result{Code: LeaseNotFound}
	}
	l.renewals++
	l.renewedAt = s.clock
	return Result{Code: OK, LeaseNumber: l.number, TTL: l.ttl,
		Events: []Event{{Kind: LeaseRenewed, Lease: l.id, Number: l.number, TTL: l.ttl, Renewals: l.renewals}}}
}

// endLease removes a lease, leaves its queues and releases its locks: at once
// to the next waiter on revoke, after the lock-delay on expiry.
func (s *State) endLease(id LeaseID, expired bool) Result {
	l := s.leases[id]
	if l == nil {
		return Result{Code: LeaseNotFound}
	}
	r := Result{Code: OK, LeaseNumber: l.number}
	for _, name := range l.waits {
		if planted.Regrant {
			break // planted bug: the ended lease stays queued
		}
		k := s.locks[name]
		k.waiters = slices.DeleteFunc(k.waiters, func(w waiter) bool { return w.lease == id })
		s.forgetIfIdle(k)
	}
	for _, name := range l.holds {
		k := s.locks[name]
		k.holder, k.holderReq = LeaseID{}, RequestID{}
		r.Released = append(r.Released, name)
		r.Events = append(r.Events, Event{Kind: Released, Name: name, Lease: id, Number: l.number, Token: k.token})
		if expired && k.lockDelay > 0 {
			k.delayed, k.delayFrom = true, s.clock
			r.Events = append(r.Events, Event{Kind: DelayStarted, Name: name, Delay: k.lockDelay})
			continue
		}
		s.handOff(k, &r)
	}
	delete(s.leases, id)
	delete(s.created, l.createReq)
	r.Events = append(r.Events, Event{Kind: LeaseEnded, Lease: id, Number: l.number})
	return r
}

func (s *State) acquire(c *Command) Result {
	l := s.leases[c.Lease]
	if l == nil {
		return Result{Code: LeaseNotFound}
	}
	k := s.locks[c.Name]
	if k != nil && k.holder == c.Lease {
		if k.holderReq == c.RequestID { // retry of the call that won it
			return Result{Code: OK, Token: k.token, LeaseNumber: l.number}
		}
		return Result{Code: AlreadyHeld, Token: k.token, LeaseNumber: l.number}
	}
	if k != nil {
		if i := slices.IndexFunc(k.waiters, func(w waiter) bool { return w.lease == c.Lease }); i >= 0 {
			if k.waiters[i].req == c.RequestID {
				return Result{Code: Queued, LeaseNumber: l.number}
			}
			return Result{Code: AlreadyHeld, LeaseNumber: l.number}
		}
	}
	if rec, ok := l.recall(c.RequestID, KindAcquire); ok { // granted once, since released
		return Result{Code: OK, Token: rec.token, LeaseNumber: l.number}
	}
	if k == nil {
		k = &lock{name: c.Name}
		s.locks[c.Name] = k
	}
	if k.holder.IsZero() && !k.delayed {
		var r Result
		s.grant(k, l, c.RequestID, c.LockDelay, &r)
		r.Code, r.Token, r.LeaseNumber = OK, k.token, l.number
		return r
	}
	if !c.Wait {
		r := Result{Code: LockHeld, Token: k.token, Delayed: k.delayed}
		if h := s.leases[k.holder]; h != nil {
			r.LeaseNumber, r.Owner = h.number, h.owner
		}
		return r
	}
	k.waiters = append(k.waiters, waiter{lease: l.id, req: c.RequestID, lockDelay: c.LockDelay})
	l.waits = insertSorted(l.waits, k.name)
	return Result{Code: Queued, LeaseNumber: l.number}
}

func (s *State) release(c *Command) Result {
	l := s.leases[c.Lease]
	if l == nil {
		return Result{Code: LeaseNotFound}
	}
	k := s.locks[c.Name]
	if k == nil || k.holder != c.Lease {
		if _, ok := l.recall(c.RequestID, KindRelease); ok {
			return Result{Code: OK, LeaseNumber: l.number}
		}
		return Result{Code: NotHolder, LeaseNumber: l.number}
	}
	r := Result{Code: OK, LeaseNumber: l.number,
		Events: []Event{{Kind: Released, Name: k.name, Lease: l.id, Number: l.number, Token: k.token}}}
	l.remember(recent{req: k.holderReq, kind: KindAcquire, token: k.token})
	l.remember(recent{req: c.RequestID, kind: KindRelease})
	l.holds = removeSorted(l.holds, k.name)
	k.holder, k.holderReq = LeaseID{}, RequestID{}
	s.handOff(k, &r)
	return r
}

func (s *State) cancelWait(c *Command) Result {
	k := s.locks[c.Name]
	if k == nil {
		return Result{Code: NotWaiting}
	}
	i := slices.IndexFunc(k.waiters, func(w waiter) bool { return w.lease == c.Lease })
	if i < 0 {
		return Result{Code: NotWaiting}
	}
	k.waiters = slices.Delete(k.waiters, i, i+1)
	l := s.leases[c.Lease]
	l.waits = removeSorted(l.waits, k.name)
	s.forgetIfIdle(k)
	return Result{Code: OK, LeaseNumber: l.number}
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
	return Result{Code: OK, Token: c.Token}
}

// handOff grants a free, undelayed lock to its first waiter, or forgets the
// lock when nobody waits. Every waiter's lease is alive: a lease leaves all
// queues in the same command that ends it.
func (s *State) handOff(k *lock, r *Result) {
	if len(k.waiters) == 0 {
		s.forgetIfIdle(k)
		return
	}
	w := k.waiters[0]
	k.waiters = slices.Delete(k.waiters, 0, 1)
	l := s.leases[w.lease]
	if l == nil && planted.Regrant { // planted bug: granted without checking the waiter's lease
		s.token++
		k.holder, k.holderReq, k.token, k.lockDelay = w.lease, w.req, s.token, w.lockDelay
		r.Events = append(r.Events, Event{Kind: Granted, Lease: w.lease, Name: k.name, Token: k.token})
		return
	}
	l.waits = removeSorted(l.waits, k.name)
	s.grant(k, l, w.req, w.lockDelay, r)
}

func (s *State) grant(k *lock, l *lease, req RequestID, delay time.Duration, r *Result) {
	s.token++
	k.holder, k.holderReq, k.token, k.lockDelay = l.id, req, s.token, delay
	l.holds = insertSorted(l.holds, k.name)
	r.Events = append(r.Events, Event{Kind: Granted, Lease: l.id, Number: l.number, Name: k.name, Token: k.token})
}

func (s *State) forgetIfIdle(k *lock) {
	if k.holder.IsZero() && !k.delayed && len(k.waiters) == 0 {
		delete(s.locks, k.name)
	}
}

func (l *lease) remember(r recent) {
	if r.req.IsZero() {
		return
	}
	if len(l.recent) == recentCap {
		l.recent = slices.Delete(l.recent, 0, 1)
	}
	l.recent = append(l.recent, r)
}

func (l *lease) recall(req RequestID, kind Kind) (recent, bool) {
	if req.IsZero() {
		return recent{}, false
	}
	for i := len(l.recent) - 1; i >= 0; i-- {
		if r := l.recent[i]; r.req == req && r.kind == kind {
			return r, true
		}
	}
	return recent{}, false
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

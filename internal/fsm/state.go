package fsm

import (
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
	created  map[RequestID]LeaseID // CreateLease request → lease, while the lease lives
	nodes    map[string]string     // node id → client (gRPC) address
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

type lock struct {
	name      string
	holder    LeaseID       // zero: free (then delayed, or about to be deleted)
	token     uint64        // token of the current or last grant
	lockDelay time.Duration // of the current grant
	delayed   bool          // free, in lock-delay after an expiry
	delayFrom time.Duration // logical clock when the delay began
	waiters   []waiter      // FIFO
}

type waiter struct {
	lease     LeaseID
	seq       uint64 // of the Acquire that waits
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
	case KindAcquire, KindRelease:
		return s.leaseCall(c)
	case KindCancelWait:
		return s.cancelWait(c)
	case KindGrantNext:
		k := s.locks[c.Name]
		if k == nil || !k.delayed || k.token != c.Token {
			return Result{Code: NotWaiting}
		}
		k.delayed = false
		r := Result{Events: []Event{{Kind: DelayEnded, Name: k.name, Token: k.token}}}
		s.handOff(k, &r)
		return r
	case KindForceRelease:
		return s.forceRelease(c)
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
	s.created[c.RequestID] = l.id
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
	held := make([]uint64, len(l.holds))
	for i, name := range l.holds {
		held[i] = s.locks[name].token
	}
	return Result{Code: OK, LeaseNumber: l.number, TTL: l.ttl, Held: held,
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
		s.forgetIfIdle(k)
	}
	for _, name := range l.holds {
		k := s.locks[name]
		k.holder = LeaseID{}
		r.Released = append(r.Released, name)
		r.Events = append(r.Events, Event{Kind: Released, Name: name, Lease: id, Number: l.number, Owner: l.owner,
			Token: k.token, Cause: cause})
		if expired && k.lockDelay > 0 {
			k.delayed, k.delayFrom = true, s.clock
			r.Events = append(r.Events, Event{Kind: DelayStarted, Name: name, Delay: k.lockDelay, Token: k.token})
			continue
		}
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
	if c.Kind == KindAcquire {
		r = s.acquire(l, c)
	} else {
		r = s.release(l, c)
	}
	m.remember(call{seq: c.Seq, req: c.RequestID, kind: c.Kind, code: r.Code, token: rememberedToken(r)})
	return r
}

// rememberedToken is the token a call's memory keeps: the grant's (OK) or
// the held lock's (AlreadyHeld); zero otherwise.
func rememberedToken(r Result) uint64 {
	if r.Code == OK || r.Code == AlreadyHeld {
		return r.Token
	}
	return 0
}

// recall answers a retried call from its remembered answer, as things stand
// now: a grant that has ended since answers Ended, never OK.
func (s *State) recall(l *lease, k call, c *Command) Result {
	r := Result{Code: k.code, LeaseNumber: l.number, Token: k.token}
	if k.kind != KindAcquire || k.code != OK {
		if k.code == LockHeld { // who holds it now, as the first answer said who held it then
			r.LeaseNumber = 0
			s.describeHolder(s.locks[c.Name], &r)
		}
		return r
	}
	if h := s.locks[c.Name]; h == nil || h.holder != l.id || h.token != k.token {
		r.Code = Ended
	}
	return r
}

func (s *State) acquire(l *lease, c *Command) Result {
	k := s.locks[c.Name]
	if k != nil && k.holder == l.id {
		return Result{Code: AlreadyHeld, Token: k.token, LeaseNumber: l.number}
	}
	if k != nil && slices.ContainsFunc(k.waiters, func(w waiter) bool { return w.lease == l.id }) {
		return Result{Code: AlreadyHeld, LeaseNumber: l.number}
	}
	if k == nil {
		k = &lock{name: c.Name}
		s.locks[c.Name] = k
	}
	if k.holder.IsZero() && !k.delayed {
		var r Result
		s.grant(k, l, c.LockDelay, &r)
		r.Code, r.Token, r.LeaseNumber = OK, k.token, l.number
		return r
	}
	if !c.Wait {
		r := Result{Code: LockHeld}
		s.describeHolder(k, &r)
		return r
	}
	k.waiters = append(k.waiters, waiter{lease: l.id, seq: c.Seq, lockDelay: c.LockDelay})
	l.waits = insertSorted(l.waits, k.name)
	return Result{Code: Queued, LeaseNumber: l.number,
		Events: []Event{{Kind: WaitStarted, Name: k.name, Lease: l.id, Number: l.number, Owner: l.owner, Seq: c.Seq}}}
}

// describeHolder fills a LockHeld result with who holds k (nothing if k is free).
func (s *State) describeHolder(k *lock, r *Result) {
	if k == nil {
		return
	}
	r.Token, r.Delayed = k.token, k.delayed
	if h := s.leases[k.holder]; h != nil {
		r.LeaseNumber, r.Owner = h.number, h.owner
	}
}

func (s *State) release(l *lease, c *Command) Result {
	k := s.locks[c.Name]
	if k == nil || k.holder != l.id {
		return Result{Code: NotHolder, LeaseNumber: l.number}
	}
	r := Result{Code: OK, LeaseNumber: l.number}
	s.unhold(k, l, CauseReleased, &r)
	return r
}

// unhold ends the grant of k held by l and hands k on at once.
func (s *State) unhold(k *lock, l *lease, cause Cause, r *Result) {
	r.Events = append(r.Events, Event{Kind: Released, Name: k.name, Lease: l.id, Number: l.number, Owner: l.owner,
		Token: k.token, Cause: cause})
	l.holds = removeSorted(l.holds, k.name)
	k.holder = LeaseID{}
	s.handOff(k, r)
}

// forceRelease ends the grant of c.Name with token c.Token, if it is still
// held: an admin's call, conditional on the token so a retry or a late
// duplicate cannot end the next holder's grant.
func (s *State) forceRelease(c *Command) Result {
	k := s.locks[c.Name]
	if k == nil || k.holder.IsZero() || k.token != c.Token {
		return Result{Code: Ended}
	}
	l := s.leases[k.holder]
	r := Result{Code: OK, LeaseNumber: l.number, Owner: l.owner, Token: k.token, Released: []string{k.name}}
	s.unhold(k, l, CauseForced, &r)
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
	s.forgetIfIdle(k)
	return Result{Code: OK, LeaseNumber: l.number,
		Events: []Event{{Kind: WaitCancelled, Lease: l.id, Number: l.number, Owner: l.owner, Name: c.Name, Seq: c.Seq}}}
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
		k.holder, k.token, k.lockDelay = w.lease, s.token, w.lockDelay
		r.Events = append(r.Events, Event{Kind: Granted, Lease: w.lease, Name: k.name, Token: k.token})
		return
	}
	l.waits = removeSorted(l.waits, k.name)
	s.grant(k, l, w.lockDelay, r)
	l.calls.settle(w.seq, OK, k.token)
}

func (s *State) grant(k *lock, l *lease, delay time.Duration, r *Result) {
	s.token++
	k.holder, k.token, k.lockDelay = l.id, s.token, delay
	l.holds = insertSorted(l.holds, k.name)
	r.Events = append(r.Events, Event{Kind: Granted, Lease: l.id, Number: l.number, Owner: l.owner, Name: k.name, Token: k.token})
}

func (s *State) forgetIfIdle(k *lock) {
	if k.holder.IsZero() && !k.delayed && len(k.waiters) == 0 {
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

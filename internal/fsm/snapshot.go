package fsm

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/fencehq/fence/internal/planted"
)

// Snapshot format (version 3), canonical: leases sorted by id, calls by
// number, locks and keys by name, so equal states give equal bytes.
//
//	version token clock leaseSeq
//	count × lease(id number ttl owner createReq renewals renewedAt
//	              top count × gap count × call(seq req kind code token))
//	count × lock(name holder token lockDelay delayed delayFrom count × waiter(lease seq lockDelay))
//	count × kv(key value token)
//	count × node(id addr)
//
// The indexes derived from locks (lease.holds, lease.waits) and the
// CreateLease dedup map are rebuilt by Unmarshal, not stored.
// Version 3 is version 4 without lease identities: a state none of whose
// leases has an identity is written as version 3, which a fence from before
// identities reads. Version 2 (fence before call numbers) is refused with
// ErrOldFormat.
const (
	snapshotVersion       = 4
	oldestSnapshotVersion = 3
)

// Marshal appends the canonical encoding of the whole state to dst.
func (s *State) Marshal(dst []byte) []byte {
	version := byte(oldestSnapshotVersion)
	for _, l := range s.leases {
		if l.identity != "" {
			version = snapshotVersion
		}
	}
	dst = append(dst, version)
	dst = binary.AppendUvarint(dst, s.token)
	dst = binary.AppendUvarint(dst, uint64(s.clock))
	dst = binary.AppendUvarint(dst, s.leaseSeq)

	ids := slices.SortedFunc(maps.Keys(s.leases), compareIDs)
	dst = binary.AppendUvarint(dst, uint64(len(ids)))
	for _, id := range ids {
		l := s.leases[id]
		dst = append(dst, l.id[:]...)
		dst = binary.AppendUvarint(dst, l.number)
		dst = binary.AppendUvarint(dst, uint64(l.ttl))
		dst = appendString(dst, l.owner)
		if version >= 4 {
			dst = appendString(dst, l.identity)
		}
		dst = append(dst, l.createReq[:]...)
		dst = binary.AppendUvarint(dst, l.renewals)
		dst = binary.AppendUvarint(dst, uint64(l.renewedAt))
		m := &l.calls
		dst = binary.AppendUvarint(dst, m.top)
		dst = binary.AppendUvarint(dst, uint64(len(m.gaps)))
		for _, g := range m.gaps {
			dst = binary.AppendUvarint(dst, g)
		}
		dst = binary.AppendUvarint(dst, uint64(len(m.answers)))
		for _, k := range m.answers {
			dst = binary.AppendUvarint(dst, k.seq)
			dst = append(dst, k.req[:]...)
			dst = append(dst, byte(k.kind), byte(k.code))
			dst = binary.AppendUvarint(dst, k.token)
		}
	}

	names := slices.Sorted(maps.Keys(s.locks))
	dst = binary.AppendUvarint(dst, uint64(len(names)))
	for _, name := range names {
		k := s.locks[name]
		dst = appendString(dst, k.name)
		dst = append(dst, k.holder[:]...)
		dst = binary.AppendUvarint(dst, k.token)
		dst = binary.AppendUvarint(dst, uint64(k.lockDelay))
		dst = appendBool(dst, k.delayed)
		dst = binary.AppendUvarint(dst, uint64(k.delayFrom))
		dst = binary.AppendUvarint(dst, uint64(len(k.waiters)))
		for _, w := range k.waiters {
			dst = append(dst, w.lease[:]...)
			dst = binary.AppendUvarint(dst, w.seq)
			dst = binary.AppendUvarint(dst, uint64(w.lockDelay))
		}
	}

	keys := slices.Sorted(maps.Keys(s.kv))
	dst = binary.AppendUvarint(dst, uint64(len(keys)))
	for _, key := range keys {
		e := s.kv[key]
		dst = appendString(dst, key)
		dst = appendString(dst, string(e.value))
		dst = binary.AppendUvarint(dst, e.token)
	}

	nodeIDs := slices.Sorted(maps.Keys(s.nodes))
	dst = binary.AppendUvarint(dst, uint64(len(nodeIDs)))
	for _, id := range nodeIDs {
		dst = appendString(dst, id)
		dst = appendString(dst, s.nodes[id])
	}
	return dst
}

// Unmarshal decodes a state made by Marshal. It checks that the state is
// consistent (every holder and waiter is a live lease, no lock waits on its own
// holder, tokens never exceed the counter) and refuses it otherwise.
func Unmarshal(b []byte) (*State, error) {
	d := decoder{b: b}
	d.version = d.byte()
	if v := d.version; d.err == nil && (v < oldestSnapshotVersion || v > snapshotVersion) {
		if v < oldestSnapshotVersion {
			return nil, fmt.Errorf("%w: snapshot format %d (this fence reads %d…%d)", ErrOldFormat, v, oldestSnapshotVersion, snapshotVersion)
		}
		return nil, fmt.Errorf("%w: snapshot version %d, want %d…%d", ErrCorrupt, v, oldestSnapshotVersion, snapshotVersion)
	}
	s := New()
	s.token = d.uvarint()
	s.clock = d.duration()
	s.leaseSeq = d.uvarint()

	var prevID LeaseID
	identities := false               // some lease has one: version 4
	numbers := map[uint64]bool{}      // lease numbers seen: each once
	tokens := map[uint64]bool{}       // tokens of held or delayed locks: each once
	waiting := map[waitingCall]bool{} // queued calls named by waiters: each once
	for n := d.count(); n > 0 && d.err == nil; n-- {
		l := &lease{}
		d.fixed(l.id[:])
		l.number = d.uvarint()
		l.ttl = d.duration()
		l.owner = d.string(MaxOwnerLen)
		if d.version >= 4 {
			l.identity = d.string(MaxNameLen)
		}
		d.fixed(l.createReq[:])
		l.renewals = d.uvarint()
		l.renewedAt = d.duration()
		m := &l.calls
		m.top = d.uvarint()
		for n := d.count(); n > 0 && d.err == nil; n-- {
			g := d.uvarint()
			if d.err == nil && (g == 0 || g >= m.top || len(m.gaps) > 0 && g <= m.gaps[len(m.gaps)-1] || len(m.gaps) > MaxCallsInFlight) {
				d.fail("lease %v has a bad unanswered call number %d", l.id, g)
			}
			m.gaps = append(m.gaps, g)
		}
		for n := d.count(); n > 0 && d.err == nil; n-- {
			var k call
			k.seq = d.uvarint()
			d.fixed(k.req[:])
			k.kind, k.code = Kind(d.byte()), Code(d.byte())
			k.token = d.uvarint()
			if d.err == nil && !s.validCall(m, k) {
				d.fail("lease %v remembers a bad call %+v", l.id, k)
			}
			m.answers = append(m.answers, k)
		}
		switch {
		case d.err != nil:
		case compareIDs(l.id, prevID) <= 0:
			d.fail("lease %v out of order", l.id)
		case l.ttl < MinTTL || l.ttl > MaxTTL || ValidOwner(l.owner) != nil:
			d.fail("lease %v has a bad ttl or owner", l.id)
		case l.identity != "" && ValidName("identity", l.identity) != nil:
			d.fail("lease %v has a bad identity", l.id)
		case l.createReq.IsZero():
			d.fail("lease %v has no create request id", l.id)
		case l.number == 0 || l.number > s.leaseSeq || numbers[l.number]:
			d.fail("lease number %d repeated or outside 1…%d", l.number, s.leaseSeq)
		case len(m.answers) > MaxCallsInFlight:
			d.fail("lease remembers %d calls, limit %d", len(m.answers), MaxCallsInFlight)
		case s.created[l.createReq] != LeaseID{}:
			d.fail("two leases were created by one request")
		}
		prevID = l.id
		numbers[l.number] = true
		s.leases[l.id] = l
		s.created[l.createReq] = l.id
		identities = identities || l.identity != ""
	}
	if d.err == nil && d.version == snapshotVersion && !identities {
		d.fail("a version-%d snapshot with no lease identity (such a state is written as version %d)", snapshotVersion, oldestSnapshotVersion)
	}

	var lastName string
	for n := d.count(); n > 0 && d.err == nil; n-- {
		k := &lock{}
		k.name = d.string(MaxNameLen)
		d.fixed(k.holder[:])
		k.token = d.uvarint()
		k.lockDelay = d.duration()
		k.delayed = d.bool()
		k.delayFrom = d.duration()
		for m := d.count(); m > 0 && d.err == nil; m-- {
			var w waiter
			d.fixed(w.lease[:])
			w.seq = d.uvarint()
			w.lockDelay = d.duration()
			k.waiters = append(k.waiters, w)
		}
		if d.err != nil {
			break
		}
		if len(s.locks) > 0 && k.name <= lastName || ValidName("lock name", k.name) != nil {
			d.fail("lock %q out of order or badly named", k.name)
		}
		lastName = k.name
		if k.holder.IsZero() && !k.delayed && len(k.waiters) == 0 {
			d.fail("lock %q is idle and should not be stored", k.name)
		}
		if k.token == 0 || k.token > s.token || tokens[k.token] {
			d.fail("lock %q has token %d: zero, repeated, or above the counter %d", k.name, k.token, s.token)
		}
		tokens[k.token] = true
		if k.lockDelay < 0 || k.lockDelay > MaxLockDelay {
			d.fail("lock %q has a lock-delay of %v, outside 0…%v", k.name, k.lockDelay, MaxLockDelay)
		}
		if !k.holder.IsZero() {
			h := s.leases[k.holder]
			if h == nil || k.delayed {
				d.fail("lock %q is held by an unknown lease or both held and delayed", k.name)
				break
			}
			h.holds = append(h.holds, k.name) // names arrive sorted
		}
		for _, w := range k.waiters {
			if w.lockDelay < 0 || w.lockDelay > MaxLockDelay || waiting[waitingCall{w.lease, w.seq}] {
				d.fail("lock %q has a waiter with a bad lock-delay, or naming a call another waits with", k.name)
				break
			}
			waiting[waitingCall{w.lease, w.seq}] = true
			l := s.leases[w.lease]
			if l == nil || w.lease == k.holder || slices.Contains(l.waits, k.name) || !l.queued(w.seq) {
				d.fail("lock %q has a bad waiter", k.name)
				break
			}
			l.waits = append(l.waits, k.name)
		}
		s.locks[k.name] = k
	}

	var lastKey string
	for n := d.count(); n > 0 && d.err == nil; n-- {
		key := d.string(MaxNameLen)
		e := &entry{}
		if v := d.string(MaxValueLen); v != "" {
			e.value = []byte(v)
		}
		e.token = d.uvarint()
		if d.err == nil && (len(s.kv) > 0 && key <= lastKey || ValidName("key", key) != nil || e.token == 0 || e.token > s.token) {
			d.fail("key %q repeated or with a bad token", key)
		}
		lastKey = key
		s.kv[key] = e
	}
	var lastNode string
	for n := d.count(); n > 0 && d.err == nil; n-- {
		id, addr := d.string(MaxNameLen), d.string(MaxNameLen)
		if d.err == nil && (len(s.nodes) > 0 && id <= lastNode || ValidName("node id", id) != nil || ValidName("node address", addr) != nil) {
			d.fail("node %q out of order or malformed", id)
		}
		lastNode, s.nodes[id] = id, addr
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	for _, l := range s.leases {
		queued := 0
		for _, k := range l.calls.answers {
			if k.code == Queued {
				queued++
			}
		}
		if d.err == nil && queued != len(l.waits) {
			d.fail("lease %v remembers %d waiting calls but waits for %d locks", l.id, queued, len(l.waits))
		}
	}
	if d.err == nil && len(waiting) != s.NumWaiters() {
		d.fail("two waits name one waiting call")
	}
	if d.err != nil {
		return nil, d.err
	}
	if planted.TokenRestart { // planted bug: the counter is rebuilt from the store's highest token
		s.token = 0
		for _, e := range s.kv {
			s.token = max(s.token, e.token)
		}
	}
	return s, nil
}

// waitingCall names a queued Acquire: its lease and call number.
type waitingCall struct {
	lease LeaseID
	seq   uint64
}

// validCall checks a remembered call read from a snapshot: numbered below
// top, after the previous one, not among the gaps, an Acquire or Release
// with an answer either can give, a token only where it belongs.
func (s *State) validCall(m *calls, k call) bool {
	if _, gap := slices.BinarySearch(m.gaps, k.seq); gap || k.seq == 0 || k.seq >= m.top || k.req.IsZero() ||
		len(m.answers) > 0 && k.seq <= m.answers[len(m.answers)-1].seq {
		return false
	}
	switch {
	case k.kind == KindAcquire && k.code == OK:
		return k.token >= 1 && k.token <= s.token
	case k.kind == KindAcquire && k.code == AlreadyHeld: // the held lock's token, or 0: already waiting
		return k.token <= s.token
	case k.kind == KindAcquire:
		return k.token == 0 && (k.code == Queued || k.code == LockHeld || k.code == Cancelled)
	case k.kind == KindRelease:
		return k.token == 0 && (k.code == OK || k.code == NotHolder)
	}
	return false
}

// queued reports whether l remembers call seq as an Acquire still waiting.
func (l *lease) queued(seq uint64) bool {
	k, found := l.calls.outcome(seq)
	return found && k.kind == KindAcquire && k.code == Queued
}

// Answer returns what a retry of call seq of a lease (an Acquire of lock
// name) would be answered now, changing nothing: a grant that has ended
// since answers Ended, never OK. found is false if the lease has ended or
// the call is not remembered (never made, or acknowledged by its client).
func (s *State) Answer(lease LeaseID, seq uint64, name string) (r Result, found bool) {
	l := s.leases[lease]
	if l == nil {
		return Result{}, false
	}
	k, found := l.calls.outcome(seq)
	if !found {
		return Result{}, false
	}
	return s.recall(l, k, &Command{Name: name}), true
}

// NodeAddr returns the client address a node recorded, if any.
func (s *State) NodeAddr(id string) (string, bool) {
	a, ok := s.nodes[id]
	return a, ok
}

// count reads a collection length; every element takes at least one byte.
func (d *decoder) count() uint64 {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)) {
		d.fail("count %d exceeds the %d bytes left", n, len(d.b))
		return 0
	}
	return n
}

func compareIDs(a, b LeaseID) int { return slices.Compare(a[:], b[:]) }

// LeaseView is a read-only copy of a lease.
type LeaseView struct {
	ID        LeaseID
	Number    uint64
	TTL       time.Duration
	Owner     string
	Identity  string // who created it under the server's policy ("" without one)
	Renewals  uint64
	RenewedAt time.Duration // logical clock at creation or last renewal
	Holds     []string
	Waits     []string
}

// LockView is a read-only copy of a lock.
type LockView struct {
	Name        string
	Holder      LeaseID // zero when free
	HolderNum   uint64
	HolderOwner string
	Token       uint64
	LockDelay   time.Duration
	Delayed     bool
	DelayFrom   time.Duration // logical clock when the lock-delay began
	Waiters     []LeaseID     // FIFO order
}

// Token returns the last token granted (0 before the first grant).
func (s *State) Token() uint64 { return s.token }

// RaiseToken makes floor the last token granted, if it is larger, so the
// next grant's token exceeds it. It is no command: a restore (fence
// snapshot restore) calls it on a state before any node serves it, so that
// a cluster seeded from an old copy never hands out a token the old
// cluster may have handed out after the copy. Locks keep their grants'
// tokens.
func (s *State) RaiseToken(floor uint64) { s.token = max(s.token, floor) }

// Clock returns the logical clock: the sum of committed ticks.
func (s *State) Clock() time.Duration { return s.clock }

// NumLeases returns the number of live leases.
func (s *State) NumLeases() int { return len(s.leases) }

// NumLocks returns the number of locks held, delayed or waited for.
func (s *State) NumLocks() int { return len(s.locks) }

// Lease returns the lease with id, if it lives.
func (s *State) Lease(id LeaseID) (LeaseView, bool) {
	l := s.leases[id]
	if l == nil {
		return LeaseView{}, false
	}
	return l.view(), true
}

// Leases calls fn for every live lease, in id order.
func (s *State) Leases(fn func(LeaseView)) {
	for _, id := range slices.SortedFunc(maps.Keys(s.leases), compareIDs) {
		fn(s.leases[id].view())
	}
}

// LeaseTimes calls fn for every live lease, in no particular order, with
// what a new leader needs for its deadline: cheaper than Leases (no sort,
// no copies), which matters when a leader takes over a million leases.
func (s *State) LeaseTimes(fn func(id LeaseID, ttl, renewedAt time.Duration, renewals uint64)) {
	for id, l := range s.leases {
		fn(id, l.ttl, l.renewedAt, l.renewals)
	}
}

func (l *lease) view() LeaseView {
	return LeaseView{ID: l.id, Number: l.number, TTL: l.ttl, Owner: l.owner, Identity: l.identity, Renewals: l.renewals,
		RenewedAt: l.renewedAt, Holds: slices.Clone(l.holds), Waits: slices.Clone(l.waits)}
}

// Lock returns the lock called name, if it is held, delayed or waited for.
func (s *State) Lock(name string) (LockView, bool) {
	k := s.locks[name]
	if k == nil {
		return LockView{}, false
	}
	v := LockView{Name: k.name, Holder: k.holder, Token: k.token, LockDelay: k.lockDelay,
		Delayed: k.delayed, DelayFrom: k.delayFrom}
	if h := s.leases[k.holder]; h != nil {
		v.HolderNum, v.HolderOwner = h.number, h.owner
	}
	for _, w := range k.waiters {
		v.Waiters = append(v.Waiters, w.lease)
	}
	return v, true
}

// Locks returns every lock, in name order.
func (s *State) Locks() []LockView {
	out, _ := s.LocksAfter("", len(s.locks), nil)
	return out
}

// LocksAfter returns up to limit locks whose names sort after after and
// that keep admits (nil: all), in name order, and whether more such locks
// remain: what a caller who may see only keep's names learns depends on
// those names alone.
func (s *State) LocksAfter(after string, limit int, keep func(name string) bool) (page []LockView, more bool) {
	names := slices.Sorted(maps.Keys(s.locks))
	i, found := slices.BinarySearch(names, after)
	if found {
		i++
	}
	names = names[i:]
	if keep != nil {
		names = slices.DeleteFunc(slices.Clone(names), func(n string) bool { return !keep(n) })
	}
	if len(names) > limit {
		names, more = names[:limit], true
	}
	page = make([]LockView, 0, len(names))
	for _, name := range names {
		v, _ := s.Lock(name)
		page = append(page, v)
	}
	return page, more
}

// Get returns the value and highest accepted token of a fenced key.
func (s *State) Get(key string) (value []byte, token uint64, ok bool) {
	e := s.kv[key]
	if e == nil {
		return nil, 0, false
	}
	return slices.Clone(e.value), e.token, true
}

// NumWaiters returns the number of queued acquires across all locks.
func (s *State) NumWaiters() int {
	n := 0
	for _, k := range s.locks {
		n += len(k.waiters)
	}
	return n
}

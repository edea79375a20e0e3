package fsm

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/fencehq/fence/internal/planted"
)

// Snapshot format (version 7), canonical: leases sorted by id, calls by
// number, locks, keys and runs by name, a lock's grants by slot then token,
// so equal states give equal bytes.
//
//	version token clock leaseSeq
//	count × lease(id number ttl owner identity createReq renewals renewedAt
//	              top count × gap count × call(seq req kind code token))
//	count × lock(name permits
//	             count × grant(holder token slot shared lockDelay oncePer delayFrom)
//	             count × waiter(lease seq lockDelay oncePer shared))
//	count × kv(key value token)
//	count × node(id addr)
//	count × run(name token number owner at wall window)
//
// A grant with a zero holder is in lock-delay. Versions 3 to 5 hold one
// grant per lock (a mutex), in the form
//
//	lock(name holder token lockDelay oncePer delayed delayFrom
//	     count × waiter(lease seq lockDelay oncePer))
//
// The indexes derived from locks (lease.holds, lease.waits), the
// CreateLease dedup map and the runs' expiry order are rebuilt by
// Unmarshal, not stored.
//
// A state is written in the oldest version that can express it, so a
// cluster that does not use a newer feature writes snapshots an older fence
// reads (and a version that says more than the state needs is refused as
// non-canonical):
//   - version 3: no lease identities (no identity field) and nothing of
//     once-per (no oncePer fields, no runs section, no call answered
//     RanRecently);
//   - version 4: version 3 plus lease identities;
//   - version 5: version 4 plus once-per: the oncePer of grants and
//     waiters, the recorded runs, calls answered RanRecently;
//   - version 6: version 5 plus semaphores and read-write locks: locks in
//     the form above (permits, grants, shared waiters), calls answered
//     PermitsMismatch. A state whose every lock is a mutex with one grant
//     and no call answered PermitsMismatch is written in version 5 or
//     older;
//   - version 7: version 6 plus Acquire calls answered NotHolder (a relock
//     of a grant the lease did not hold); the layout is version 6's.
//
// Version 2 (fence before call numbers) is refused with ErrOldFormat.
const (
	snapshotVersion       = 7
	oldestSnapshotVersion = 3
)

// version returns the oldest snapshot version that can express s.
func (s *State) version() byte {
	version := byte(oldestSnapshotVersion)
	if len(s.runs) > 0 {
		version = 5
	}
	for _, l := range s.leases {
		if l.identity != "" {
			version = max(version, 4)
		}
		for _, k := range l.calls.answers {
			switch {
			case k.kind == KindAcquire && k.code == NotHolder:
				return 7
			case k.code == PermitsMismatch:
				version = max(version, 6)
			case k.code == RanRecently:
				version = max(version, 5)
			}
		}
	}
	for _, k := range s.locks {
		if !k.mutex() {
			version = max(version, 6)
			continue
		}
		if k.grants[0].oncePer != 0 || slices.ContainsFunc(k.waiters, func(w waiter) bool { return w.oncePer != 0 }) {
			version = max(version, 5)
		}
	}
	return version
}

// mutex reports whether k is what versions 3 to 5 can express: one
// permit, one grant, nothing shared.
func (k *lock) mutex() bool {
	return k.permits == 1 && len(k.grants) == 1 && !k.grants[0].shared &&
		!slices.ContainsFunc(k.waiters, func(w waiter) bool { return w.shared })
}

// Marshal appends the canonical encoding of the whole state to dst.
func (s *State) Marshal(dst []byte) []byte {
	return s.marshal(dst, s.version(), nil)
}

// encodeChunk is about how many bytes Encode gathers before it hands them
// on: it hands on whole records, so a chunk is at most this plus one record.
const encodeChunk = 64 << 10

// Encode hands the canonical encoding of the whole state (Marshal's bytes)
// to emit in chunks of about encodeChunk bytes, in order, so the encoding
// is never whole in memory: a node writing a snapshot of a million leases
// holds one chunk of it, not a second copy of the state. emit must not
// keep the chunk (its buffer is reused); Encode stops at emit's first
// error and returns it. (A callback, not an io.Writer: the fsm does no I/O.)
func (s *State) Encode(emit func(chunk []byte) error) error {
	sp := &spill{emit: emit}
	rest := s.marshal(make([]byte, 0, encodeChunk+encodeChunk/4), s.version(), sp)
	sp.hand(rest)
	return sp.err
}

// spill hands what marshal gathered so far to emit once it reaches
// encodeChunk bytes (a nil spill keeps everything: Marshal).
type spill struct {
	emit func([]byte) error
	err  error // emit's first error; nothing is handed on after it
}

// flush hands dst on if it holds a chunk's worth and returns it emptied,
// else returns it as it is.
func (sp *spill) flush(dst []byte) []byte {
	if sp == nil || len(dst) < encodeChunk {
		return dst
	}
	sp.hand(dst)
	return dst[:0]
}

func (sp *spill) hand(b []byte) {
	if sp.err == nil && len(b) > 0 {
		sp.err = sp.emit(b)
	}
}

// marshal appends the encoding of the state in the given version, which
// must be able to express it. With a spill it writes what it gathered
// after each record (sp.flush) and returns the rest.
func (s *State) marshal(dst []byte, version byte, sp *spill) []byte {
	dst = append(dst, version)
	dst = binary.AppendUvarint(dst, s.token)
	dst = binary.AppendUvarint(dst, uint64(s.clock))
	dst = binary.AppendUvarint(dst, s.leaseSeq)

	ids := s.LeaseIDs(make([]LeaseID, 0, len(s.leases))) // sized: a million ids, collected by append, would be copied as they grow
	slices.SortFunc(ids, compareIDs)
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
		dst = sp.flush(dst)
	}

	names := slices.Sorted(maps.Keys(s.locks))
	dst = binary.AppendUvarint(dst, uint64(len(names)))
	for _, name := range names {
		k := s.locks[name]
		dst = appendString(dst, k.name)
		if version >= 6 {
			dst = binary.AppendUvarint(dst, uint64(k.permits))
			dst = binary.AppendUvarint(dst, uint64(len(k.grants)))
			for _, g := range k.grants {
				dst = append(dst, g.holder[:]...)
				dst = binary.AppendUvarint(dst, g.token)
				dst = binary.AppendUvarint(dst, uint64(g.slot))
				dst = appendBool(dst, g.shared)
				dst = binary.AppendUvarint(dst, uint64(g.lockDelay))
				dst = binary.AppendUvarint(dst, uint64(g.oncePer))
				dst = binary.AppendUvarint(dst, uint64(g.delayFrom))
			}
		} else {
			g := &k.grants[0]
			dst = append(dst, g.holder[:]...)
			dst = binary.AppendUvarint(dst, g.token)
			dst = binary.AppendUvarint(dst, uint64(g.lockDelay))
			if version >= 5 {
				dst = binary.AppendUvarint(dst, uint64(g.oncePer))
			}
			dst = appendBool(dst, g.delayed())
			dst = binary.AppendUvarint(dst, uint64(g.delayFrom))
		}
		dst = binary.AppendUvarint(dst, uint64(len(k.waiters)))
		for _, w := range k.waiters {
			dst = append(dst, w.lease[:]...)
			dst = binary.AppendUvarint(dst, w.seq)
			dst = binary.AppendUvarint(dst, uint64(w.lockDelay))
			if version >= 5 {
				dst = binary.AppendUvarint(dst, uint64(w.oncePer))
			}
			if version >= 6 {
				dst = appendBool(dst, w.shared)
			}
		}
		dst = sp.flush(dst)
	}

	keys := slices.Sorted(maps.Keys(s.kv))
	dst = binary.AppendUvarint(dst, uint64(len(keys)))
	for _, key := range keys {
		e := s.kv[key]
		dst = appendString(dst, key)
		dst = appendString(dst, string(e.value))
		dst = binary.AppendUvarint(dst, e.token)
		dst = sp.flush(dst)
	}

	nodeIDs := slices.Sorted(maps.Keys(s.nodes))
	dst = binary.AppendUvarint(dst, uint64(len(nodeIDs)))
	for _, id := range nodeIDs {
		dst = appendString(dst, id)
		dst = appendString(dst, s.nodes[id])
		dst = sp.flush(dst)
	}
	if version < 5 {
		return dst
	}
	runNames := slices.Sorted(maps.Keys(s.runs))
	dst = binary.AppendUvarint(dst, uint64(len(runNames)))
	for _, name := range runNames {
		r := s.runs[name]
		dst = appendString(dst, r.name)
		dst = binary.AppendUvarint(dst, r.token)
		dst = binary.AppendUvarint(dst, r.number)
		dst = appendString(dst, r.owner)
		dst = binary.AppendUvarint(dst, uint64(r.at))
		dst = binary.AppendUvarint(dst, uint64(r.wall))
		dst = binary.AppendUvarint(dst, uint64(r.window))
		dst = sp.flush(dst)
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
		case s.created[l.createReq] != nil:
			d.fail("two leases were created by one request")
		}
		prevID = l.id
		numbers[l.number] = true
		s.leases[l.id] = l
		s.created[l.createReq] = l
	}

	var lastName string
	for n := d.count(); n > 0 && d.err == nil; n-- {
		k := s.readLock(&d)
		if d.err != nil {
			break
		}
		if len(s.locks) > 0 && k.name <= lastName || ValidName("lock name", k.name) != nil {
			d.fail("lock %q out of order or badly named", k.name)
		}
		lastName = k.name
		s.checkLock(&d, k, tokens, waiting)
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
	if d.version >= 5 {
		s.unmarshalRuns(&d)
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
	if v := s.version(); d.err == nil && d.version != v {
		d.fail("a version-%d snapshot of a state version %d expresses (a state is written in the oldest version that can)", d.version, v)
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

// readLock reads one lock in the snapshot's version.
func (s *State) readLock(d *decoder) *lock {
	k := &lock{permits: 1}
	k.name = d.string(MaxNameLen)
	if d.version >= 6 {
		if p := d.uvarint(); p == 0 || p > MaxPermits {
			d.fail("lock %q has %d permits, outside 1…%d", k.name, p, MaxPermits)
		} else {
			k.permits = uint32(p)
		}
		for n := d.count(); n > 0 && d.err == nil; n-- {
			var g grant
			d.fixed(g.holder[:])
			g.token = d.uvarint()
			if slot := d.uvarint(); slot >= uint64(k.permits) {
				d.fail("lock %q has a grant in slot %d of %d", k.name, slot, k.permits)
			} else {
				g.slot = uint32(slot)
			}
			g.shared = d.bool()
			g.lockDelay = d.duration()
			g.oncePer = d.duration()
			g.delayFrom = d.duration()
			k.grants = append(k.grants, g)
		}
	} else {
		var g grant
		d.fixed(g.holder[:])
		g.token = d.uvarint()
		g.lockDelay = d.duration()
		if d.version >= 5 {
			g.oncePer = d.duration()
		}
		delayed := d.bool()
		g.delayFrom = d.duration()
		if d.err == nil && delayed != g.delayed() {
			d.fail("lock %q is held and delayed, or neither", k.name)
		}
		k.grants = append(k.grants, g)
	}
	for m := d.count(); m > 0 && d.err == nil; m-- {
		var w waiter
		d.fixed(w.lease[:])
		w.seq = d.uvarint()
		w.lockDelay = d.duration()
		if d.version >= 5 {
			w.oncePer = d.duration()
		}
		if d.version >= 6 {
			w.shared = d.bool()
		}
		k.waiters = append(k.waiters, w)
	}
	return k
}

// checkLock checks a lock read from a snapshot against the state read so
// far (leases, the tokens of other locks' grants, the waiting calls) and
// records its holders and waiters in their leases.
func (s *State) checkLock(d *decoder, k *lock, tokens map[uint64]bool, waiting map[waitingCall]bool) {
	if len(k.grants) == 0 {
		d.fail("lock %q has no grant held or delayed and should not be stored", k.name)
		return
	}
	exclusive := 0
	for i, g := range k.grants {
		switch {
		case i > 0 && compareGrants(k.grants[i-1], g) >= 0,
			i > 0 && !g.shared && k.grants[i-1].slot == g.slot:
			d.fail("lock %q has grants out of order or two in one slot", k.name)
		case g.token == 0 || g.token > s.token || tokens[g.token]:
			d.fail("lock %q has token %d: zero, repeated, or above the counter %d", k.name, g.token, s.token)
		case g.lockDelay < 0 || g.lockDelay > MaxLockDelay:
			d.fail("lock %q has a lock-delay of %v, outside 0…%v", k.name, g.lockDelay, MaxLockDelay)
		case g.oncePer < 0 || g.oncePer > MaxOncePer || g.oncePer != 0 && g.delayed():
			d.fail("lock %q has a once-per window of %v: outside 0…%v, or without a holder", k.name, g.oncePer, MaxOncePer)
		case g.shared && (k.permits != 1 || g.slot != 0):
			d.fail("lock %q has a shared grant but %d permits", k.name, k.permits)
		}
		tokens[g.token] = true
		if !g.shared {
			exclusive++
		}
		if g.delayed() {
			continue
		}
		h := s.leases[g.holder]
		if h == nil || len(h.holds) > 0 && h.holds[len(h.holds)-1] == k.name {
			d.fail("lock %q is held by an unknown lease, or twice by one", k.name)
			return
		}
		h.holds = append(h.holds, k.name) // names arrive sorted
	}
	if len(k.grants) > int(k.permits) && exclusive > 0 || k.permits == 1 && exclusive > 0 && len(k.grants) > 1 {
		d.fail("lock %q has %d grants for %d permits", k.name, len(k.grants), k.permits)
	}
	for _, w := range k.waiters {
		if w.lockDelay < 0 || w.lockDelay > MaxLockDelay || w.oncePer < 0 || w.oncePer > MaxOncePer || waiting[waitingCall{w.lease, w.seq}] {
			d.fail("lock %q has a waiter with a bad lock-delay, or naming a call another waits with", k.name)
			return
		}
		waiting[waitingCall{w.lease, w.seq}] = true
		l := s.leases[w.lease]
		if l == nil || k.heldBy(w.lease) >= 0 || slices.Contains(l.waits, k.name) || !l.queued(w.seq) || w.shared && k.permits != 1 {
			d.fail("lock %q has a bad waiter", k.name)
			return
		}
		l.waits = append(l.waits, k.name)
	}
	if len(k.waiters) > 0 && k.admits(k.waiters[0].shared) {
		d.fail("lock %q has a waiter first in line whose grant fits", k.name)
	}
}

// unmarshalRuns reads the runs section (version 5): records in name order,
// each inside its window (the Tick that passes a window forgets it).
func (s *State) unmarshalRuns(d *decoder) {
	var last string
	for n := d.count(); n > 0 && d.err == nil; n-- {
		r := &run{}
		r.name = d.string(MaxNameLen)
		r.token = d.uvarint()
		r.number = d.uvarint()
		r.owner = d.string(MaxOwnerLen)
		r.at = d.duration()
		wall := d.uvarint()
		r.window = d.duration()
		switch {
		case d.err != nil:
			return
		case len(s.runs) > 0 && r.name <= last || ValidName("lock name", r.name) != nil:
			d.fail("run of %q out of order or badly named", r.name)
		case r.token == 0 || r.token > s.token || r.number == 0 || r.number > s.leaseSeq || ValidOwner(r.owner) != nil:
			d.fail("run of %q has a bad token, lease number or owner", r.name)
		case wall == 0 || wall > 1<<63-1:
			d.fail("run of %q has a bad wall clock", r.name)
		case r.window <= 0 || r.window > MaxOncePer || r.at > s.clock || r.until() <= s.clock:
			d.fail("run of %q at %v with window %v: outside 0…%v, after the clock %v, or past its window", r.name, r.at, r.window, MaxOncePer, s.clock)
		}
		r.wall, last = int64(wall), r.name
		s.runs[r.name] = r
		s.runOrder = append(s.runOrder, r)
	}
	slices.SortFunc(s.runOrder, compareRuns)
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
	case k.kind == KindAcquire && k.code == RanRecently: // the recorded run's token
		return k.token >= 1 && k.token <= s.token
	case k.kind == KindAcquire && k.code == PermitsMismatch: // the lock's permit count then
		return k.token >= 1 && k.token <= MaxPermits
	case k.kind == KindAcquire: // NotHolder: a relock of a grant the lease did not hold
		return k.token == 0 && (k.code == Queued || k.code == LockHeld || k.code == Cancelled || k.code == NotHolder)
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

// LockView is a read-only copy of a lock. Holder through DelayFrom
// describe its first grant (by slot; a held one before a delayed one):
// for a mutex, its one grant.
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
	// WaitersShared says which waiters (same order) want a shared grant.
	WaitersShared []bool
	// Permits is the lock's permit count: 1 for a mutex or a read-write lock.
	Permits uint32
	// Grants are every grant held or in lock-delay, by slot then token.
	Grants []GrantView
}

// GrantView is a read-only copy of one grant of a lock.
type GrantView struct {
	Holder      LeaseID // zero while delayed
	HolderNum   uint64
	HolderOwner string
	Token       uint64
	Slot        uint32
	Shared      bool
	LockDelay   time.Duration
	Delayed     bool
	DelayFrom   time.Duration // logical clock when the lock-delay began (delayed grants)
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

// LeaseIDs appends the id of every live lease to dst, in no particular
// order, and returns it: what a new leader walks, a chunk at a time, to
// build its deadlines (LeaseTime reads each one's times as it gets there).
func (s *State) LeaseIDs(dst []LeaseID) []LeaseID {
	for id := range s.leases {
		dst = append(dst, id)
	}
	return dst
}

// LeaseTime returns what a new leader needs for one lease's deadline: its
// TTL, the logical clock at its creation or last renewal, and its renewal
// count; ok is false if the lease does not live.
func (s *State) LeaseTime(id LeaseID) (ttl, renewedAt time.Duration, renewals uint64, ok bool) {
	l := s.leases[id]
	if l == nil {
		return 0, 0, 0, false
	}
	return l.ttl, l.renewedAt, l.renewals, true
}

// DelayedGrants calls fn for every grant in lock-delay, in no particular
// order, with its lock's name, its token, its lock-delay and the logical
// clock when the delay began: cheaper than Locks (no sort, no views).
func (s *State) DelayedGrants(fn func(name string, token uint64, lockDelay, delayFrom time.Duration)) {
	for _, k := range s.locks {
		for i := range k.grants {
			if g := &k.grants[i]; g.delayed() {
				fn(k.name, g.token, g.lockDelay, g.delayFrom)
			}
		}
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
	v := LockView{Name: k.name, Permits: k.permits}
	for _, g := range k.grants {
		gv := GrantView{Holder: g.holder, Token: g.token, Slot: g.slot, Shared: g.shared, LockDelay: g.lockDelay,
			Delayed: g.delayed(), DelayFrom: g.delayFrom}
		if h := s.leases[g.holder]; h != nil {
			gv.HolderNum, gv.HolderOwner = h.number, h.owner
		}
		v.Grants = append(v.Grants, gv)
	}
	if g, ok := k.first(); ok {
		f := v.Grants[slices.IndexFunc(v.Grants, func(gv GrantView) bool { return gv.Token == g.token })]
		v.Holder, v.HolderNum, v.HolderOwner, v.Token = f.Holder, f.HolderNum, f.HolderOwner, f.Token
		v.LockDelay, v.Delayed, v.DelayFrom = f.LockDelay, f.Delayed, f.DelayFrom
	}
	for _, w := range k.waiters {
		v.Waiters = append(v.Waiters, w.lease)
		v.WaitersShared = append(v.WaitersShared, w.shared)
	}
	return v, true
}

// QueuedView is one waiter of a lock as read calls show it: the waiting
// lease's public number and owner (never its secret id).
type QueuedView struct {
	Number uint64
	Owner  string
	Shared bool // a reader of a read-write lock
}

// Queue returns who waits for the lock called name, in FIFO order (the first
// is granted next); nil if nobody does. A lease waits at most once per lock.
// Lock leaves the owners out (Waiters: ids only) so that listing many locks
// does not look up every waiter's lease; Queue is the one-lock read that does.
func (s *State) Queue(name string) []QueuedView {
	k := s.locks[name]
	if k == nil || len(k.waiters) == 0 {
		return nil
	}
	q := make([]QueuedView, 0, len(k.waiters))
	for _, w := range k.waiters {
		if l := s.leases[w.lease]; l != nil { // always (a lease leaves its queues as it ends), but a read never panics
			q = append(q, QueuedView{Number: l.number, Owner: l.owner, Shared: w.shared})
		}
	}
	return q
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

// Queues calls fn with every lock that has queued acquires and their
// number, in no particular order.
func (s *State) Queues(fn func(name string, waiters int)) {
	for _, k := range s.locks {
		if len(k.waiters) > 0 {
			fn(k.name, len(k.waiters))
		}
	}
}

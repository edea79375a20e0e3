package node

import (
	"time"

	"github.com/fencehq/fence/internal/fsm"
)

// holdTimes remembers when each live grant began, on the log's clock
// (fsm.State.Clock: the sum of committed ticks), so that the hold-time
// metrics see the same times on every member and on a replay of the log.
// Grants made before a snapshot this node restored are unknown and not
// observed. Not safe for concurrent use: the apply path owns it.
type holdTimes map[uint64]holdStart // by token

type holdStart struct {
	at  time.Duration // log clock at the grant
	ttl time.Duration // of the holder's lease
}

// granted records the grant with token at log clock now.
func (h holdTimes) granted(token uint64, now, ttl time.Duration) {
	h[token] = holdStart{at: now, ttl: ttl}
}

// ended forgets the grant with token and returns how long it was held by
// log clock now, and its lease's TTL; ok is false for an unknown grant.
func (h holdTimes) ended(token uint64, now time.Duration) (held, ttl time.Duration, ok bool) {
	s, ok := h[token]
	if !ok {
		return 0, 0, false
	}
	delete(h, token)
	return now - s.at, s.ttl, true
}

// waitStarts remembers when each queued acquire joined its lock's queue,
// on the log's clock, for the wait-time metrics (like holdTimes: waits
// that began before a snapshot this node restored are not observed). Not
// safe for concurrent use: the apply path owns it.
type waitStarts map[waitKey]time.Duration

// waitKey is one lease's place in one lock's queue (a lease waits at most
// once per lock).
type waitKey struct {
	lease fsm.LeaseID
	name  string
}

// ended forgets the wait of lease for name and returns how long it lasted
// by log clock now; ok is false for an unknown wait.
func (w waitStarts) ended(lease fsm.LeaseID, name string, now time.Duration) (waited time.Duration, ok bool) {
	if len(w) == 0 { // no lookup (no hashing of the name) when nobody waits
		return 0, false
	}
	k := waitKey{lease, name}
	at, ok := w[k]
	if !ok {
		return 0, false
	}
	delete(w, k)
	return now - at, true
}

package node

import (
	"slices"
	"sync"

	"github.com/fencehq/fence/internal/fsm"
)

// waiters connects blocked Acquire calls to the grants that the apply path
// makes later (on release, revoke, expiry or the end of a lock-delay).
type waiters struct {
	mu sync.Mutex
	m  map[fsm.LeaseID]map[string][]waiting // guarded by mu
}

// waiting is one Acquire handler: its call number and its wake-up channel.
type waiting struct {
	seq uint64
	ch  chan uint64
}

// register returns a channel that is signalled when call seq of lease may
// have been granted name or cancelled, or when the lease ends. Call before
// proposing the Acquire.
func (w *waiters) register(lease fsm.LeaseID, name string, seq uint64) chan uint64 {
	ch := make(chan uint64, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[fsm.LeaseID]map[string][]waiting{}
	}
	if w.m[lease] == nil {
		w.m[lease] = map[string][]waiting{}
	}
	w.m[lease][name] = append(w.m[lease][name], waiting{seq, ch})
	return ch
}

// leave forgets ch and reports whether it was the last attempt of call seq
// of lease waiting for name here, in one step, so that of two attempts that
// leave together exactly one is the last.
func (w *waiters) leave(lease fsm.LeaseID, name string, seq uint64, ch chan uint64) (last bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	chans := w.m[lease][name]
	for i, c := range chans {
		if c.ch == ch {
			chans = append(chans[:i], chans[i+1:]...)
			break
		}
	}
	last = !slices.ContainsFunc(chans, func(c waiting) bool { return c.seq == seq })
	if len(chans) == 0 {
		delete(w.m[lease], name)
		if len(w.m[lease]) == 0 {
			delete(w.m, lease)
		}
	} else {
		w.m[lease][name] = chans
	}
	return last
}

// event wakes the calls an applied event concerns. It never blocks.
func (w *waiters) event(e *fsm.Event) {
	if e.Kind != fsm.Granted && e.Kind != fsm.LeaseEnded && e.Kind != fsm.WaitCancelled {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	byName := w.m[e.Lease]
	if byName == nil {
		return
	}
	notify := func(chans []waiting, tok uint64) {
		for _, c := range chans {
			select {
			case c.ch <- tok:
			default:
			}
		}
	}
	if e.Kind == fsm.Granted || e.Kind == fsm.WaitCancelled {
		notify(byName[e.Name], e.Token)
		return
	}
	for _, chans := range byName {
		notify(chans, 0)
	}
}

// wakeAll tells every blocked call to look again (after a snapshot restore
// replaced the state under them).
func (w *waiters) wakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, byName := range w.m {
		for _, chans := range byName {
			for _, c := range chans {
				select {
				case c.ch <- 0:
				default:
				}
			}
		}
	}
}

// attempts returns how many handlers of call seq of lease wait for name.
func (w *waiters) attempts(lease fsm.LeaseID, name string, seq uint64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.m[lease][name] {
		if c.seq == seq {
			n++
		}
	}
	return n
}

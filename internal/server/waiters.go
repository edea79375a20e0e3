package server

import (
	"sync"

	"github.com/fencehq/fence/internal/fsm"
)

// waiters connects blocked Acquire calls to the grants that the apply path
// makes later (on release, revoke, expiry or the end of a lock-delay).
type waiters struct {
	mu sync.Mutex
	m  map[fsm.LeaseID]map[string][]chan uint64 // guarded by mu
}

// register returns a channel that receives the token when lease is granted
// name, or 0 when the lease ends first. Call before proposing the Acquire.
func (w *waiters) register(lease fsm.LeaseID, name string) chan uint64 {
	ch := make(chan uint64, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[fsm.LeaseID]map[string][]chan uint64{}
	}
	if w.m[lease] == nil {
		w.m[lease] = map[string][]chan uint64{}
	}
	w.m[lease][name] = append(w.m[lease][name], ch)
	return ch
}

// unregister forgets ch.
func (w *waiters) unregister(lease fsm.LeaseID, name string, ch chan uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	chans := w.m[lease][name]
	for i, c := range chans {
		if c == ch {
			chans = append(chans[:i], chans[i+1:]...)
			break
		}
	}
	if len(chans) == 0 {
		delete(w.m[lease], name)
		if len(w.m[lease]) == 0 {
			delete(w.m, lease)
		}
	} else {
		w.m[lease][name] = chans
	}
}

// event wakes the calls an applied event concerns. It never blocks.
func (w *waiters) event(e *fsm.Event) {
	if e.Kind != fsm.Granted && e.Kind != fsm.LeaseEnded {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	byName := w.m[e.Lease]
	if byName == nil {
		return
	}
	notify := func(chans []chan uint64, tok uint64) {
		for _, ch := range chans {
			select {
			case ch <- tok:
			default:
			}
		}
	}
	if e.Kind == fsm.Granted {
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
			for _, ch := range chans {
				select {
				case ch <- 0:
				default:
				}
			}
		}
	}
}
